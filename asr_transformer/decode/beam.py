"""Attention beam search, optionally joint with CTC prefix scores (Watanabe et al. 2017), batched.

All utterances' hypotheses are decoded together as B × beam rows of one tensor (ESPnet's batch beam
search, WeNet's attention beam search). At each output step, for every utterance:

1. the decoder (with its key/value cache) gives log p_att(c | g) for each running hypothesis g;
2. joint mode only: the candidates c are pre-pruned to the `pre_beam` best by attention score (plus <eos>,
   always scored), and the CTC prefix scorer gives log ψ(g·c) for all of them at once;
3. each candidate's score is  λ·log ψ(g·c) + (1 − λ)·log p_att(g·c) + β·log p_lm(g·c) + length_penalty·|g·c|
   (λ = ctc_weight; β = lm_weight, shallow fusion with an n-gram LM when one is given; |g·c| counts <eos>),
   plus, with hotwords, the context graph's bonus B(g·c) (decode/context.py; at <eos> the unfinished phrase's
   part is given back); the pre-beam ranks by the attention, LM and hotword terms); the best 2·beam candidates
   of the utterance are taken:
   those ending in <eos> among the first `beam` become finished hypotheses, the best `beam` others keep
   running (so the beam stays full);
4. an utterance is done when it has `nbest` finished hypotheses and the nbest-th best of them scores at least
   as well as its best running one (scores only fall as hypotheses grow when length_penalty ≤ 0, so the n-best
   is then final; with a positive bonus this is the usual heuristic), when `end_detect` finds that hypotheses
   ending now no longer compete (below), or when its hypotheses reach `max_len_ratio` × encoder frames tokens:
   then <eos> is forced. Done utterances leave the batch.

What bounds the work of a step, so that long or unfamiliar audio costs no more per second than familiar audio:
- only the candidates that can be chosen are scored: one the LM forbids (a LexiconLM's phone that continues no
  word) or that a dead hypothesis would extend costs no CTC prefix score, and empty slots no LM query;
- `ctc_window`: a candidate's CTC prefix score sums only the frames near where its prefix stands in the audio
  (`CTCPrefixScorer.frames`), not all T' of them;
- `beam_threshold`: running hypotheses that score more than this below the best running one are dropped;
- `end_detect` (ESPnet's end detection): an utterance stops when hypotheses ended with each of the last END_STEPS
  token counts, and the best of each count scores more than `end_detect` below the best ended one;
- long utterances: a step reads the decoder's whole context (the tokens so far, every encoder frame), so
  `search.recognize` searches an utterance longer than `split_seconds` in pieces cut at pauses (`split_at_pauses`,
  decoded as one batch; `join_pieces`).

The cross-attention cache of an utterance is the same for all its rows and a hypothesis never moves to
another utterance, so only the self-attention cache is reordered between steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from asr_transformer.config import DecodeConfig
from asr_transformer.decode import Hypothesis
from asr_transformer.decode.context import ContextGraph
from asr_transformer.decode.ctc_prefix import CTCPrefixScorer
from asr_transformer.decode.greedy import mask_not_output, max_lengths
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import BLANK, EOS, SOS

NEG_INF = float("-inf")
FLOOR = -1e30  # scores are clamped here before weighting, so 0·(-inf) never makes a NaN
DEFAULTS = DecodeConfig()  # the decoding defaults (written in config.py only)
END_STEPS = 3  # end detection looks at this many latest steps (ESPnet's M)


@dataclass
class _Search:
    """The fixed inputs of one search: sizes, weights and scorers."""

    W: int  # beam
    K: int  # candidates per hypothesis (V: all)
    V: int  # vocabulary
    M: int  # decoder layers: cache[:M] self-attention, cache[M:] cross-attention
    lam: float  # λ, the CTC weight (0 without CTC)
    length_penalty: float
    lm_weight: float
    nbest: int
    limit: torch.Tensor  # (B,) most tokens per utterance
    scorer: CTCPrefixScorer | None
    lm: object
    dev: torch.device
    beam_threshold: float = 0.0  # running hypotheses this far below the best running one are dropped (0: none)
    end_detect: float = 0.0  # margin of the end detection (0: none)
    stats: dict | None = None  # the work done, counted when given (beam_search's `stats`)
    context: ContextGraph | None = None  # hotwords


@dataclass
class _Beams:
    """The running hypotheses: W rows per active utterance, and the finished ones of every utterance."""

    ys: torch.Tensor  # (N, t) <sos> and the tokens so far
    log_probs: torch.Tensor  # (N, V) the decoder's log p_att of the next token
    cache: list  # the decoder's key/value cache
    enc: torch.Tensor  # (N, T', D)
    enc_mask: torch.Tensor  # (N, T')
    att: torch.Tensor  # (N,) attention log-probability of each running hypothesis
    lm_total: torch.Tensor  # (N,) its LM log-probability (with an LM)
    score: torch.Tensor  # (N,) its score; -inf = an empty slot
    ctc_state: object  # the CTC prefix scorer's state (joint)
    ctx_state: torch.Tensor  # (N,) each hypothesis' state in the context graph (hotwords)
    ctx_total: torch.Tensor  # (N,) and its hotword bonus so far
    active: list[int]  # original utterance index of each group of W rows
    finished: list[list[Hypothesis]]
    ended: list[dict[int, float]]  # per utterance: token count → the best score of the hypotheses ended with it


@dataclass
class _Step:
    """One step's candidates: the new attention (and LM) totals, CTC prefix scores, and the weighted total."""

    cand: torch.Tensor  # (N, Kc) candidate tokens
    att_new: torch.Tensor  # (N, Kc)
    psi: torch.Tensor | None  # (N, Kc) CTC prefix scores (joint)
    lm_new: torch.Tensor | None  # (N, Kc) LM totals (with an LM)
    ctx_new: torch.Tensor | None  # (N, Kc) hotword bonus totals (with hotwords) ...
    ctx_next: torch.Tensor | None  # (N, Kc) ... and the context graph's next states
    total: torch.Tensor  # (n, W·Kc) weighted score, -inf where not allowed
    forced: torch.Tensor  # (n,) utterances at their length limit


def beam_search(model, enc: torch.Tensor, enc_lens: torch.Tensor, beam: int = DEFAULTS.beam, *,
                ctc_log_probs: torch.Tensor | None = None, ctc_weight: float = DEFAULTS.ctc_weight,
                length_penalty: float = DEFAULTS.length_penalty, max_len_ratio: float = DEFAULTS.max_len_ratio,
                nbest: int = 1, pre_beam: int | None = None, lm=None, lm_weight: float = 0.0,
                ctc_window: float = DEFAULTS.ctc_window, beam_threshold: float = DEFAULTS.beam_threshold,
                end_detect: float = DEFAULTS.end_detect, stats: dict | None = None,
                context: ContextGraph | None = None) -> list[list[Hypothesis]]:
    """Batched attention (or joint CTC/attention) beam search.

    Args:
        model: ASRModel; enc (B, T', D), enc_lens (B,).
        beam, ctc_weight, length_penalty, max_len_ratio: as config.DecodeConfig (whose defaults these are).
        ctc_log_probs: (B, T', V) CTC log-posteriors for joint decoding; None = attention only (ctc_weight unused).
        ctc_weight: λ. With λ = 0 the result equals attention-only beam search (the CTC scores are computed but
            weigh nothing).
        pre_beam: candidates per hypothesis scored by CTC (default max(beam, 1.5·beam)); 0 = the full vocabulary.
        lm: an NgramLM over the model's tokens (decode/ngram.py) for shallow fusion, weighted by lm_weight (β;
            0 unless given).
        ctc_window, beam_threshold, end_detect: the bounds on the work (module docstring; 0 = off).
        stats: a dict to which the work done is added: "steps", "hypotheses" (running hypotheses expanded),
            "candidates" (candidates scored), "ctc_terms" ((candidate, frame) terms of the CTC prefix scores).
        context: a ContextGraph of hotwords (decode/context.py), its bonus added to every candidate's score.
    Returns:
        per utterance up to `nbest` hypotheses, best first; score = the weighted sum above, with parts
        {"att": log p_att, "ctc": log P_ctc, "lm": log p_lm, "context": the hotword bonus} (ctc only in joint mode,
        lm only with an LM, context only with hotwords).
    """
    if beam < 1 or nbest < 1 or nbest > beam:
        raise ValueError(f"need 1 ≤ nbest ≤ beam, got beam={beam}, nbest={nbest}")
    scorer = CTCPrefixScorer(ctc_log_probs, enc_lens, window=ctc_window) if ctc_log_probs is not None else None
    search, beams = _start(model, enc, enc_lens, beam, scorer, pre_beam, max_len_ratio)
    search.lam = float(ctc_weight) if scorer is not None else 0.0
    search.length_penalty, search.lm, search.lm_weight, search.nbest = length_penalty, lm, lm_weight, nbest
    search.beam_threshold, search.end_detect, search.stats = beam_threshold, end_detect, stats
    search.context = context.to(enc.device) if context is not None else None
    step = 0
    while beams.active:
        step += 1  # tokens of the candidates, <eos> included
        cands = _score_candidates(search, beams, step)
        sel_row, sel_col, sel_tok, sel_val = _advance_or_finish(search, beams, cands, step)
        if not beams.active:
            break
        # advance the running hypotheses
        beams.ys = torch.cat([beams.ys[sel_row], sel_tok.unsqueeze(1)], 1)
        beams.att, beams.score = cands.att_new[sel_row, sel_col], sel_val
        if cands.lm_new is not None:
            beams.lm_total = cands.lm_new[sel_row, sel_col]
        if cands.ctx_new is not None:
            beams.ctx_total, beams.ctx_state = cands.ctx_new[sel_row, sel_col], cands.ctx_next[sel_row, sel_col]
        beams.cache = [c[sel_row] for c in beams.cache[:search.M]] + beams.cache[search.M:]
        if scorer is not None:
            beams.ctc_state = scorer.advance(beams.ctc_state, sel_row, sel_tok)
        beams.log_probs, beams.cache = model.decoder_step(beams.enc, beams.enc_mask, beams.ys, beams.cache)

    if stats is not None:
        stats["steps"] = stats.get("steps", 0) + step
        stats["ctc_terms"] = stats.get("ctc_terms", 0) + (scorer.terms if scorer is not None else 0)
    out = []
    for fin in beams.finished:
        fin = sorted(fin, key=lambda h: h.score, reverse=True)[:nbest]
        out.append(fin or [Hypothesis([], NEG_INF)])
    return out


def _start(model, enc, enc_lens, W: int, scorer, pre_beam: int | None, max_len_ratio: float) -> tuple[_Search, _Beams]:
    """The first decoder step on one row per utterance (it computes the cross-attention keys/values once), then
    each utterance's row expanded to W beams, of which only the first is live."""
    B, T, _ = enc.shape
    dev = enc.device
    limit = max_lengths(enc_lens, max_len_ratio, model.decoder.max_tokens)
    enc_mask = lengths_to_mask(enc_lens.to(dev), T)
    ys = torch.full((B, 1), SOS, dtype=torch.long, device=dev)
    log_probs, cache = model.decoder_step(enc, enc_mask, ys)
    V, M = log_probs.size(-1), len(cache) // 2
    K = V if scorer is None or pre_beam == 0 else min(V - 1, max(W, pre_beam or int(1.5 * W)))
    rows = torch.arange(B, device=dev).repeat_interleave(W)
    search = _Search(W=W, K=K, V=V, M=M, lam=0.0, length_penalty=0.0, lm_weight=0.0, nbest=1, limit=limit,
                     scorer=scorer, lm=None, dev=dev)
    beams = _Beams(ys=ys[rows], log_probs=log_probs[rows], cache=[c[rows] for c in cache], enc=enc[rows],
                   enc_mask=enc_mask[rows], att=torch.zeros(B * W, device=dev), lm_total=torch.zeros(B * W, device=dev),
                   score=torch.tensor([0.0] + [NEG_INF] * (W - 1), device=dev).repeat(B),
                   ctc_state=scorer.initial_state(rows) if scorer is not None else None,
                   ctx_state=torch.zeros(B * W, dtype=torch.long, device=dev), ctx_total=torch.zeros(B * W, device=dev),
                   active=list(range(B)), finished=[[] for _ in range(B)], ended=[{} for _ in range(B)])
    return search, beams


def _score_candidates(s: _Search, beams: _Beams, step: int) -> _Step:
    """Each running hypothesis' candidate tokens (pre-pruned to K and <eos> in joint mode) and their weighted
    scores λ·ψ + (1 − λ)·att + β·lm + length_penalty·step, -inf where not allowed. Only the candidates that can be
    chosen are scored by CTC: not those of empty slots, those the LM forbids, nor, at the length limit, any but
    <eos>."""
    W, V, dev = s.W, s.V, s.dev
    n = len(beams.active)
    log_probs = mask_not_output(beams.log_probs)
    running = torch.isfinite(beams.score)  # (N,) False: an empty slot
    forced = s.limit[beams.active] < step  # hypotheses already hold the most tokens allowed: <eos> only
    lm_lp = _lm_log_probs(s, beams.ys, running) if s.lm is not None else None  # (N, V)
    ctx_next, ctx_bonus = _context_bonus(s, beams) if s.context is not None else (None, None)  # (N, V)
    if s.K < V:  # pre-beam: the best K non-<eos> tokens by attention (and LM and hotwords), and <eos>
        eos_col = torch.tensor([EOS], device=dev)
        rank = log_probs if lm_lp is None else (1.0 - s.lam) * log_probs + s.lm_weight * lm_lp.clamp(min=FLOOR)
        rank = rank if ctx_bonus is None else rank + ctx_bonus
        cand = torch.cat([rank.index_fill(-1, eos_col, NEG_INF).topk(s.K, -1).indices, eos_col.expand(n * W, 1)], 1)
        cand_lp = log_probs.gather(1, cand)
    else:
        cand, cand_lp = torch.arange(V, device=dev).expand(n * W, V), log_probs
    Kc = cand.size(1)
    att_new = beams.att.unsqueeze(1) + cand_lp  # (N, Kc)
    cand_lm = lm_lp.gather(1, cand) if lm_lp is not None else None
    keep = torch.isfinite(att_new) & running.unsqueeze(1)  # (N, Kc) the candidates that can be chosen
    if cand_lm is not None:
        keep &= cand_lm > NEG_INF
    if forced.any():
        keep &= ~forced.to(dev).repeat_interleave(W).unsqueeze(1) | (cand == EOS)
    psi = None
    if s.scorer is None:
        total = att_new + s.length_penalty * step
    else:  # with λ = 0 this is the line above exactly (1·x + 0·ψ = x for every finite x)
        psi = s.scorer.score(beams.ctc_state, cand, keep).clamp(min=FLOOR).float()
        total = (1.0 - s.lam) * att_new.clamp(min=FLOOR) + s.lam * psi + s.length_penalty * step
    lm_new = None
    if cand_lm is not None:  # with β = 0 the total is unchanged (every term is finite)
        lm_new = (beams.lm_total.unsqueeze(1) + cand_lm).clamp(min=FLOOR)
        total = total + s.lm_weight * lm_new
    ctx_new = None
    if ctx_bonus is not None:
        ctx_new, ctx_next = beams.ctx_total.unsqueeze(1) + ctx_bonus.gather(1, cand), ctx_next.gather(1, cand)
        total = total + ctx_new
    total = total.masked_fill(~keep, NEG_INF)
    if s.stats is not None:
        s.stats["hypotheses"] = s.stats.get("hypotheses", 0) + int(running.sum())
        s.stats["candidates"] = s.stats.get("candidates", 0) + int(keep.sum())
    return _Step(cand, att_new, psi, lm_new, ctx_new, ctx_next, total.view(n, W * Kc), forced)


def _context_bonus(s: _Search, beams: _Beams) -> tuple[torch.Tensor, torch.Tensor]:
    """The context graph's next state and bonus for every token after each running hypothesis, (N, V) each;
    at <eos> the bonus gives the unfinished phrase's part back."""
    tokens = torch.arange(s.V, device=s.dev).expand(beams.ctx_state.size(0), s.V)
    nxt, bonus = s.context.step(beams.ctx_state, tokens)
    bonus[:, EOS] = s.context.finish(beams.ctx_state)
    return nxt, bonus


def _lm_log_probs(s: _Search, ys: torch.Tensor, running: torch.Tensor) -> torch.Tensor:
    """The LM's log-probabilities of the next token after each running hypothesis ys (N, t) → (N, V); -inf in the
    rows of empty slots, which are not queried."""
    if bool(running.all()):
        return torch.from_numpy(s.lm.next_log_probs(ys.tolist())).to(ys.device)
    out = torch.full((ys.size(0), s.V), NEG_INF, device=ys.device)
    rows = running.nonzero().squeeze(1)
    if rows.numel():
        out[rows] = torch.from_numpy(s.lm.next_log_probs(ys[rows].tolist())).to(out)
    return out


def _advance_or_finish(s: _Search, beams: _Beams, c: _Step, step: int) -> tuple:
    """Take each utterance's best 2·W candidates: those ending in <eos> among the first W become finished
    hypotheses, the best W others the next running ones; utterances that are done leave the batch.
    → (rows, columns, tokens, scores) of the running candidates kept, one per remaining row."""
    W, dev = s.W, s.dev
    n, Kc = len(beams.active), c.cand.size(1)
    top_val, top_idx = c.total.topk(min(2 * W, W * Kc), 1)  # (n, 2W)
    top_row = top_idx // Kc + torch.arange(n, device=dev).unsqueeze(1) * W  # global row
    top_col = top_idx % Kc
    top_tok = c.cand[top_row, top_col]
    is_eos = top_tok == EOS
    run = torch.argsort(is_eos.int(), dim=1, stable=True)[:, :W]  # best W non-<eos>, in score order
    sel_row, sel_col = top_row.gather(1, run).flatten(), top_col.gather(1, run).flatten()
    sel_tok, sel_val = top_tok.gather(1, run).flatten(), top_val.gather(1, run)
    packed = _finish(s, beams, c, top_val, top_row[:, :W], top_col[:, :W], is_eos, sel_val)
    done = _done(s, beams, c, packed, step)
    if s.beam_threshold > 0:  # running hypotheses far below the best running one become empty slots
        sel_val = sel_val.masked_fill(sel_val < sel_val[:, :1] - s.beam_threshold, NEG_INF)
    sel_val = sel_val.flatten()
    if done:  # done utterances leave the batch
        done_set = set(done)
        keep_groups = [i for i in range(n) if i not in done_set]
        beams.active = [beams.active[i] for i in keep_groups]
        if not beams.active:
            return sel_row, sel_col, sel_tok, sel_val
        keep = (torch.tensor(keep_groups, device=dev).unsqueeze(1) * W + torch.arange(W, device=dev)).flatten()
        sel_row, sel_col, sel_tok, sel_val = sel_row[keep], sel_col[keep], sel_tok[keep], sel_val[keep]
        beams.cache = beams.cache[:s.M] + [x[keep] for x in beams.cache[s.M:]]
        beams.enc, beams.enc_mask = beams.enc[keep], beams.enc_mask[keep]
    return sel_row, sel_col, sel_tok, sel_val


def _finish(s: _Search, beams: _Beams, c: _Step, top_val, ev_row, ev_col, is_eos, sel_val) -> torch.Tensor:
    """Record the candidates ending in <eos> among each utterance's first W as finished hypotheses (one transfer
    to the CPU per step). → the packed (n, W, 7) scores: total, is <eos>, att, ctc, best running total, lm,
    hotword bonus."""
    W, n = s.W, len(beams.active)
    ev_att = c.att_new[ev_row, ev_col]
    ev_ctc = c.psi[ev_row, ev_col] if c.psi is not None else torch.zeros_like(ev_att)
    ev_lm = c.lm_new[ev_row, ev_col] if c.lm_new is not None else torch.zeros_like(ev_att)
    ev_ctx = c.ctx_new[ev_row, ev_col] if c.ctx_new is not None else torch.zeros_like(ev_att)
    packed = torch.stack([top_val[:, :W], is_eos[:, :W].float(), ev_att, ev_ctc,
                          sel_val[:, :1].expand(n, W), ev_lm, ev_ctx], -1).cpu()  # (n, W, 7)
    events = (packed[..., 1] > 0) & (packed[..., 0] > NEG_INF)
    if events.any():
        ev_idx = events.nonzero()
        ev_i = ev_idx.to(s.dev)
        ev_tokens = beams.ys[ev_row[ev_i[:, 0], ev_i[:, 1]]].cpu()
        for (i, j), toks in zip(ev_idx.tolist(), ev_tokens):
            val, _, a, ctc, _, lm_part, ctx = packed[i, j].tolist()
            parts = {"att": a, "ctc": ctc} if s.scorer is not None else {"att": a}
            if s.lm is not None:
                parts["lm"] = lm_part
            if s.context is not None:
                parts["context"] = ctx
            beams.finished[beams.active[i]].append(Hypothesis(toks[1:].tolist(), val, parts))
            ended = beams.ended[beams.active[i]]
            ended[len(toks) - 1] = max(val, ended.get(len(toks) - 1, NEG_INF))
    return packed


def _done(s: _Search, beams: _Beams, c: _Step, packed: torch.Tensor, step: int) -> list[int]:
    """Positions in `beams.active` of the utterances whose search is over: at the length limit, nothing left
    running, an n-best whose worst scores at least the best running hypothesis, or an end detected (`_ended`)."""
    done = []
    for i, b in enumerate(beams.active):
        best_running = float(packed[i, 0, 4])
        fin = beams.finished[b]
        if c.forced[i] or best_running == NEG_INF or _ended(s, beams.ended[b], step):
            done.append(i)
        elif len(fin) >= s.nbest:
            kth = sorted((h.score for h in fin), reverse=True)[s.nbest - 1]
            if kth >= best_running:
                done.append(i)
    return done


def _ended(s: _Search, ended: dict[int, float], step: int) -> bool:
    """ESPnet's end detection: hypotheses ended at each of the last END_STEPS steps (with step − 1 − m tokens,
    m < END_STEPS), and the best of each step's scored more than `s.end_detect` below the best ended one."""
    if s.end_detect <= 0 or not ended:
        return False
    best = max(ended.values())
    return all(ended.get(step - 1 - m, best) < best - s.end_detect for m in range(END_STEPS))


# ------------------------------------------------------------------------------------------ long utterances


@dataclass
class Pieces:
    """Utterances cut into pieces at pauses (`split_at_pauses`), decoded as a batch of their own."""

    enc: torch.Tensor  # (P, T_p, D) each piece's encoder frames
    lengths: torch.Tensor  # (P,)
    ctc_log_probs: torch.Tensor  # (P, T_p, V)
    owner: list[int]  # the utterance of each piece, pieces in order


def split_at_pauses(enc: torch.Tensor, enc_lens: torch.Tensor, ctc_log_probs: torch.Tensor,
                    max_frames: int) -> Pieces | None:
    """Utterances longer than `max_frames` encoder frames cut into pieces of at most that many, each cut in the
    middle of the longest run of frames that CTC calls blank (a pause) after the first quarter of the piece it ends
    (at its end when there is none). enc (B, T', D), enc_lens (B,), ctc_log_probs (B, T', V).
    → the pieces of every utterance (one for the short ones), or None when no utterance is longer."""
    if max_frames < 2 or int(enc_lens.max()) <= max_frames:
        return None
    blank = (ctc_log_probs.argmax(-1) == BLANK).cpu()  # (B, T')
    bounds = []  # (utterance, first frame, end frame)
    for b, n in enumerate(enc_lens.tolist()):
        start = 0
        while n - start > max_frames:
            lo = start + max_frames // 4
            run_start, run_len = _longest_run(blank[b, lo:start + max_frames])
            cut = lo + run_start + run_len // 2 if run_len else start + max_frames
            bounds.append((b, start, cut))
            start = cut
        bounds.append((b, start, n))
    width = max(e - s for _, s, e in bounds)
    rows = torch.tensor([b for b, _, _ in bounds], device=enc.device)
    frames = torch.tensor([s for _, s, _ in bounds], device=enc.device).unsqueeze(1) + torch.arange(
        width, device=enc.device)  # (P, width)
    frames = frames.clamp(max=enc.size(1) - 1)
    return Pieces(enc[rows.unsqueeze(1), frames], torch.tensor([e - s for _, s, e in bounds], device=enc_lens.device),
                  ctc_log_probs[rows.unsqueeze(1), frames], [b for b, _, _ in bounds])


def _longest_run(mask: torch.Tensor) -> tuple[int, int]:
    """(start, length) of the first longest run of True in mask (n,) bool; (0, 0) when there is none."""
    edges = torch.diff(torch.cat([mask.new_zeros(1), mask, mask.new_zeros(1)]).int())
    starts, ends = (edges == 1).nonzero().squeeze(1), (edges == -1).nonzero().squeeze(1)
    if not starts.numel():
        return 0, 0
    i = int((ends - starts).argmax())
    return int(starts[i]), int(ends[i] - starts[i])


def join_pieces(hyps: list[list[Hypothesis]], owner: list[int], batch: int) -> list[list[Hypothesis]]:
    """Each utterance's pieces' hypotheses (`split_at_pauses`, in order) joined: an utterance of one piece keeps its
    n-best; one of several gets one hypothesis, the best of each piece in a row (tokens concatenated, scores and
    their parts added)."""
    groups: list[list[list[Hypothesis]]] = [[] for _ in range(batch)]
    for b, nbest in zip(owner, hyps):
        groups[b].append(nbest)
    out = []
    for pieces in groups:
        if len(pieces) == 1:
            out.append(pieces[0])
            continue
        best = [p[0] for p in pieces]
        parts = {k: sum(h.parts.get(k, 0.0) for h in best) for k in best[0].parts}
        out.append([Hypothesis([t for h in best for t in h.tokens], sum(h.score for h in best), parts)])
    return out
