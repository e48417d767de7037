"""The package's searches in numpy, for the exported recognizer (onnxruntime, no PyTorch).

- `ctc_prefix_beam_search`: the twin of `decode/ctc_prefix.py`'s (frame-synchronous prefix beam search, vectorized
  over beams × tokens); greedy CTC in numpy is `decode/maskctc.py: greedy_with_confidence`, which Mask-CTC shares.
- `beam_search`: attention and joint CTC/attention beam search, the twin of `decode/beam.py` (its module docstring
  gives the algorithm; the steps here carry the same names), with `PrefixScorer`, the twin of
  `decode/ctc_prefix.py: CTCPrefixScorer`; one utterance at a time, the rows of a step being its `beam` hypotheses.
- `split_at_pauses`: long utterances cut at pauses for the joint search, as `decode/beam.py` cuts them.

The LMs and hotwords are the package's own objects (`decode/ngram_binary.py`,
`decode/word_lm.py`, `decode/lexicon_lm.py`, `decode/context.py`), which compute in numpy. The caller runs the
decoder (`Search`), so nothing here knows onnxruntime either. tests/test_export.py pins this search
to the PyTorch one: the same hypotheses and scores, mode by mode, with LMs and hotwords.

    search = beam_search(first, limit=40, opts=options, ctc_log_probs=ctc, lm=lm, context=graph)
    rows, tokens = next(search)  # then search.send(log_probs) until StopIteration, whose value is the n-best
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generator

import numpy as np

from asr_transformer.config import DecodeConfig
from asr_transformer.decode import Hypothesis
from asr_transformer.tokens import BLANK, EOS, MASK, SOS

NEG_INF = -np.inf
FLOOR = -1e30  # as decode/beam.py: scores are clamped here before weighting
LOG_FLOOR = -1e4  # as decode/ctc_prefix.py: CTC log-probabilities are clamped here
END_STEPS = 3  # end detection looks at this many latest steps (ESPnet's M)
NOT_OUTPUT = [BLANK, SOS, MASK]  # ids the attention decoder never emits (decode/greedy.py)

# A search in progress: it yields (rows (W,), tokens (W,)), the hypotheses of its last step to extend and their new
# tokens, is sent the decoder's log-probabilities of the next token after each (W, V) (the caller reorders its
# key/value cache by rows), and returns its n-best. So the caller can run many searches in step, one decoder call
# for all of them (`exported.ExportedRecognizer._beams`).
Search = Generator[tuple[np.ndarray, np.ndarray], np.ndarray, list[Hypothesis]]


# ------------------------------------------------------------------------------------------ CTC searches


_HASH_MUL = 1_000_003  # prefix hash h·c = h·_HASH_MUL + c + 1 (int64, wrapping), as decode/ctc_prefix.py


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(x - safe).sum(axis=axis, keepdims=True)) + safe).squeeze(axis)


def ctc_prefix_beam_search(log_probs: np.ndarray, length: int, beam: int, context=None) -> list[Hypothesis]:
    """CTC prefix beam search over one utterance's log_probs (T, V), the numpy twin of
    `decode.ctc_prefix.ctc_prefix_beam_search` (the same steps, vectorized over beams × tokens): each frame,
    every prefix stays or grows by one of the `beam` most probable tokens (with hotwords, `context`: by
    log-probability + the bonus each would earn that prefix); an extension equal to a prefix in the beam merges into
    it; the `beam` most probable (+ their bonus) survive. → hypotheses, best first."""
    x = log_probs[:length].astype(np.float32)
    T, V = x.shape
    W, K = beam, max(1, min(beam, V - 1))
    tokens_only = x.copy()
    tokens_only[:, BLANK] = NEG_INF
    top_tok = np.argsort(-tokens_only, axis=1, kind="stable")[:, :K]  # (T, K)
    pb = np.full(W, NEG_INF, np.float32)
    pb[0] = 0.0
    pnb = np.full(W, NEG_INF, np.float32)
    last, size, hsh = np.full(W, -1), np.zeros(W, np.int64), np.zeros(W, np.int64)
    ctx_state, ctx_total = np.zeros(W, np.int64), np.zeros(W, np.float32)
    parents, emits = [], []
    with np.errstate(over="ignore"):
        for t in range(T):
            if context is None:
                ck = np.broadcast_to(top_tok[t], (W, K))
            else:  # the tokens of this frame chosen per prefix, with the bonus each would earn it
                ranked = tokens_only[t][None, :] + context.step(ctx_state, np.broadcast_to(np.arange(V), (W, V)))[1]
                ck = np.argsort(-ranked, axis=1, kind="stable")[:, :K]
            lk = x[t][ck]  # (W, K)
            total = np.logaddexp(pb, pnb)
            stay_b = total + x[t, BLANK]
            stay_nb = pnb + np.where(last >= 0, x[t, np.maximum(last, 0)], NEG_INF)
            ext = (np.where(ck == last[:, None], pb[:, None], total[:, None]) + lk).ravel()
            ext_hash = (hsh[:, None] * _HASH_MUL + ck + 1).ravel()
            ext_size, ext_last = np.repeat(size + 1, K), ck.ravel()
            match = ((hsh[:, None] == ext_hash[None, :]) & (size[:, None] == ext_size[None, :])
                     & (last[:, None] == ext_last[None, :]) & np.isfinite(total)[:, None])  # (W, W·K)
            stay_nb = np.logaddexp(stay_nb, _logsumexp(np.where(match, ext[None, :], NEG_INF), 1)).astype(np.float32)
            ext = np.where(match.any(0), NEG_INF, ext).astype(np.float32)
            rank = np.concatenate([np.logaddexp(stay_b, stay_nb), ext])
            if context is not None:
                ext_state, bonus = context.step(ctx_state, ck)
                ext_state, ext_ctx = ext_state.ravel(), (ctx_total[:, None] + bonus).ravel()
                rank = rank + np.concatenate([ctx_total, ext_ctx])
            idx = np.argsort(-rank, kind="stable")[:W]
            stay = idx < W
            e = np.maximum(idx - W, 0)
            src = np.where(stay, idx, e // K)
            token = np.where(stay, -1, ext_last[e])
            pb = np.where(stay, stay_b[src], NEG_INF).astype(np.float32)
            pnb = np.where(stay, stay_nb[src], ext[e]).astype(np.float32)
            last, size = np.where(stay, last[src], token), np.where(stay, size[src], ext_size[e])
            hsh = np.where(stay, hsh[src], ext_hash[e])
            if context is not None:
                ctx_state = np.where(stay, ctx_state[src], ext_state[e])
                ctx_total = np.where(stay, ctx_total[src], ext_ctx[e]).astype(np.float32)
            parents.append(src)
            emits.append(token)
    bonus = ctx_total + context.finish(ctx_state) if context is not None else np.zeros(W, np.float32)
    scores = np.logaddexp(pb, pnb) + bonus
    hyps = []
    for w in np.argsort(-scores, kind="stable"):
        if not np.isfinite(scores[w]):
            continue
        tokens, i = [], w
        for t in range(T - 1, -1, -1):  # backtrack the emitted tokens
            if emits[t][i] >= 0:
                tokens.append(int(emits[t][i]))
            i = parents[t][i]
        parts = {"ctc": float(scores[w])} if context is None else {"ctc": float(scores[w] - bonus[w]),
                                                                   "context": float(bonus[w])}
        hyps.append(Hypothesis(tokens[::-1], float(scores[w]), parts))
    return hyps


# ------------------------------------------------------------------------------------------ CTC prefix scores


@dataclass
class PrefixState:
    """CTC prefix state of N hypotheses: log r^n_t, log r^b_t (N, T) float64, last token (N,), tokens (N,)."""

    r_n: np.ndarray
    r_b: np.ndarray
    last: np.ndarray
    length: np.ndarray

    def index(self, rows: np.ndarray) -> "PrefixState":
        return PrefixState(self.r_n[rows], self.r_b[rows], self.last[rows], self.length[rows])


class PrefixScorer:
    """CTC prefix scores ψ(g·c) of one utterance's hypotheses (`ctc_prefix.CTCPrefixScorer`, its notation).
    log_probs (T, V) CTC log-posteriors of the utterance's frames; window as there (0: every frame)."""

    def __init__(self, log_probs: np.ndarray, window: float = 0.0):
        x = np.maximum(log_probs.astype(np.float32), np.float32(LOG_FLOOR))
        self.T, self.window = x.shape[0], float(window)
        self.xt = np.ascontiguousarray(x.T)  # (V, T)
        self.cum_blank = self.xt[BLANK].astype(np.float64).cumsum()  # (T,): B_t

    def initial_state(self, n: int) -> PrefixState:
        return PrefixState(np.full((n, self.T), NEG_INF), np.tile(self.cum_blank, (n, 1)), np.full(n, -1, np.int64),
                           np.zeros(n, np.int64))

    def _shifted(self, state: PrefixState, r: np.ndarray) -> np.ndarray:
        """r (N, T) one frame later: r_{t-1} at t, and at t = 0 log 1 for the empty g, else log 0."""
        first = np.where(state.length == 0, 0.0, NEG_INF)[:, None]
        return np.concatenate([first, r[:, :-1]], 1)

    def _full_sequence(self, state: PrefixState) -> np.ndarray:
        """log P(g) at the utterance's last frame (N,)."""
        if self.T == 0:
            return np.where(state.length == 0, 0.0, NEG_INF)
        return np.logaddexp(state.r_n[:, -1], state.r_b[:, -1])

    def score(self, state: PrefixState, tokens: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """log ψ(g·c) for tokens (N, K), the candidates `keep` (N, K) marks (others -inf) → (N, K) float64;
        <eos> gives log P(g)."""
        psi = np.full(tokens.shape, NEG_INF)
        rows, cols = np.nonzero(keep & (tokens != EOS))
        if len(rows) and self.T:
            psi[rows, cols] = self._pair_scores(state, rows, tokens[rows, cols])
        return np.where(keep & (tokens == EOS), self._full_sequence(state)[:, None], psi)

    def _pair_scores(self, state: PrefixState, rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """logsumexp_t φ_{t-1}(g, c) + log y_t(c) over each hypothesis' window, for P (row, token) pairs → (P,)."""
        T = self.T
        phi_any = self._shifted(state, np.logaddexp(state.r_n, state.r_b))  # (N, T)
        start, end = np.zeros(len(phi_any), np.int64), np.full(len(phi_any), T)
        if self.window > 0:
            near = phi_any >= phi_any.max(1, keepdims=True) - self.window
            start, end = near.argmax(1), T - near[:, ::-1].argmax(1)
        width = int((end - start)[rows].max())
        t = start[:, None] + np.arange(width)  # (N, w)
        inside = t < end[:, None]
        t = np.minimum(t, T - 1)
        phi_any = np.take_along_axis(phi_any, t, 1)
        phi_same = np.take_along_axis(self._shifted(state, state.r_b), t, 1)
        phi = np.where((tokens == state.last[rows])[:, None], phi_same[rows], phi_any[rows])  # (P, w)
        x = self.xt[tokens[:, None], t[rows]].astype(np.float64)
        return _logsumexp(np.where(inside[rows], phi + x, NEG_INF), 1)

    def advance(self, state: PrefixState, rows: np.ndarray, tokens: np.ndarray) -> PrefixState:
        """The states of hypotheses `rows` (M,) extended by `tokens` (M,) (not <eos>)."""
        s = state.index(rows)
        x = self.xt[tokens].astype(np.float64)  # (M, T)
        phi = np.where((tokens == s.last)[:, None], self._shifted(s, s.r_b),
                       self._shifted(s, np.logaddexp(s.r_n, s.r_b)))  # φ_{t-1}
        C = x.cumsum(1)
        C_prev = np.concatenate([np.zeros_like(C[:, :1]), C[:, :-1]], 1)
        r_n = C + np.logaddexp.accumulate(phi - C_prev, axis=1) if self.T else C
        Bc = np.broadcast_to(self.cum_blank, r_n.shape)
        Bc_prev = np.concatenate([np.zeros_like(Bc[:, :1]), Bc[:, :-1]], 1)
        rn_prev = np.concatenate([np.full_like(r_n[:, :1], NEG_INF), r_n[:, :-1]], 1)
        r_b = Bc + np.logaddexp.accumulate(rn_prev - Bc_prev, axis=1) if self.T else Bc
        return PrefixState(r_n, r_b, tokens.astype(np.int64), s.length + 1)


# ------------------------------------------------------------------------------------------------ the search


@dataclass
class _Beams:
    """The running hypotheses of one utterance (W rows) and its finished ones."""

    ys: np.ndarray  # (W, t) <sos> and the tokens so far
    log_probs: np.ndarray  # (W, V) the decoder's log p_att of the next token
    att: np.ndarray  # (W,) float32
    lm_total: np.ndarray  # (W,) float32
    score: np.ndarray  # (W,) float32; -inf: an empty slot
    ctc_state: PrefixState | None
    ctx_state: np.ndarray  # (W,) int64
    ctx_total: np.ndarray  # (W,) float32
    finished: list
    ended: dict


def beam_search(first: np.ndarray, limit: int, opts: DecodeConfig, *, ctc_log_probs: np.ndarray | None = None,
                nbest: int = 1, pre_beam: int | None = None, lm=None, context=None) -> Search:
    """One utterance's attention (or, with ctc_log_probs (T', V), joint CTC/attention) beam search, as
    `decode.beam.beam_search` with opts' beam, ctc_weight, length_penalty, lm_weight, ctc_window, beam_threshold
    and end_detect, as a `Search`. first (V,): the decoder's log-probabilities after <sos>, whose cache the caller
    holds W copies of; limit: most tokens. Returns up to `nbest` hypotheses, best first."""
    W, V = opts.beam, first.shape[-1]
    scorer = PrefixScorer(ctc_log_probs, opts.ctc_window) if ctc_log_probs is not None else None
    lam = float(opts.ctc_weight) if scorer is not None else 0.0
    K = V if scorer is None or pre_beam == 0 else min(V - 1, max(W, pre_beam or int(1.5 * W)))
    lm_weight = opts.lm_weight if lm is not None else 0.0
    b = _Beams(ys=np.full((W, 1), SOS, np.int64), log_probs=np.repeat(first[None].astype(np.float32), W, 0),
               att=np.zeros(W, np.float32), lm_total=np.zeros(W, np.float32),
               score=np.array([0.0] + [NEG_INF] * (W - 1), np.float32),
               ctc_state=scorer.initial_state(W) if scorer is not None else None,
               ctx_state=np.zeros(W, np.int64), ctx_total=np.zeros(W, np.float32), finished=[], ended={})
    n = 0
    while True:
        n += 1  # tokens of the candidates, <eos> included
        log_probs = b.log_probs.copy()
        log_probs[:, NOT_OUTPUT] = NEG_INF
        running = np.isfinite(b.score)
        forced = limit < n
        lm_lp = None
        if lm is not None:
            lm_lp = np.full((W, V), NEG_INF, np.float32)
            if running.any():
                lm_lp[running] = lm.next_log_probs(b.ys[running].tolist())
        ctx_next = ctx_bonus = None
        if context is not None:
            ctx_next, ctx_bonus = context.step(b.ctx_state, np.broadcast_to(np.arange(V), (W, V)))
            ctx_bonus[:, EOS] = context.finish(b.ctx_state)
        if K < V:  # pre-beam: the best K non-<eos> tokens by attention (and LM and hotwords), and <eos>
            rank = log_probs if lm_lp is None else np.float32(1.0 - lam) * log_probs + np.float32(
                lm_weight) * np.maximum(lm_lp, np.float32(FLOOR))
            rank = rank if ctx_bonus is None else rank + ctx_bonus
            rank = rank.copy()
            rank[:, EOS] = NEG_INF
            cand = np.concatenate([np.argsort(-rank, 1, kind="stable")[:, :K], np.full((W, 1), EOS)], 1)
            cand_lp = np.take_along_axis(log_probs, cand, 1)
        else:
            cand, cand_lp = np.broadcast_to(np.arange(V), (W, V)), log_probs
        att_new = b.att[:, None] + cand_lp
        cand_lm = np.take_along_axis(lm_lp, cand, 1) if lm_lp is not None else None
        keep = np.isfinite(att_new) & running[:, None]
        if cand_lm is not None:
            keep &= cand_lm > NEG_INF
        if forced:
            keep &= cand == EOS
        psi = None
        if scorer is None:
            total = att_new + np.float32(opts.length_penalty * n)
        else:
            psi = np.maximum(scorer.score(b.ctc_state, cand, keep), FLOOR).astype(np.float32)
            total = (np.float32(1.0 - lam) * np.maximum(att_new, np.float32(FLOOR)) + np.float32(lam) * psi
                     + np.float32(opts.length_penalty * n))
        lm_new = None
        if cand_lm is not None:
            lm_new = np.maximum(b.lm_total[:, None] + cand_lm, np.float32(FLOOR))
            total = total + np.float32(lm_weight) * lm_new
        ctx_new = None
        if ctx_bonus is not None:
            ctx_new = b.ctx_total[:, None] + np.take_along_axis(ctx_bonus, cand, 1)
            ctx_next = np.take_along_axis(ctx_next, cand, 1)
            total = total + ctx_new
        total = np.where(keep, total, NEG_INF).astype(np.float32).ravel()  # (W·Kc)

        # the best 2·W: those ending in <eos> among the first W finish, the best W others run on
        Kc = cand.shape[1]
        top = np.argsort(-total, kind="stable")[:min(2 * W, W * Kc)]
        top_row, top_col = top // Kc, top % Kc
        top_tok, top_val = cand[top_row, top_col], total[top]
        is_eos = top_tok == EOS
        run = np.argsort(is_eos, kind="stable")[:W]
        sel_row, sel_col, sel_tok, sel_val = top_row[run], top_col[run], top_tok[run], top_val[run]
        for j in np.flatnonzero(is_eos[:W] & (top_val[:W] > NEG_INF)):
            r, c = top_row[j], top_col[j]
            parts = {"att": float(att_new[r, c])}
            if psi is not None:
                parts["ctc"] = float(psi[r, c])
            if lm_new is not None:
                parts["lm"] = float(lm_new[r, c])
            if ctx_new is not None:
                parts["context"] = float(ctx_new[r, c])
            b.finished.append(Hypothesis(b.ys[r, 1:].tolist(), float(top_val[j]), parts))
            length = b.ys.shape[1] - 1
            b.ended[length] = max(float(top_val[j]), b.ended.get(length, NEG_INF))
        if _done(b, float(sel_val[0]), forced, nbest, opts.end_detect, n):
            break
        if opts.beam_threshold > 0:  # running hypotheses far below the best running one become empty slots
            sel_val = np.where(sel_val < sel_val[0] - np.float32(opts.beam_threshold), NEG_INF, sel_val)
        b.ys = np.concatenate([b.ys[sel_row], sel_tok[:, None]], 1)
        b.att, b.score = att_new[sel_row, sel_col], sel_val.astype(np.float32)
        if lm_new is not None:
            b.lm_total = lm_new[sel_row, sel_col]
        if ctx_new is not None:
            b.ctx_total, b.ctx_state = ctx_new[sel_row, sel_col], ctx_next[sel_row, sel_col]
        if scorer is not None:
            b.ctc_state = scorer.advance(b.ctc_state, sel_row, sel_tok)
        b.log_probs = yield sel_row, sel_tok
    return sorted(b.finished, key=lambda h: h.score, reverse=True)[:nbest] or [Hypothesis([], NEG_INF)]


def _done(b: _Beams, best_running: float, forced: bool, nbest: int, end_detect: float, n: int) -> bool:
    """The search is over: at the length limit, nothing left running, an n-best whose worst scores at least the
    best running hypothesis, or an end detected (ESPnet's end detection, as `decode.beam._ended`)."""
    if forced or best_running == NEG_INF:
        return True
    if end_detect > 0 and b.ended:
        best = max(b.ended.values())
        if all(b.ended.get(n - 1 - m, best) < best - end_detect for m in range(END_STEPS)):
            return True
    if len(b.finished) >= nbest:
        return sorted((h.score for h in b.finished), reverse=True)[nbest - 1] >= best_running
    return False


# ------------------------------------------------------------------------------------------ long utterances


def split_at_pauses(ctc_log_probs: np.ndarray, length: int, max_frames: int) -> list[tuple[int, int]]:
    """One utterance's pieces (first frame, end frame) of at most `max_frames` encoder frames, each cut in the middle
    of the longest run of frames CTC calls blank after the first quarter of the piece (`decode.beam.split_at_pauses`)."""
    if max_frames < 2 or length <= max_frames:
        return [(0, length)]
    blank = ctc_log_probs[:length].argmax(-1) == BLANK
    bounds, start = [], 0
    while length - start > max_frames:
        lo = start + max_frames // 4
        run_start, run_len = _longest_run(blank[lo:start + max_frames])
        cut = lo + run_start + run_len // 2 if run_len else start + max_frames
        bounds.append((start, cut))
        start = cut
    return bounds + [(start, length)]


def _longest_run(mask: np.ndarray) -> tuple[int, int]:
    """(start, length) of the first longest run of True in mask; (0, 0) when there is none."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(starts):
        return 0, 0
    i = int((ends - starts).argmax())
    return int(starts[i]), int(ends[i] - starts[i])
