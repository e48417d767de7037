"""Decoding: every mode batched, the CTC prefix scorer against brute force, equivalences between modes,
and `decode_manifest` end to end on a tiny package. Tiny random models; fast."""

import itertools
import json
import math

import numpy as np
import pytest
import torch

from asr_transformer.config import PRESETS, DecodeConfig, ModelConfig
from asr_transformer.decode.ctc_prefix import CTCPrefixScorer, ctc_prefix_beam_search
from asr_transformer.decode.search import MODES, DecodeError, attention_scores, recognize
from asr_transformer.model.asr import ASRModel
from asr_transformer.package import check_precision, resolve_precision
from asr_transformer.tokens import BLANK, EOS, MASK, SOS

torch.set_num_threads(1)
VOCAB, FEAT = 12, 20
LENGTHS = (61, 44, 29)  # mixed, so padding is exercised


def make_model(seed=0, peaky=False, eos_bias=-2.0) -> ASRModel:
    torch.manual_seed(seed)
    m = ASRModel(ModelConfig(input_dim=FEAT, vocab_size=VOCAB, **PRESETS["tiny"], nat_weight=0.3)).eval()
    with torch.no_grad():  # a random decoder ends at once too often; make <eos> a little rarer
        m.decoder.output.bias[EOS] += eos_bias
    if peaky:  # near one-hot CTC posteriors, as a trained model gives
        with torch.no_grad():
            m.ctc.proj.weight.mul_(40.0)
            m.ctc.proj.bias.mul_(40.0)
    return m


def make_batch(lengths=LENGTHS, seed=1):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(len(lengths), max(lengths), FEAT, generator=g)
    return feats, torch.tensor(lengths)


def opts(mode, **kw) -> DecodeConfig:
    kw.setdefault("max_len_ratio", 0.6)
    return DecodeConfig(mode=mode, **kw)


def tokens_of(hyps):
    return [[h.tokens for h in nbest] for nbest in hyps]


# ------------------------------------------------------------------------------- CTC prefix scorer vs brute force


def _collapse(path):
    out, prev = [], None
    for s in path:
        if s != BLANK and s != prev:
            out.append(s)
        prev = s
    return tuple(out)


def _brute_force(log_probs: torch.Tensor, T: int):
    """{labelling: probability} over all V^T paths of the first T frames."""
    probs = log_probs[:T].double().exp()
    V = probs.size(1)
    totals: dict[tuple, float] = {}
    for path in itertools.product(range(V), repeat=T):
        p = float(np.prod([probs[t, s].item() for t, s in enumerate(path)])) if T else 1.0
        key = _collapse(path)
        totals[key] = totals.get(key, 0.0) + p
    return totals


def _prefix_prob(totals, prefix):
    return sum(p for lab, p in totals.items() if lab[:len(prefix)] == tuple(prefix))


def test_ctc_prefix_scores_equal_brute_force():
    V, T_max, lengths = 4, 6, [6, 4, 1]  # ids: 0 blank, 1 and 2 tokens, 3 = EOS
    g = torch.Generator().manual_seed(3)
    log_probs = torch.log_softmax(2.0 * torch.randn(len(lengths), T_max, V, generator=g, dtype=torch.float64), -1)
    scorer = CTCPrefixScorer(log_probs, torch.tensor(lengths), eos=3)
    brute = [_brute_force(log_probs[b], n) for b, n in enumerate(lengths)]
    utt = torch.arange(len(lengths))
    cands = torch.tensor([[1, 2, 3]] * len(lengths))
    for prefix in [(), (1,), (2,), (1, 1), (1, 2), (2, 1, 1), (1, 2, 1), (1, 1, 1, 2)]:
        state = scorer.initial_state(utt)
        for tok in prefix:
            state = scorer.advance(state, utt, torch.full_like(utt, tok))
        psi = scorer.score(state, cands)
        for b in range(len(lengths)):
            if prefix:  # the state's own prefix score
                assert math.isclose(math.exp(state.score[b]), _prefix_prob(brute[b], prefix), rel_tol=1e-9, abs_tol=1e-14)
            for k, c in enumerate(cands[b].tolist()):
                expected = brute[b].get(tuple(prefix), 0.0) if c == 3 else _prefix_prob(brute[b], prefix + (c,))
                got = math.exp(psi[b, k])
                assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-14), (prefix, b, c, got, expected)


def test_ctc_prefix_state_selection_and_padding():
    """Selecting/reordering rows (beam search) keeps each row's own state; padding never leaks in."""
    V = 5
    g = torch.Generator().manual_seed(4)
    log_probs = torch.log_softmax(torch.randn(2, 7, V, generator=g), -1)
    lengths = torch.tensor([7, 3])
    batched = CTCPrefixScorer(log_probs, lengths)
    alone = CTCPrefixScorer(log_probs[1:, :3], lengths[1:])
    s = batched.initial_state(torch.tensor([0, 1, 1]))
    s = batched.advance(s, torch.tensor([2, 1, 0]), torch.tensor([4, 1, 1]))  # rows reordered
    s1 = alone.advance(alone.initial_state(torch.tensor([0])), torch.tensor([0]), torch.tensor([4]))
    cands = torch.tensor([[1, 4, EOS]])
    torch.testing.assert_close(batched.score(s.index(torch.tensor([0])), cands), alone.score(s1, cands))


# ------------------------------------------------------------------------------- equivalences between modes


@pytest.mark.parametrize("eos_bias", [0.0, -2.0])
def test_beam_one_equals_greedy(eos_bias):
    m = make_model(eos_bias=eos_bias)
    feats, lens = make_batch()
    for ratio in (0.3, 3.0):
        greedy = recognize(m, feats, lens, opts("greedy", max_len_ratio=ratio))
        beam1 = recognize(m, feats, lens, opts("beam", beam=1, max_len_ratio=ratio))
        assert tokens_of(beam1) == tokens_of(greedy)
        for a, b, n in zip(beam1, greedy, lens.tolist()):
            if len(b[0].tokens) < int(ratio * (((n - 1) // 2 - 1) // 2)):  # ended by <eos>, not the length limit
                assert a[0].score == pytest.approx(b[0].score, abs=1e-4)


def test_joint_with_zero_ctc_weight_equals_beam():
    m = make_model()
    feats, lens = make_batch()
    for lp in (0.0, 0.5):
        beam = recognize(m, feats, lens, opts("beam", beam=4, nbest=3, length_penalty=lp))
        joint = recognize(m, feats, lens, opts("joint", beam=4, nbest=3, length_penalty=lp, ctc_weight=0.0))
        assert tokens_of(joint) == tokens_of(beam)
        for a, b in zip(joint, beam):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
    # pre-beam over the full vocabulary gives the same, and a real CTC weight changes the search
    full = recognize(m, feats, lens, opts("joint", beam=4, ctc_weight=0.0), pre_beam=0)
    assert tokens_of(full) == tokens_of(recognize(m, feats, lens, opts("beam", beam=4)))


def test_joint_scores_add_up():
    """Each joint hypothesis' score = λ·log P_ctc(y) + (1−λ)·log p_att(y <eos>) + bonus·(|y| + 1), with both
    parts computed independently (torch's CTC loss; the decoder teacher-forced)."""
    m = make_model()
    feats, lens = make_batch()
    lam, bonus = 0.4, 0.2
    hyps = recognize(m, feats, lens, opts("joint", beam=3, nbest=3, ctc_weight=lam, length_penalty=bonus))
    with torch.inference_mode():
        enc, enc_lens = m.encode(feats, lens)
        log_probs = m.ctc_log_probs(enc)
        for b, nbest in enumerate(hyps):
            assert len(nbest) == 3
            att = attention_scores(m, enc, enc_lens, torch.full((3,), b), [h.tokens for h in nbest])
            for h, a in zip(nbest, att.tolist()):
                ctc = -torch.nn.functional.ctc_loss(log_probs[b:b + 1, : enc_lens[b]].transpose(0, 1),
                                                    torch.tensor([h.tokens]), enc_lens[b:b + 1],
                                                    torch.tensor([len(h.tokens)]), reduction="sum").item()
                assert h.parts["ctc"] == pytest.approx(ctc, abs=1e-3)
                assert h.parts["att"] == pytest.approx(a, abs=1e-3)
                assert h.score == pytest.approx(lam * ctc + (1 - lam) * a + bonus * (len(h.tokens) + 1), abs=1e-3)


def test_cached_cross_attention_decoder_equals_decoder():
    from asr_transformer.model.mask import lengths_to_mask

    m = make_model()
    feats, lens = make_batch()
    tokens = torch.randint(5, VOCAB, (3, 6), generator=torch.Generator().manual_seed(0))
    token_lens = torch.tensor([6, 2, 4])
    with torch.inference_mode():
        enc, enc_lens = m.encode(feats, lens)
        enc_mask = lengths_to_mask(enc_lens, enc.size(1))
        kv = m.decoder.cross_kv(enc)
        valid = lengths_to_mask(token_lens, 6)
        for causal in (True, False):
            ref = m.decoder(enc, enc_mask, tokens, token_lens, causal=causal)
            got = m.decoder.forward_kv(kv, enc_mask, tokens, token_lens, causal=causal)
            torch.testing.assert_close(got[valid], ref[valid], atol=1e-5, rtol=1e-5)
            got = m.decoder.forward_kv(kv, enc_mask, tokens, token_lens, causal=causal, select=valid)
            torch.testing.assert_close(got, ref[valid], atol=1e-5, rtol=1e-5)


def test_maskctc_zero_iterations_is_greedy_ctc():
    m = make_model()
    feats, lens = make_batch()
    ctc = recognize(m, feats, lens, opts("ctc"))
    assert tokens_of(recognize(m, feats, lens, opts("maskctc", maskctc_iterations=0))) == tokens_of(ctc)
    # nothing below the threshold: nothing masked, greedy CTC again
    assert tokens_of(recognize(m, feats, lens, opts("maskctc", maskctc_threshold=0.0))) == tokens_of(ctc)
    # everything masked: same lengths, every position filled with an ordinary token
    filled = recognize(m, feats, lens, opts("maskctc", maskctc_threshold=1.1, maskctc_iterations=3))
    for a, b in zip(filled, ctc):
        assert len(a[0].tokens) == len(b[0].tokens)
        assert not set(a[0].tokens) & {BLANK, SOS, EOS, MASK}


def test_ctc_greedy_matches_model_and_ctc_beam_one():
    m = make_model(peaky=True)
    feats, lens = make_batch()
    with torch.inference_mode():
        enc, enc_lens = m.encode(feats, lens)
        expected = m.ctc_greedy(enc, enc_lens)
    ctc = recognize(m, feats, lens, opts("ctc"))
    assert [h[0].tokens for h in ctc] == expected
    assert tokens_of(recognize(m, feats, lens, opts("ctc_beam", beam=1))) == tokens_of(ctc)


def test_ctc_prefix_beam_search_merges_prefixes():
    """Two frames, tokens a/blank: P("a") collects aa, a_, _a — more than any single path."""
    p = torch.tensor([[[0.4, 0.6, 1e-9], [0.4, 0.6, 1e-9]]]).log()
    hyps = ctc_prefix_beam_search(p, torch.tensor([2]), beam=4)[0]
    scores = {tuple(h.tokens): math.exp(h.score) for h in hyps}
    assert scores[(1,)] == pytest.approx(0.6 * 0.6 + 0.6 * 0.4 + 0.4 * 0.6)
    assert scores[()] == pytest.approx(0.16)
    assert (1, 1) not in scores  # a_a is impossible with only two frames


def test_rescore_and_ctc_beam_give_valid_hypotheses():
    m = make_model()
    feats, lens = make_batch()
    ctc_beam = recognize(m, feats, lens, opts("ctc_beam", beam=4, nbest=4))
    rescored = recognize(m, feats, lens, opts("rescore", beam=4, nbest=4, ctc_weight=0.5))
    for cb, rs in zip(ctc_beam, rescored):
        for hyps in (cb, rs):
            assert 1 <= len(hyps) <= 4
            assert all(math.isfinite(h.score) for h in hyps)
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            assert all(0 < t < VOCAB for h in hyps for t in h.tokens)
        assert len({tuple(h.tokens) for h in cb}) == len(cb)  # distinct prefixes
        assert {tuple(h.tokens) for h in rs} == {tuple(h.tokens) for h in cb}
        for h in rs:
            assert h.score == pytest.approx(0.5 * h.parts["ctc"] + 0.5 * h.parts["att"])
    # the teacher-forced attention score of greedy's output is greedy's own score
    m = make_model(eos_bias=0.0)
    greedy = recognize(m, feats, lens, opts("greedy", max_len_ratio=5.0))
    with torch.inference_mode():
        enc, enc_lens = m.encode(feats, lens)
        att = attention_scores(m, enc, enc_lens, torch.arange(3), [h[0].tokens for h in greedy])
    ended = 0
    for a, h, n in zip(att.tolist(), greedy, enc_lens.tolist()):
        if len(h[0].tokens) < int(5.0 * n):  # ended with <eos>
            ended += 1
            assert a == pytest.approx(h[0].score, abs=1e-4)
    assert ended


@pytest.mark.parametrize("mode", MODES)
def test_batched_equals_one_at_a_time(mode):
    m = make_model(peaky=mode in ("ctc", "ctc_beam"))
    feats, lens = make_batch()
    o = opts(mode, beam=3, nbest=2, ctc_weight=0.4, length_penalty=0.2, maskctc_threshold=0.5, maskctc_iterations=3)
    batched = recognize(m, feats, lens, o)
    for b, n in enumerate(lens.tolist()):
        alone = recognize(m, feats[b:b + 1, :n], lens[b:b + 1], o)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[b]], (mode, b)
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[b]], abs=1e-3)


def test_joint_beam_uses_ctc_and_respects_limits():
    m = make_model(peaky=True)
    with torch.no_grad():  # the CTC head must not emit ids the attention decoder never proposes
        m.ctc.proj.bias[[SOS, EOS, MASK]] -= 1e3
    feats, lens = make_batch()
    ctc = recognize(m, feats, lens, opts("ctc"))
    # CTC weight 1, whole vocabulary: pure label-synchronous CTC prefix search; with a peaky CTC it finds
    # the best path
    joint = recognize(m, feats, lens, opts("joint", beam=4, ctc_weight=1.0, max_len_ratio=2.0), pre_beam=0)
    assert tokens_of(joint) == tokens_of(ctc)
    for j in joint:
        assert j[0].score == pytest.approx(j[0].parts["ctc"], abs=1e-4)
    for mode in ("greedy", "beam", "joint"):
        for hyps, n in zip(recognize(m, feats, lens, opts(mode, beam=3, max_len_ratio=0.1)), lens.tolist()):
            enc_len = ((n - 1) // 2 - 1) // 2
            assert len(hyps[0].tokens) <= max(1, int(0.1 * enc_len))


def test_unknown_mode_is_a_clear_error():
    m = make_model()
    feats, lens = make_batch()
    with pytest.raises(DecodeError, match="unknown decoding mode 'beamm'.*greedy, beam, joint"):
        recognize(m, feats, lens, opts("beamm"))


# ------------------------------------------------------------------------------- decode_manifest end to end


def test_decode_manifest_end_to_end(tiny_package, tmp_path):
    from asr_transformer.inference.recognizer import Recognizer

    root = tiny_package

    def recognizer(**options):
        return Recognizer(root / "model.pt", device="cpu", threads=1, **options)

    out = tmp_path / "dec"
    rec = recognizer(beam=2, ctc_weight=0.3, length_penalty=0.0, maskctc_iterations=2, maskctc_threshold=0.9,
                     batch_size=3)
    summary = rec.decode_manifest(root / "test.jsonl", out, modes=["greedy", "ctc"], score=True)
    assert set(summary) == {"greedy", "ctc"}
    for mode in ("greedy", "ctc"):
        d = out / mode
        for name in ("hyp.jsonl", "text", "rtf.json", "result.txt"):
            assert (d / name).exists(), (mode, name)
        records = [json.loads(line) for line in (d / "hyp.jsonl").read_text().splitlines()]
        assert [r["id"] for r in records] == ["u0", "u1", "u2", "u3"]  # manifest order
        assert all({"id", "text", "ref", "tokens", "score"} <= set(r) for r in records)
        lines = (d / "text").read_text().splitlines()
        assert [line.split(" ")[0] for line in lines] == sorted(r["id"] for r in records)
        rtf = json.loads((d / "rtf.json").read_text())
        assert rtf["audio_seconds"] == pytest.approx(0.9 + 0.5 + 1.2 + 0.3, abs=1e-3)
        assert rtf["rtf"] == pytest.approx(rtf["decode_seconds"] / rtf["audio_seconds"], rel=1e-2)
        assert rtf["mode"] == mode and "feature_seconds" in rtf
        assert rtf["options"]["beam"] == 2 and rtf["options"]["maskctc_iterations"] == 2  # what decided the output
    # one mode (the options' own): written straight into `out`, with n-best lists
    recognizer(mode="joint", beam=2, batch_size=2, nbest=2).decode_manifest(root / "test.jsonl", tmp_path / "one",
                                                                            score=False)
    rec = json.loads((tmp_path / "one" / "hyp.jsonl").read_text().splitlines()[0])
    assert 1 <= len(rec["nbest"]) <= 2 and rec["nbest"][0]["tokens"] == rec["tokens"]
    with pytest.raises(DecodeError, match="choose from"):
        recognizer(mode="fast")
    with pytest.raises(DecodeError, match="unknown decoding option.*beems"):
        recognizer(beems=3)
    with pytest.raises(DecodeError, match="fp16 needs a CUDA device"):
        recognizer(precision="fp16")
    # a bf16 encoder decodes and says so
    recognizer(precision="bf16", batch_size=2).decode_manifest(root / "test.jsonl", tmp_path / "bf16", ["ctc"])
    assert json.loads((tmp_path / "bf16" / "rtf.json").read_text())["precision"] == "bf16"
    # auto: resolved before decoding, and rtf.json names what ran
    recognizer(precision="auto", batch_size=2).decode_manifest(root / "test.jsonl", tmp_path / "auto", ["ctc"])
    assert json.loads((tmp_path / "auto" / "rtf.json").read_text())["precision"] == resolve_precision("auto", "cpu")


def test_resolve_precision(monkeypatch):
    """auto picks bf16 only on CPUs with AMX (without it bf16 matmuls are slower than fp32); names pass through."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert resolve_precision("auto", "cpu") == "fp32"
    assert [resolve_precision(p, "cpu") for p in ("fp32", "bf16")] == ["fp32", "bf16"]
    assert check_precision("auto", "cpu") == "fp32" and check_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="choose from auto, fp32"):
        check_precision("fp8", "cpu")


@pytest.mark.parametrize("mode", MODES)
def test_too_short_utterances(mode):
    """An utterance with no encoder frame decodes to nothing, alone or beside a normal one."""
    m = make_model()
    feats, _ = make_batch()
    for lens in (torch.tensor([3]), torch.tensor([40, 3])):
        hyps = recognize(m, feats[: len(lens), : int(lens.max())], lens, opts(mode, beam=3))
        assert len(hyps) == len(lens)
        assert hyps[-1][0].tokens == [] or mode in ("greedy", "beam")  # attention may still guess a token


# ------------------------------------------------------------------------------- sampling and whisper's fallback


def test_sampling_cold_is_greedy_and_each_row_draws_alone():
    """A temperature near 0 samples the greedy tokens; at 1, draws differ, and an utterance's draws do not depend
    on the utterances sampled beside it (each row has its own seeded generator)."""
    m = make_model()
    feats, lens = make_batch()
    greedy = recognize(m, feats, lens, opts("greedy"))
    cold = recognize(m, feats, lens, opts("greedy", temperature=1e-4, beam=1))
    assert tokens_of(cold) == tokens_of(greedy)
    hot = recognize(m, feats, lens, opts("beam", temperature=1.0, beam=4, nbest=4))
    assert all(len({tuple(h.tokens) for h in draws}) > 1 for draws in hot)
    assert all(h.parts["temperature"] == 1.0 for draws in hot for h in draws)
    for b, n in enumerate(lens.tolist()):
        alone = recognize(m, feats[b:b + 1, :n], lens[b:b + 1], opts("beam", temperature=1.0, beam=4, nbest=4))[0]
        assert [h.tokens for h in alone] == [h.tokens for h in hot[b]]


def test_fallback_tries_failed_windows_hotter_and_keeps_the_best_try():
    from asr_transformer.decode import Hypothesis as H
    from asr_transformer.decode.fallback import fall_back, temperatures

    o = DecodeConfig(temperature_increment=0.5, logprob_threshold=-1.0, compression_ratio_threshold=2.4)
    assert temperatures(o) == [0.5, 1.0] and temperatures(DecodeConfig()) == []
    first = [[H([1, 2], -1.0), H([2], -3.0)], [H([3], -10.0)], [H([4, 4], -12.0)]]  # averages -1/3, -5, -4
    tries = {0.5: {1: H([5], -1.0), 2: H([6], -6.0)}, 1.0: {2: H([7], -9.0)}}  # -0.5 passes; -3, -4.5 fail
    asked = []

    def decode_at(rows, temperature):
        asked.append((rows, temperature))
        return [[tries[temperature][r]] for r in rows]

    out = fall_back(first, decode_at, lambda t: " ".join(map(str, t)), o)
    assert asked == [([1, 2], 0.5), ([2], 1.0)]
    assert out[0] == first[0] and out[1] == [tries[0.5][1]] and out[2] == [tries[0.5][2]]
    looping = lambda t: "la " * 40 if t == [6] else " ".join(map(str, t))  # noqa: E731
    assert fall_back(first, decode_at, looping, o)[2] == [first[2][0]]  # the best try that does not loop


def test_ctc_silence_empties_the_windows_ctc_and_the_decoder_are_both_unsure_of():
    from asr_transformer.decode import Hypothesis as H
    from asr_transformer.decode.fallback import ctc_silence

    o = DecodeConfig(ctc_confidence_threshold=0.7, logprob_threshold=-1.0)
    confidence = torch.tensor([[0.5, 0.6, 0.0], [0.5, 0.6, 0.0], [0.9, 0.8, 0.7], [0.0, 0.0, 0.0]])
    lengths = torch.tensor([2, 2, 3, 0])
    results = [[H([4, 5], -9.0, {"att": -6.0})],  # CTC unsure (0.55), decoder too (−2 a token): silent
               [H([4, 5], -2.0, {"att": -1.5}), H([4], -3.0, {"att": -2.0})],  # decoder sure (−0.5): kept, n-best too
               [H([4, 5, 6], -20.0, {"att": -20.0})],  # CTC sure (0.8): kept
               [H([7], -5.0, {"att": -5.0})]]  # CTC hears no token (0), decoder unsure: silent
    out = ctc_silence(results, confidence, lengths, o)
    assert [[h.tokens for h in n] for n in out] == [[[]], [[4, 5], [4]], [[4, 5, 6]], [[]]]
    assert [n[0].parts["ctc_confidence"] for n in out] == pytest.approx([0.55, 0.55, 0.8, 0.0])
    assert out[0][0].parts["att"] == -6.0  # what the window would have said stays in its parts
    off = ctc_silence(results, confidence, lengths, DecodeConfig())  # threshold 0: nothing is silent
    assert [[h.tokens for h in n] for n in off] == [[h.tokens for h in n] for n in results]


@pytest.mark.parametrize("mode", ["joint", "greedy", "ctc", "maskctc"])
def test_recognize_silences_the_windows_below_the_ctc_confidence_threshold(mode):
    """With ctc_confidence_threshold, every mode gives no text for the windows whose CTC best path averages a
    lower confidence (the decoder's check is passed by logprob_threshold 0) and the same as without it for the
    others; each best hypothesis carries its confidence, that of `ctc_greedy`'s path."""
    from asr_transformer.decode.ctc_prefix import ctc_greedy

    m = make_model()
    feats, lens = make_batch()
    plain = recognize(m, feats, lens, opts(mode, beam=3))
    with torch.no_grad():
        enc, enc_lens = m.encode(feats, lens)
        path = ctc_greedy(m.ctc_log_probs(enc), enc_lens)
    means = [float(path.confidence[b, :n].mean()) if n else 0.0 for b, n in enumerate(path.lengths.tolist())]
    cut = float(np.mean(sorted(means)[:2]))  # between the lowest two
    gated = recognize(m, feats, lens, opts(mode, beam=3, ctc_confidence_threshold=cut, logprob_threshold=0.0))
    assert [n[0].parts["ctc_confidence"] for n in gated] == pytest.approx(means)
    expected = [[] if c < cut else n[0].tokens for n, c in zip(plain, means)]
    assert [n[0].tokens for n in gated] == expected
    assert any(c < cut and n[0].tokens for n, c in zip(plain, means)) and any(expected)


def test_recognizer_falls_back_on_a_looping_window(tiny_package):
    """End to end: a window whose greedy text loops is sampled again, and what it keeps is what decoding at that
    temperature gives; a window that passes is left as the search gave it."""
    from asr_transformer.decode.fallback import compression_ratio
    from asr_transformer.inference.recognizer import Recognizer

    plain = Recognizer(tiny_package / "model.pt", device="cpu", threads=1, mode="greedy", max_len_ratio=2.0)
    lens = torch.tensor([300])
    feats = torch.randn(1, 300, plain.config.model.input_dim, generator=torch.Generator().manual_seed(3))
    [[h]] = plain.recognize(feats, lens)
    text = plain.text(h.tokens)
    ratio = compression_ratio(text)
    checks = dict(mode="greedy", max_len_ratio=2.0, logprob_threshold=-1e9, beam=3)
    strict = Recognizer(tiny_package / "model.pt", device="cpu", threads=1, temperature_increment=0.25,
                        compression_ratio_threshold=max(1.0, ratio - 0.01), **checks)
    [[kept]] = strict.recognize(feats, lens)
    t = kept.parts.get("temperature")
    assert t in (0.25, 0.5, 0.75, 1.0)
    at_t = Recognizer(tiny_package / "model.pt", device="cpu", threads=1, temperature=t, **checks)
    assert kept.tokens == at_t.recognize(feats, lens)[0][0].tokens
    lenient = Recognizer(tiny_package / "model.pt", device="cpu", threads=1, temperature_increment=0.25,
                         compression_ratio_threshold=ratio + 0.01, **checks)
    assert lenient.recognize(feats, lens)[0][0].tokens == h.tokens
