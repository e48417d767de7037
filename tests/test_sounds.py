"""Non-speech sounds beside the speech (augment.sounds): drawn per epoch, planned by the sampler, at the level asked,
the transcript unchanged, and clear errors for a missing or empty folder."""

import dataclasses

import numpy as np
import pytest
import soundfile as sf
import torch

from asr_transformer.config import AugmentConfig, Config, ConfigError, DataConfig, FeatureConfig, validate
from asr_transformer.data.draws import Margins, margin_frames, sound_frames, utterance_frames
from asr_transformer.data.loader import UtteranceDataset, filter_utterances
from asr_transformer.data.manifest import Utterance
from asr_transformer.data.sampler import FrameBatchSampler
from asr_transformer.data.sounds import load_sounds, rms, sound_stretch
from asr_transformer.data.tokenizer import train_tokenizer
from asr_transformer.errors import UserError


def tone(freq: float, seconds: float, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.fixture
def sounds(tmp_path):
    folder = tmp_path / "sounds"
    (folder / "bells").mkdir(parents=True)
    sf.write(folder / "a.wav", tone(1000, 0.4), 16000)
    sf.write(folder / "bells" / "b.flac", tone(1000, 0.7, 0.05), 16000)  # in a subfolder, quieter, other format
    sf.write(folder / "silent.wav", np.zeros(1600, np.float32), 16000)  # left out
    (folder / "notes.txt").write_text("not a sound")
    return folder


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    texts = ["one two three", "four five", "six", "seven eight nine ten"]
    utts = []
    for i, text in enumerate(texts):
        path = tmp_path / f"u{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(16000)).astype(np.float32), 16000)  # flat spectrum, unlike a tone
        utts.append(Utterance(f"u{i}", str(path), 1.0, text, "spk"))
    tok = train_tokenizer(texts * 5, tmp_path / "tok", model_type="char")
    return utts, tok


def test_sound_files_are_read_at_unit_level_and_joined_to_the_length_and_level_asked(sounds):
    clips = load_sounds(sounds, 16000)
    assert len(clips) == 2 and all(abs(rms(c) - 1) < 1e-4 for c in clips)
    rng = torch.Generator().manual_seed(0)
    stretch = sound_stretch(clips, 40000, 0.2, rng)  # longer than both clips together: several are joined
    assert stretch.shape == (40000,) and abs(rms(stretch) - 0.2) < 0.02
    assert sound_stretch(clips, 0, 0.2, rng).shape == (0,)


def test_sounds_beside_utterances_are_drawn_per_epoch_and_planned_by_the_sampler(corpus, sounds):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts, tok, DataConfig(), FeatureConfig(), subsampling=4)
    aug = AugmentConfig(sounds=str(sounds), sound_prob=0.5, sound_seconds=1.0, sound_db=[0.0, 0.0], freq_masks=0,
                        time_masks=0)
    margins = margin_frames(aug, FeatureConfig())
    assert margins == Margins(0.0, 0, 0.5, (50, 100))
    draws = [sound_frames(margins, 7, e, i) for e in range(100) for i in range(4)]
    assert draws == [sound_frames(margins, 7, e, i) for e in range(100) for i in range(4)]  # (seed, epoch, utt)
    with_sound = [d for d in draws if d != (0, 0)]
    assert 0.35 < len(with_sound) / len(draws) < 0.65
    assert all(min(d) == 0 and 50 <= max(d) <= 100 for d in with_sound)  # one side only
    assert 0.3 < sum(d[0] > 0 for d in with_sound) / len(with_sound) < 0.7  # either side
    ds = UtteranceDataset(kept, ids, tok, FeatureConfig(), aug, seed=7)
    louder = UtteranceDataset(kept, ids, tok, FeatureConfig(), dataclasses.replace(aug, sound_db=[10.0, 10.0]), seed=7)
    clean = UtteranceDataset(kept, ids, tok, FeatureConfig(), None)
    sampler = FrameBatchSampler(utterance_frames(kept, FeatureConfig()), 600, 8, seed=7, margins=margins)
    seen = 0
    for epoch in range(8):
        for i in range(len(kept)):
            _, feats, tokens, _, _ = ds[(i, epoch)]
            assert tokens == ids[i]  # the transcript stays the same
            before, after = sound_frames(margins, 7, epoch, i)
            assert len(feats) == sampler.epoch_frames(epoch)[i] == len(clean[(i, 0)][1]) + before + after
            if before or after:
                seen += 1
                part = slice(0, before - 2) if before else slice(len(feats) - after + 2, None)
                sound, speech = feats[part], feats[before + 2:len(feats) - after - 2]
                # the tone peaks in a few bins where the speech (white noise) is flat ...
                assert sound.mean(0).max() - sound.mean(0).median() > speech.mean(0).max() - speech.mean(0).median() + 3
                # ... and its level follows augment.sound_db: 10 dB more is ln(10) more log power in every bin
                gain = louder[(i, epoch)][1][part] - sound
                assert torch.allclose(gain, torch.full_like(gain, np.log(10.0)), atol=0.05)
                assert torch.equal(louder[(i, epoch)][1][before:len(feats) - after], feats[before:len(feats) - after])
    assert seen > 5


def test_a_missing_or_empty_sound_folder_or_no_folder_at_all_is_refused_by_name(tmp_path, corpus):
    utts, tok = corpus
    kept, ids, _ = filter_utterances(utts, tok, DataConfig(), FeatureConfig(), subsampling=4)
    with pytest.raises(UserError, match=f"augment.sounds: no folder {tmp_path / 'nowhere'}"):
        UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(sounds=str(tmp_path / "nowhere"),
                                                                        sound_prob=0.3))
    (tmp_path / "empty").mkdir()
    sf.write(tmp_path / "empty" / "zeros.wav", np.zeros(800, np.float32), 16000)
    with pytest.raises(UserError, match="holds no sound file"):
        load_sounds(tmp_path / "empty", 16000)
    (tmp_path / "empty" / "broken.wav").write_bytes(b"RIFF not really")
    with pytest.raises(UserError, match="broken.wav"):
        load_sounds(tmp_path / "empty", 16000)
    with pytest.raises(UserError, match="augment.sounds names no folder"):
        UtteranceDataset(kept, ids, tok, FeatureConfig(), AugmentConfig(sound_prob=0.3))
    cfg = Config()
    cfg.augment.sounds, cfg.augment.sound_prob, cfg.augment.sound_seconds = "sounds", 0.3, 0.2
    with pytest.raises(ConfigError, match="augment.sound_seconds=0.2"):
        validate(cfg)
