"""Attention beam search, optionally joint with CTC prefix scores (Watanabe et al. 2017), batched.

All utterances' hypotheses are decoded together as B × beam rows of one tensor (ESPnet's batch beam
search, WeNet's attention beam search). At each output step, for every utterance:

1. the decoder (with its key/value cache) gives log p_att(c | g) for each running hypothesis g;
2. joint mode only: the candidates c are pre-pruned to the `pre_beam` best by attention score (plus <eos>,
   always scored), and the CTC prefix scorer gives log ψ(g·c) for all of them at once;
3. each candidate's score is  λ·log ψ(g·c) + (1 − λ)·log p_att(g·c) + β·log p_lm(g·c) + length_penalty·|g·c|
   (λ = ctc_weight; β = lm_weight, shallow fusion with an n-gram LM when one is given; |g·c| counts <eos>;
   the pre-beam ranks by the attention and LM terms); the best 2·beam candidates of the utterance are taken:
   those ending in <eos> among the first `beam` become finished hypotheses, the best `beam` others keep
   running (so the beam stays full);
4. an utterance is done when it has `nbest` finished hypotheses and the nbest-th best of them scores at least
   as well as its best running one (scores only fall as hypotheses grow when length_penalty ≤ 0, so the n-best
   is then final; with a positive bonus this is the usual heuristic), or when its hypotheses reach
   `max_len_ratio` × encoder frames tokens: then <eos> is forced. Done utterances leave the batch.

The cross-attention cache of an utterance is the same for all its rows and a hypothesis never moves to
another utterance, so only the self-attention cache is reordered between steps.
"""

from __future__ import annotations

import torch

from asr_transformer.decode import Hypothesis
from asr_transformer.decode.ctc_prefix import CTCPrefixScorer
from asr_transformer.decode.greedy import mask_not_output, max_lengths
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.model.tokens import EOS, SOS

NEG_INF = float("-inf")
FLOOR = -1e30  # scores are clamped here before weighting, so 0·(-inf) never makes a NaN


def beam_search(model, enc: torch.Tensor, enc_lens: torch.Tensor, beam: int = 10, *,
                ctc_log_probs: torch.Tensor | None = None, ctc_weight: float = 0.3, length_penalty: float = 0.0,
                max_len_ratio: float = 1.0, nbest: int = 1, pre_beam: int | None = None,
                lm=None, lm_weight: float = 0.0) -> list[list[Hypothesis]]:
    """Batched attention (or joint CTC/attention) beam search.

    Args:
        model: ASRModel; enc (B, T', D), enc_lens (B,).
        ctc_log_probs: (B, T', V) CTC log-posteriors for joint decoding; None = attention only (ctc_weight unused).
        ctc_weight: λ. With λ = 0 the result equals attention-only beam search (the CTC scores are computed but
            weigh nothing).
        pre_beam: candidates per hypothesis scored by CTC (default max(beam, 1.5·beam)); 0 = the full vocabulary.
        lm: an NgramLM over the model's tokens (decode/ngram.py) for shallow fusion, weighted by lm_weight (β).
    Returns:
        per utterance up to `nbest` hypotheses, best first; score = the weighted sum above, with parts
        {"att": log p_att, "ctc": log P_ctc, "lm": log p_lm} (ctc only in joint mode, lm only with an LM).
    """
    B, T, _ = enc.shape
    W, dev = beam, enc.device
    if W < 1 or nbest < 1 or nbest > W:
        raise ValueError(f"need 1 ≤ nbest ≤ beam, got beam={beam}, nbest={nbest}")
    scorer = CTCPrefixScorer(ctc_log_probs, enc_lens) if ctc_log_probs is not None else None
    lam = float(ctc_weight) if scorer is not None else 0.0
    limit = max_lengths(enc_lens, max_len_ratio)
    enc_mask = lengths_to_mask(enc_lens.to(dev), T)

    # first step on one row per utterance (computes the cross-attention keys/values once), then expand
    ys = torch.full((B, 1), SOS, dtype=torch.long, device=dev)
    log_probs, cache = model.decoder_step(enc, enc_mask, ys)
    V, M = log_probs.size(-1), len(cache) // 2
    K = V if scorer is None or pre_beam == 0 else min(V - 1, max(W, pre_beam or int(1.5 * W)))
    rows = torch.arange(B, device=dev).repeat_interleave(W)
    log_probs, cache, ys = log_probs[rows], [c[rows] for c in cache], ys[rows]
    enc, enc_mask = enc[rows], enc_mask[rows]
    att = torch.zeros(B * W, device=dev)  # attention log-probability of each running hypothesis
    lm_total = torch.zeros(B * W, device=dev)  # its LM log-probability (with an LM)
    score = torch.tensor([0.0] + [NEG_INF] * (W - 1), device=dev).repeat(B)  # -inf = an empty slot
    state = scorer.initial_state(rows) if scorer is not None else None
    eos_col = torch.tensor([EOS], device=dev)
    active = list(range(B))  # original utterance index of each group of W rows
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    step = 0
    while active:
        step += 1  # tokens of the candidates, <eos> included
        n = len(active)
        log_probs = mask_not_output(log_probs)
        lm_lp = lm.next_log_probs(ys) if lm is not None else None  # (N, V)
        if K < V:  # pre-beam: the best K non-<eos> tokens by attention (and LM), and <eos>
            rank = log_probs if lm_lp is None else (1.0 - lam) * log_probs + lm_weight * lm_lp.clamp(min=FLOOR)
            cand = torch.cat([rank.index_fill(-1, eos_col, NEG_INF).topk(K, -1).indices, eos_col.expand(n * W, 1)], 1)
            cand_lp = log_probs.gather(1, cand)
        else:
            cand, cand_lp = torch.arange(V, device=dev).expand(n * W, V), log_probs
        Kc = cand.size(1)
        att_new = att.unsqueeze(1) + cand_lp  # (N, Kc)
        psi = None
        if scorer is None:
            total = att_new + length_penalty * step
        else:  # with λ = 0 this is the line above exactly (1·x + 0·ψ = x for every finite x)
            psi = scorer.score(state, cand).clamp(min=FLOOR).float()
            total = (1.0 - lam) * att_new.clamp(min=FLOOR) + lam * psi + length_penalty * step
        lm_new = None
        if lm_lp is not None:  # with β = 0 the total is unchanged (every term is finite)
            lm_new = (lm_total.unsqueeze(1) + lm_lp.gather(1, cand)).clamp(min=FLOOR)
            total = total + lm_weight * lm_new
        bad = torch.isinf(att_new) | torch.isinf(score).unsqueeze(1)
        forced = limit[active] < step  # hypotheses already hold the most tokens allowed: <eos> only
        if forced.any():
            bad |= forced.to(dev).repeat_interleave(W).unsqueeze(1) & (cand != EOS)
        total = total.masked_fill(bad, NEG_INF).view(n, W * Kc)

        top_val, top_idx = total.topk(min(2 * W, W * Kc), 1)  # (n, 2W)
        top_row = top_idx // Kc + torch.arange(n, device=dev).unsqueeze(1) * W  # global row
        top_col = top_idx % Kc
        top_tok = cand[top_row, top_col]
        is_eos = top_tok == EOS
        run = torch.argsort(is_eos.int(), dim=1, stable=True)[:, :W]  # best W non-<eos>, in score order
        sel_row, sel_col = top_row.gather(1, run).flatten(), top_col.gather(1, run).flatten()
        sel_tok, sel_val = top_tok.gather(1, run).flatten(), top_val.gather(1, run)

        # finished hypotheses: <eos> among the first W (one transfer to the CPU per step)
        ev_row, ev_col = top_row[:, :W], top_col[:, :W]
        ev_att = att_new[ev_row, ev_col]
        ev_ctc = psi[ev_row, ev_col] if psi is not None else torch.zeros_like(ev_att)
        ev_lm = lm_new[ev_row, ev_col] if lm_new is not None else torch.zeros_like(ev_att)
        packed = torch.stack([top_val[:, :W], is_eos[:, :W].float(), ev_att, ev_ctc,
                              sel_val[:, :1].expand(n, W), ev_lm], -1).cpu()  # (n, W, 6)
        events = (packed[..., 1] > 0) & (packed[..., 0] > NEG_INF)
        if events.any():
            ev_idx = events.nonzero()
            ev_i = ev_idx.to(dev)
            ev_tokens = ys[ev_row[ev_i[:, 0], ev_i[:, 1]]].cpu()
            for (i, j), toks in zip(ev_idx.tolist(), ev_tokens):
                val, _, a, c, _, lm_part = packed[i, j].tolist()
                parts = {"att": a, "ctc": c} if scorer is not None else {"att": a}
                if lm is not None:
                    parts["lm"] = lm_part
                finished[active[i]].append(Hypothesis(toks[1:].tolist(), val, parts))
        done = []
        for i, b in enumerate(active):
            best_running = float(packed[i, 0, 4])
            fin = finished[b]
            if forced[i] or best_running == NEG_INF:
                done.append(i)
            elif len(fin) >= nbest:
                kth = sorted((h.score for h in fin), reverse=True)[nbest - 1]
                if kth >= best_running:
                    done.append(i)

        sel_val = sel_val.flatten()
        if done:  # done utterances leave the batch
            done_set = set(done)
            keep_groups = [i for i in range(n) if i not in done_set]
            active = [active[i] for i in keep_groups]
            if not active:
                break
            keep = (torch.tensor(keep_groups, device=dev).unsqueeze(1) * W + torch.arange(W, device=dev)).flatten()
            sel_row, sel_col, sel_tok, sel_val = sel_row[keep], sel_col[keep], sel_tok[keep], sel_val[keep]
            cache = cache[:M] + [c[keep] for c in cache[M:]]
            enc, enc_mask = enc[keep], enc_mask[keep]

        # advance the running hypotheses
        ys = torch.cat([ys[sel_row], sel_tok.unsqueeze(1)], 1)
        att, score = att_new[sel_row, sel_col], sel_val
        if lm_new is not None:
            lm_total = lm_new[sel_row, sel_col]
        cache = [c[sel_row] for c in cache[:M]] + cache[M:]
        if scorer is not None:
            state = scorer.advance(state, sel_row, sel_tok)
        log_probs, cache = model.decoder_step(enc, enc_mask, ys, cache)

    out = []
    for fin in finished:
        fin = sorted(fin, key=lambda h: h.score, reverse=True)[:nbest]
        out.append(fin or [Hypothesis([], NEG_INF)])
    return out
