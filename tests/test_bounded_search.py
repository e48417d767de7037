"""The bounds on the work of the joint CTC/attention search (config.DecodeConfig: ctc_window, beam_threshold,
end_detect, split_seconds): what they leave out, that the work they allow stays bounded on a long utterance of
random speech, and that an easy input decodes the same with them and without. Tiny random models; the work is
counted (`recognize(..., stats=...)`), never timed."""

import numpy as np
import pytest
import torch

from asr_transformer.decode import Hypothesis
from asr_transformer.decode.beam import _ended, join_pieces, split_at_pauses
from asr_transformer.decode.ctc_prefix import CTCPrefixScorer
from asr_transformer.decode.search import recognize
from asr_transformer.tokens import BLANK, EOS
from tests.test_decode import make_batch, make_model, opts, tokens_of

torch.set_num_threads(1)
OFF = dict(ctc_window=0.0, beam_threshold=0.0, end_detect=0.0, split_seconds=0.0)


def _peaky_log_probs(T: int, V: int, seed: int, every: int = 4) -> torch.Tensor:
    """(1, T, V) CTC log-posteriors as a trained model gives: blank, with a token every `every` frames."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, V, generator=g, dtype=torch.float64)
    logits[:, BLANK] += 12.0
    tokens = torch.randint(4, V, (T // every,), generator=g)
    logits[torch.arange(T // every) * every + 1, tokens] += 24.0
    logits[:, EOS] = -30.0
    return torch.log_softmax(logits, -1).unsqueeze(0)


def _advanced(scorer: CTCPrefixScorer, tokens: list[int], rows: int = 3):
    state = scorer.initial_state(torch.zeros(rows, dtype=torch.long))
    for t in tokens:
        state = scorer.advance(state, torch.arange(rows), torch.full((rows,), t))
    return state


def test_windowed_prefix_scores_keep_the_likely_candidates():
    """A window of 30 (log) leaves out only frames whose terms are below e^-30 of the largest: every candidate that
    could be chosen keeps its score; no score rises; the terms summed are a fraction of all frames'."""
    V, T = 12, 400
    lp = _peaky_log_probs(T, V, seed=0)
    path = [t for t in lp[0].argmax(-1).tolist() if t != BLANK]
    full, windowed = CTCPrefixScorer(lp, torch.tensor([T])), CTCPrefixScorer(lp, torch.tensor([T]), window=30.0)
    cands = torch.arange(1, V).expand(3, V - 1)
    for prefix in (path[:0], path[:5], path[:40], path[:90]):
        a = full.score(_advanced(full, prefix), cands)
        b = windowed.score(_advanced(windowed, prefix), cands)
        assert (b <= a + 1e-9).all()
        near = a > a.max() - 20.0  # the candidates a search could take
        torch.testing.assert_close(b[near], a[near], rtol=0, atol=1e-9)
    assert windowed.terms < full.terms / 5


def test_prefix_scores_of_kept_candidates_only():
    lp = _peaky_log_probs(60, 8, seed=1)
    scorer = CTCPrefixScorer(lp, torch.tensor([60]))
    state = _advanced(scorer, [5], rows=2)
    cands = torch.tensor([[4, 5, EOS], [6, 7, EOS]])
    keep = torch.tensor([[True, False, True], [False, True, False]])
    all_scores = scorer.score(state, cands)
    terms = scorer.terms
    some = scorer.score(state, cands, keep)
    torch.testing.assert_close(some[keep], all_scores[keep], rtol=0, atol=0)
    assert torch.isneginf(some[~keep]).all()
    assert scorer.terms - terms == 2 * 60  # the two kept non-<eos> candidates, every frame


def test_long_random_utterance_work_stays_bounded():
    """A generated long utterance of random features, 4× the length of a short one. Without the bounds each
    candidate's CTC score sums every frame of the utterance, and the decoder's every step reads all the encoder
    frames and all the tokens so far. With ctc_window the frames per candidate stay about those of the short
    utterance (the window does not grow with the audio); with split_seconds (4 s: 100 encoder frames) a decoder
    step never reads more than 100 encoder frames, nor more tokens than a piece of them may hold."""
    m = make_model(peaky=True, eos_bias=0.0)
    read = {"frames": 0, "tokens": 0}  # the most a decoder step read
    step = m.decoder_step

    def counted_step(enc, enc_mask, ys, cache=None):
        read["frames"], read["tokens"] = max(read["frames"], enc.size(1)), max(read["tokens"], ys.size(1))
        return step(enc, enc_mask, ys, cache)

    m.decoder_step = counted_step
    settings = {"off": OFF, "window": dict(OFF, ctc_window=30.0), "on": dict(split_seconds=4.0)}
    work, context = {}, {}
    for name, frames in (("short", 401), ("long", 1601)):
        feats, lens = make_batch((frames,), seed=5)
        for setting, kw in settings.items():
            work[name, setting], read["frames"], read["tokens"] = {}, 0, 0
            recognize(m, feats, lens, opts("joint", beam=4, max_len_ratio=1.0, **kw), stats=work[name, setting])
            context[name, setting] = dict(read)
    enc_frames = {"short": 99, "long": 399}  # after the ×4 subsampling
    per_cand = {k: v["ctc_terms"] / v["candidates"] for k, v in work.items()}  # (<eos>, counted, sums no frame)
    for name, n in enc_frames.items():
        assert 0.75 * n < per_cand[name, "off"] <= n
    assert per_cand["long", "window"] < 0.2 * enc_frames["long"]
    assert per_cand["long", "window"] < 2 * per_cand["short", "window"] + 10
    assert per_cand["long", "on"] < 0.2 * enc_frames["long"]
    assert context["long", "off"]["frames"] == 399 and context["long", "off"]["tokens"] > 101
    assert context["long", "on"]["frames"] <= 100 and context["long", "on"]["tokens"] <= 101  # <sos> + 100 tokens


def test_split_at_pauses_cuts_in_the_middle_of_the_longest_pause():
    T, V, D = 100, 6, 3
    tokens = 4 + torch.arange(T) % 2  # speech: a token at every frame …
    tokens[30:42] = BLANK  # … but for a pause of 12 frames (after the first quarter of the first 50 frames)
    tokens[60:64] = BLANK  # and one of 4
    tokens[81:83] = BLANK  # and one of 2, in the same window as that one (shorter: not where the cut goes)
    lp = torch.nn.functional.one_hot(tokens, V).float().log().clamp(min=-30).unsqueeze(0).repeat(2, 1, 1)
    enc = torch.arange(2 * T * D, dtype=torch.float).view(2, T, D)
    lens = torch.tensor([T, 40])
    pieces = split_at_pauses(enc, lens, lp, max_frames=50)
    assert pieces.owner == [0, 0, 0, 1]
    # cuts at 36 (the middle of the pause 30..41) and 62 (the middle of 60..63, the longest in 48..86)
    assert pieces.lengths.tolist() == [36, 26, 38, 40]
    assert int(pieces.lengths.max()) <= 50
    torch.testing.assert_close(pieces.enc[1, :26], enc[0, 36:62])
    torch.testing.assert_close(pieces.ctc_log_probs[3, :40], lp[1, :40])
    assert split_at_pauses(enc, lens, lp, max_frames=100) is None


def test_split_utterances_decode_as_alone_in_a_batch():
    """A batch of a long utterance (searched in pieces) and a short one: each decodes as it does alone."""
    m = make_model(peaky=True, eos_bias=0.0)
    feats, lens = make_batch((1601, 401), seed=6)
    o = opts("joint", beam=3, max_len_ratio=1.0, split_seconds=4.0)
    batched = recognize(m, feats, lens, o)
    for b, n in enumerate(lens.tolist()):
        alone = recognize(m, feats[b:b + 1, :n], lens[b:b + 1], o)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[b]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[b]], abs=1e-3)
    assert len(batched[0]) == 1 and len(batched[0][0].tokens) > 100  # joined: longer than one piece may be


def test_join_pieces():
    hyps = [[Hypothesis([5, 6], -1.0, {"att": -2.0, "ctc": -3.0})], [Hypothesis([7], -4.0, {"att": -1.0, "ctc": -1.0})],
            [Hypothesis([8], -0.5), Hypothesis([9], -0.7)]]
    joined = join_pieces(hyps, [0, 0, 1], 2)
    assert [h.tokens for h in joined[0]] == [[5, 6, 7]]
    assert joined[0][0].score == -5.0 and joined[0][0].parts == {"att": -3.0, "ctc": -4.0}
    assert joined[1] == hyps[2]  # one piece: its n-best as it is


def test_short_utterances_decode_the_same_with_the_bounds():
    """An easy input (short utterances, peaky CTC) gives the same hypotheses and scores with the default bounds as
    without any."""
    m = make_model(peaky=True)
    feats, lens = make_batch()
    for kw in (dict(nbest=2), dict(nbest=1, length_penalty=0.5)):
        on = recognize(m, feats, lens, opts("joint", beam=4, ctc_weight=0.5, **kw))
        off = recognize(m, feats, lens, opts("joint", beam=4, ctc_weight=0.5, **kw, **OFF))
        assert tokens_of(on) == tokens_of(off)
        for a, b in zip(on, off):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


class _Forbidding:
    """An LM that forbids tokens 5 and 6 everywhere (as a LexiconLM forbids phones that continue no word)."""

    def next_log_probs(self, histories):
        out = np.zeros((len(histories), 12), np.float32)
        out[:, [5, 6]] = -np.inf
        return out


def test_forbidden_candidates_cost_no_ctc_scores():
    m = make_model(peaky=True)
    feats, lens = make_batch()
    free, forbidding = {}, {}
    hyps = recognize(m, feats, lens, opts("joint", beam=3, lm_weight=1.0), lm=_Forbidding(), stats=forbidding,
                     pre_beam=0)
    recognize(m, feats, lens, opts("joint", beam=3), stats=free, pre_beam=0)
    assert all(5 not in h.tokens and 6 not in h.tokens for nbest in hyps for h in nbest)
    # of the 9 candidates a hypothesis may take (8 tokens the decoder may emit, and <eos>), 2 are forbidden
    assert forbidding["candidates"] / forbidding["hypotheses"] < free["candidates"] / free["hypotheses"] - 1.0


def test_beam_threshold_drops_hypotheses():
    m = make_model(peaky=True)
    feats, lens = make_batch()
    work = {}
    for threshold in (0.0, 1.0):
        work[threshold] = {}
        recognize(m, feats, lens, opts("joint", beam=4, beam_threshold=threshold), stats=work[threshold])
    assert work[1.0]["hypotheses"] < work[0.0]["hypotheses"]


class _Search:
    end_detect = 10.0


def test_end_detection():
    """ESPnet's rule: hypotheses ended with each of the last 3 token counts, each count's best more than
    end_detect below the best ended one."""
    ended = {4: -5.0, 6: -20.0, 7: -16.0, 8: -30.0}
    assert _ended(_Search, ended, step=9)  # counts 8, 7, 6 all more than 10 below -5
    assert not _ended(_Search, ended, step=10)  # nothing ended with 9 tokens
    assert not _ended(_Search, {**ended, 7: -14.0}, step=9)  # -14 is within 10 of -5
    off = _Search()
    off.end_detect = 0.0
    assert not _ended(off, ended, step=9)
