import dataclasses
import random

import numpy as np
import pytest
import soundfile as sf
import torch

from asr_transformer.config import AugmentConfig, DataConfig, FeatureConfig
from asr_transformer.data.features import add_noise, fbank, num_frames, speaker_means, speed_perturb
from asr_transformer.data.draws import perturbed_frames, speed_factor, utterance_frames, vtlp_warp
from asr_transformer.data.loader import Unreadable, UtteranceDataset, filter_utterances, make_loader
from asr_transformer.data.manifest import Utterance
from asr_transformer.data.sampler import FRAME_MULTIPLE, FrameBatchSampler, round_up
from asr_transformer.data.tokenizer import train_tokenizer


def lengths(n=300, seed=0):
    rng = random.Random(seed)
    return [rng.randint(50, 1472) for _ in range(n)]  # ≤ 1500 once padded to FRAME_MULTIPLE


@pytest.mark.parametrize("max_frames,max_batch", [(3000, 64), (10000, 8), (1500, 100)])
def test_batches_respect_frame_bound_and_cover_everything(max_frames, max_batch):
    frames = lengths()
    sampler = FrameBatchSampler(frames, max_frames, max_batch, seed=1)
    for epoch in range(3):
        batches = sampler.batches(epoch)
        assert sorted(i for b in batches for i in b) == list(range(len(frames)))
        for b in batches:
            assert len(b) <= max_batch
            assert len(b) * round_up(max(frames[i] for i in b), FRAME_MULTIPLE) <= max_frames
    assert sampler.batches(0) == sampler.batches(0)
    assert sampler.batches(0) != sampler.batches(1)  # reshuffled per epoch


def test_bucketing_keeps_padding_low():
    frames = lengths(1000)
    batches = FrameBatchSampler(frames, 20000, 200, seed=0, jitter=0.1).batches(0)
    real = sum(frames)
    padded = sum(len(b) * max(frames[i] for i in b) for b in batches)
    assert padded / real < 1.25


def test_too_long_utterance_is_reported():
    with pytest.raises(ValueError, match="longer than data.max_frames"):
        FrameBatchSampler([100, 5000], 1000, 10)
    with pytest.raises(ValueError, match="longer than data.max_frames=1000 frames at speed 0.9"):
        FrameBatchSampler([100, 950], 1000, 10, factors=[0.9, 1.0])  # fits at speed 1, not at 0.9


def test_speed_factor_is_a_function_of_seed_epoch_and_utterance():
    factors = [0.9, 1.0, 1.1]
    draws = [speed_factor(factors, 5, 2, i) for i in range(3000)]
    assert draws == [speed_factor(factors, 5, 2, i) for i in range(3000)]
    assert draws != [speed_factor(factors, 5, 3, i) for i in range(3000)]
    assert all(900 < draws.count(f) < 1100 for f in factors)
    assert speed_factor([1.0], 5, 2, 7) == 1.0


@pytest.mark.parametrize("factor", [0.8, 0.9, 1.0, 1.1, 1.2])
def test_perturbed_frames_bounds_the_frames_of_perturbed_audio(factor):
    rng = random.Random(0)
    for _ in range(40):
        samples = rng.randint(400, 60000)
        got = fbank(speed_perturb(torch.zeros(samples), factor)).shape[0]
        estimate = perturbed_frames(num_frames(samples), factor)
        assert got <= estimate <= got + 3


def test_batches_are_planned_at_each_utterances_speed():
    frames, factors = lengths(1000), [0.9, 1.0, 1.1]
    sampler = FrameBatchSampler(frames, 20000, 200, seed=4, factors=factors)
    slowest = FrameBatchSampler([perturbed_frames(n, 0.9) for n in frames], 20000, 200, seed=4)  # the old plan
    played = sampler.epoch_frames(1)
    assert played == [perturbed_frames(n, speed_factor(factors, 4, 1, i)) for i, n in enumerate(frames)]

    def padded(batches):
        return sum(len(b) * round_up(max(played[i] for i in b), FRAME_MULTIPLE) for b in batches)

    for b in sampler.batches(1):
        assert len(b) * round_up(max(played[i] for i in b), FRAME_MULTIPLE) <= 20000
    assert sum(played) / padded(sampler.batches(1)) > 0.88 > 0.85 > sum(played) / padded(slowest.batches(1))


def test_shards_are_disjoint_and_resume_skips():
    frames = lengths(400)
    full = FrameBatchSampler(frames, 4000, 32, seed=3).batches(2)
    shards = [FrameBatchSampler(frames, 4000, 32, seed=3, rank=r, world=2).batches(2) for r in range(2)]
    assert len(shards[0]) == len(shards[1])
    assert shards[0] == full[0:len(full) - len(full) % 2:2] and shards[1] == full[1:len(full) - len(full) % 2:2]
    sampler = FrameBatchSampler(frames, 4000, 32, seed=3)
    sampler.set_epoch(2, start=5)
    assert [[i for i, _ in b] for b in sampler] == full[5:]
    assert len(sampler) == len(full) - 5


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    texts = ["one two three", "four five", "six", "seven eight nine ten", "a very long sentence for a short clip"]
    durations = [1.0, 0.8, 0.5, 1.2, 0.3]
    utts = []
    for i, (text, dur) in enumerate(zip(texts, durations)):
        path = tmp_path / f"u{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(16000 * dur))).astype(np.float32), 16000)
        utts.append(Utterance(f"u{i}", str(path), dur, text, "spk"))
    tok = train_tokenizer(texts * 5, tmp_path / "tok", model_type="char")
    return utts, tok


def test_filters_count_what_they_drop(corpus):
    utts, tok = corpus
    data = DataConfig(min_duration=0.6, max_duration=1.1)
    kept, ids, counts = filter_utterances(utts, tok, data, FeatureConfig(), subsampling=4)
    assert [u.id for u in kept] == ["u0", "u1"]
    assert counts.too_short == 2 and counts.too_long == 1 and counts.kept == 2
    data = DataConfig(min_duration=0.1, max_duration=5)
    kept, ids, counts = filter_utterances(utts, tok, data, FeatureConfig(), subsampling=4)
    assert counts.unalignable == 1 and "u4" not in [u.id for u in kept]  # 38 chars in 0.3 s
    # slowed to 0.9 of its speed, u0's 1.0 s lasts 1.11 s: too long for 1.1 s (Whisper's window would overflow)
    data = DataConfig(min_duration=0.6, max_duration=1.1)
    kept, ids, counts = filter_utterances(utts, tok, data, FeatureConfig(), subsampling=4, speed_factors=[0.9, 1.1])
    assert [u.id for u in kept] == ["u1"] and counts.too_long == 2


def test_loader_batches_pad_and_augment_deterministically(corpus):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:4], tok, DataConfig(), FeatureConfig(), subsampling=4)
    aug = AugmentConfig(speed_factors=[0.9, 1.0, 1.1], time_warp=3)
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=7, cache_audio=True)
    sampler = FrameBatchSampler(utterance_frames(kept, FeatureConfig()), 400, 8, seed=7, factors=aug.speed_factors)
    first = list(make_loader(ds, sampler))
    again = list(make_loader(ds, sampler))
    for a, b in zip(first, again):
        assert a.ids == b.ids and torch.equal(a.feats, b.feats)
    planned = dict(zip([u.id for u in kept], sampler.epoch_frames(0)))
    for batch in first:
        assert batch.feats.shape[0] * batch.feats.shape[1] <= 400
        for i, n in enumerate(batch.feat_lens.tolist()):
            assert planned[batch.ids[i]] - 3 <= n <= planned[batch.ids[i]]  # played at the planned speed
            assert torch.all(batch.feats[i, n:] == 0)
            assert batch.tokens[i, batch.token_lens[i]:].eq(-1).all()
            assert tok.decode(batch.tokens[i, :batch.token_lens[i]].tolist()) == batch.texts[i]
    sampler.set_epoch(1)
    other = {b.ids[0]: b.feats for b in make_loader(ds, sampler)}
    assert any(not torch.equal(other.get(b.ids[0], b.feats[:0]), b.feats) for b in first)


def test_batches_carry_the_speakers_mean_of_clean_features(corpus):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:4], tok, DataConfig(), FeatureConfig(), subsampling=4)
    kept = [dataclasses.replace(u, speaker=s) for u, s in zip(kept, ["ann", "bob", "ann", "bob"])]
    # every feature the model sees is perturbed
    aug = AugmentConfig(speed_factors=[0.9, 1.1], noise_prob=1.0, vtlp_warps=[0.9, 1.1], eq_prob=1.0)
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3, speaker_cmn=True)
    clean = [fbank(torch.from_numpy(sf.read(u.audio, dtype="float32")[0]), FeatureConfig()) for u in kept]
    expected = speaker_means([u.speaker for u in kept], lambda i: clean[i])
    sampler = FrameBatchSampler(utterance_frames(kept, FeatureConfig()), 4000, 8, seed=3, factors=aug.speed_factors)
    for batch in make_loader(ds, sampler):
        assert batch.speaker_mean.shape == (len(batch.ids), batch.feats.size(2))
        for i, utt_id in enumerate(batch.ids):
            torch.testing.assert_close(batch.speaker_mean[i], expected[int(utt_id[1:])], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(expected[0], torch.cat([clean[0], clean[2]]).mean(0))
    plain = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3)
    assert next(iter(make_loader(plain, sampler))).speaker_mean is None


def test_own_mean_prob_gives_some_utterances_their_own_mean(corpus):
    """augment.own_mean_prob: that share of the utterances, drawn per epoch, carries its own (perturbed, noisy)
    features' mean instead of its speaker's, as a file transcribed alone would be normalized."""
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:4], tok, DataConfig(), FeatureConfig(), subsampling=4)
    aug = AugmentConfig(speed_factors=[0.9, 1.1], noise_prob=1.0, freq_masks=0, time_masks=0, own_mean_prob=0.5)
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3, speaker_cmn=True)
    own = speaker = 0
    for epoch in range(6):
        for i in range(len(kept)):
            _, feats, _, _, mean = ds[(i, epoch)]
            if torch.allclose(mean, ds.speaker_mean[i]):
                speaker += 1
            else:
                torch.testing.assert_close(mean, feats.mean(0))
                own += 1
            assert torch.equal(ds[(i, epoch)][4], mean)  # a function of (seed, epoch, utterance)
    assert own > 0 and speaker > 0
    never = UtteranceDataset(kept, ids, tok, FeatureConfig(), dataclasses.replace(aug, own_mean_prob=0.0), seed=3,
                             speaker_cmn=True)
    assert all(torch.equal(never[(i, e)][4], never.speaker_mean[i]) for e in range(3) for i in range(len(kept)))


def test_vtlp_warps_each_utterance_by_its_drawn_factor(corpus):
    """augment.vtlp_warps: the features of an utterance in an epoch come through the filterbank warped by the
    factor drawn for it (a function of seed, epoch and utterance), at its drawn speed."""
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:3], tok, DataConfig(), FeatureConfig(), subsampling=4)
    aug = AugmentConfig(speed_factors=[0.9, 1.1], vtlp_warps=[0.9, 1.0, 1.1], freq_masks=0, time_masks=0)
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3)
    waves = [torch.from_numpy(sf.read(u.audio, dtype="float32")[0]) for u in kept]
    warps = set()
    for epoch in range(4):
        for i in range(len(kept)):
            factor, warp = speed_factor(aug.speed_factors, 3, epoch, i), vtlp_warp(aug.vtlp_warps, 3, epoch, i)
            torch.testing.assert_close(ds[(i, epoch)][1], fbank(speed_perturb(waves[i], factor), warp=warp))
            warps.add(warp)
    assert warps == {0.9, 1.0, 1.1}
    with pytest.raises(ValueError, match="vtlp_warps"):
        UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(vtlp_warps=[0.0, 1.0]))


def test_eq_prob_colours_that_share_of_utterances_with_a_random_microphone(corpus):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:4], tok, DataConfig(), FeatureConfig(), subsampling=4)
    aug = AugmentConfig(eq_prob=0.5, eq_db=6.0, freq_masks=0, time_masks=0)
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3)
    clean = [fbank(torch.from_numpy(sf.read(u.audio, dtype="float32")[0])) for u in kept]
    coloured = plain = 0
    for epoch in range(5):
        for i in range(len(kept)):
            curve = ds[(i, epoch)][1] - clean[i]
            torch.testing.assert_close(curve, curve[:1].expand_as(curve), atol=1e-4, rtol=0)  # one filter per item
            coloured, plain = (coloured + 1, plain) if curve.abs().max() > 1e-3 else (coloured, plain + 1)
            assert torch.equal(ds[(i, epoch)][1], ds[(i, epoch)][1])  # a function of (seed, epoch, utterance)
    assert coloured > 0 and plain > 0
    with pytest.raises(ValueError, match="eq_prob"):
        UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(eq_prob=1.5))


def test_cached_features_are_computed_once_and_equal_fresh_ones(corpus, tmp_path):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:4], tok, DataConfig(), FeatureConfig(), subsampling=4)
    aug = AugmentConfig(speed_factors=[0.9, 1.1], freq_masks=1, time_masks=1)
    fresh = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3)
    cached = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3, cache_audio=True)
    first = [cached[(i, e)][1] for e in range(3) for i in range(len(kept))]
    for u in kept:  # from here on the audio files are gone: only the cache can answer
        (tmp_path / f"{u.id}.wav").unlink()
    again = [cached[(i, e)][1] for e in range(3) for i in range(len(kept))]
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # SpecAugment masks never land in the cache
    gone = fresh[(0, 0)]  # not in the cache: the loader leaves it out (test_an_unreadable_utterance_is_left_out...)
    assert isinstance(gone, Unreadable) and gone.id == "u0" and "u0.wav" in gone.message
    assert len(cached.cache) <= 2 * len(kept)  # one entry per (utterance, speed factor)


def test_dither_caches_the_waveform_not_the_features(corpus):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:2], tok, DataConfig(), FeatureConfig(), subsampling=4)
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(dither=1.0), AugmentConfig(), seed=3, cache_audio=True)
    a, b = ds[(0, 0)][1], ds[(0, 0)][1]
    assert not torch.equal(a, b)  # fresh dither every time
    assert list(ds.cache) == [(0, 0.0, 0.0)]  # the waveform


def test_noise_is_drawn_per_epoch_and_utterance_at_the_asked_snr(corpus):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:4], tok, DataConfig(), FeatureConfig(), subsampling=4)
    no_masks = dict(freq_masks=0, time_masks=0)
    clean = UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(**no_masks), seed=3)
    aug = AugmentConfig(noise_prob=0.5, noise_snr=[0.0, 10.0], **no_masks)
    noisy = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=3, cache_audio=True)
    snrs = [noisy.noise_snr(e, i) for e in range(40) for i in range(len(kept))]
    drawn = [s for s in snrs if s is not None]
    assert 0.3 < len(drawn) / len(snrs) < 0.7 and all(0.0 <= s <= 10.0 for s in drawn)
    assert snrs == [noisy.noise_snr(e, i) for e in range(40) for i in range(len(kept))]  # a pure function
    e, i = next((e, i) for e in range(40) for i in range(len(kept)) if noisy.noise_snr(e, i) is not None)
    a, b = noisy[(i, e)][1], noisy[(i, e)][1]
    assert torch.equal(a, b) and not torch.equal(a, clean[(i, e)][1])  # the same noise each time it is asked
    e, i = next((e, i) for e in range(40) for i in range(len(kept)) if noisy.noise_snr(e, i) is None)
    assert torch.equal(noisy[(i, e)][1], clean[(i, e)][1])
    with pytest.raises(ValueError, match="noise_snr"):
        UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(noise_prob=0.5, noise_snr=[20.0, 10.0]))


@pytest.mark.parametrize("snr", [0.0, 10.0, 30.0])
def test_add_noise_reaches_the_snr(snr):
    wave = torch.sin(torch.arange(16000) * 0.05) * 0.3
    noisy = add_noise(wave, snr, torch.Generator().manual_seed(0))
    measured = 10 * torch.log10(wave.pow(2).mean() / (noisy - wave).pow(2).mean())
    assert abs(float(measured) - snr) < 0.1


def nan_utterance(tmp_path) -> Utterance:
    x = np.full(12000, 0.1, np.float32)
    x[500] = np.nan  # the header is fine: `asr prepare` measures it, the loader finds the NaN
    sf.write(tmp_path / "nan.wav", x, 16000, subtype="FLOAT")
    return Utterance("bad", str(tmp_path / "nan.wav"), 0.75, "six", "spk")


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unreadable_utterance_is_left_out_with_one_warning(corpus, tmp_path, capsys, workers):
    from asr_transformer.data import loader

    utts, tok = corpus
    loader._warned.clear()
    kept, ids, _ = filter_utterances(utts[:4] + [nan_utterance(tmp_path)], tok, DataConfig(), FeatureConfig(), 4)
    assert [u.id for u in kept] == ["u0", "u1", "u2", "u3", "bad"]
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(speed_factors=[1.0]), seed=1,
                          speaker_cmn=True)
    for max_batch in (8, 1):  # with the others, and alone in its batch
        sampler = FrameBatchSampler(utterance_frames(kept, FeatureConfig()), 4000, max_batch, seed=1)
        batches = make_loader(ds, sampler, num_workers=workers)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            seen = [i for batch in batches for i in batch.ids]
            assert sorted(seen) == ["u0", "u1", "u2", "u3"] and batches.skipped == 1
        # for a trainer counting batches to resume from: a batch left with nothing is a None in its place
        counted = list(make_loader(ds, sampler, num_workers=workers, placeholders=True))
        assert len(counted) == len(sampler) and counted.count(None) == (max_batch == 1)
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if "'bad'" in line]
    assert warnings == [f"warning: utterance 'bad' left out: {tmp_path / 'nan.wav'}: audio contains NaN or infinite "
                        f"samples; fix the file or remove the utterance from the manifest"]  # once, whatever read it
    assert err.count("warning: 1 utterance(s) with unreadable audio left out of this pass over the data") == 6


def test_training_goes_on_past_an_unreadable_utterance(tone_corpus, tmp_path, capsys):
    """One NaN WAV among the training utterances: a tiny model trains its epoch on the others, with a warning."""
    import shutil

    from asr_transformer.config import load_config
    from asr_transformer.data.manifest import read_manifest, write_manifest
    from asr_transformer.train.setup import compute_cmvn
    from asr_transformer.train.trainer import train

    for name in ("dev.jsonl", "tokenizer"):
        (shutil.copytree if name == "tokenizer" else shutil.copy)(tone_corpus / name, tmp_path / name)
    good = read_manifest(tone_corpus / "train.jsonl")[:12]
    write_manifest(tmp_path / "good.jsonl", good)
    write_manifest(tmp_path / "train.jsonl", good[:6] + [nan_utterance(tmp_path)] + good[6:])
    # the CMVN pass leaves the file out too: the statistics are those of the good utterances
    compute_cmvn(tmp_path / "good.jsonl", tmp_path / "good_cmvn.json")
    cfg = load_config(None, ["model.preset=tiny", "data.max_frames=1500", "data.max_batch=4", "train.max_epochs=1",
                             "train.warmup_steps=2"])
    state = train(cfg, tmp_path / "train.jsonl", tmp_path / "dev.jsonl", tmp_path / "tokenizer", tmp_path / "exp",
                  device="cpu", threads=1)
    assert state.epoch == 1 and state.step >= 3
    err = capsys.readouterr().err
    assert err.count("warning: utterance 'bad' left out:") == 1 and "nan.wav" in err
    assert (tmp_path / "exp" / "cmvn.json").read_text() == (tmp_path / "good_cmvn.json").read_text()


def test_silence_around_utterances_is_drawn_per_epoch_and_planned_by_the_sampler(corpus):
    from asr_transformer.data.draws import Margins, margin_frames, silence_frames

    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts[:4], tok, DataConfig(), FeatureConfig(), subsampling=4)
    aug = AugmentConfig(speed_factors=[0.9, 1.0, 1.1], silence_prob=0.5, silence_seconds=0.3, freq_masks=0,
                        time_masks=0)
    margins = margin_frames(aug, FeatureConfig())
    assert margins == Margins(0.5, 30)
    draws = [silence_frames(margins, 7, e, i) for e in range(50) for i in range(4)]
    assert 0.35 < sum(d != (0, 0) for d in draws) / len(draws) < 0.65 and max(max(d) for d in draws) <= 30
    assert draws == [silence_frames(margins, 7, e, i) for e in range(50) for i in range(4)]  # (seed, epoch, utt)
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=7)
    sampler = FrameBatchSampler(utterance_frames(kept, FeatureConfig()), 600, 8, seed=7, factors=aug.speed_factors,
                                margins=margins)
    clean = UtteranceDataset(kept, ids, tok, FeatureConfig(), None)
    for epoch in range(6):
        for i in range(len(kept)):
            feats = ds[(i, epoch)][1]
            before, after = silence_frames(margins, 7, epoch, i)
            assert sampler.epoch_frames(epoch)[i] - 3 <= len(feats) <= sampler.epoch_frames(epoch)[i]
            if before > 5 and speed_factor(aug.speed_factors, 7, epoch, i) == 1.0:  # quieter than the speech
                assert len(feats) == len(clean[(i, 0)][1]) + before + after
                assert feats[:before - 2].mean() < clean[(i, 0)][1].mean() - 3
    with pytest.raises(ValueError, match="augment.silence_prob must be in"):
        UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(silence_prob=2.0))
