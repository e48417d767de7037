"""Mask-CTC non-autoregressive decoding (Higuchi et al. 2020), batched over utterances.

1. Greedy CTC gives the output length and a first guess; each token's confidence is its highest CTC
   posterior over the frames it spans.
2. Tokens with confidence < `threshold` become <mask>.
3. The decoder, run without the causal mask and trained for it (model.nat_weight > 0: it reads <sos> and the
   tokens, and each position predicts the token after it), predicts every position at once; over
   `iterations` rounds the most confident predictions at masked positions are filled in (easy-first, as ESPnet:
   with n masks and k = min(iterations, n) rounds, each of the first k − 1 rounds fills n // k of them and the
   last round the rest). Each utterance follows its own schedule; the rounds run for all of them together, and an
   utterance whose masks are all filled leaves the decoder's batch.

`iterations = 0` returns greedy CTC unchanged.

The search (`fill_masks`) is numpy and calls the decoder through a function, so that the package (PyTorch,
`maskctc_search`) and the export (onnxruntime, `inference/exported.py`) run the same search; importing this
module imports no torch.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from asr_transformer.decode import Hypothesis
from asr_transformer.tokens import BLANK, EOS, MASK, SOS

NOT_FILLED = (BLANK, SOS, EOS, MASK)  # a masked position is never filled with these

# rows (n,) of the batch, their tokens y (n, L) with MASK at `masked` (n, L) bool, and lengths (n,)
# → log-probabilities (number of masked positions, V) at the masked positions, in row-major order
Predict = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def fill_masks(tokens: np.ndarray, lengths: np.ndarray, confidence: np.ndarray, ctc_scores: np.ndarray,
               iterations: int, threshold: float, predict: Predict) -> list[list[Hypothesis]]:
    """Mask-CTC's rounds on greedy CTC's output.

    Args:
        tokens (B, L) int64 greedy CTC tokens, lengths (B,), confidence (B, L) each token's CTC confidence,
        ctc_scores (B,) the greedy path's log-probability; `predict` runs the decoder without its causal mask
        (see Predict).
    Returns:
        per utterance one Hypothesis; score = Σ log(confidence) of the CTC tokens kept + Σ log p of the
        decoder's fills, parts {"ctc": greedy-CTC path log-probability}.
    """
    B, L = tokens.shape
    valid = np.arange(L)[None, :] < lengths[:, None]
    token_lp = np.where(valid, np.log(np.maximum(confidence, 1e-30)), 0.0).astype(np.float32)
    y = tokens.copy()
    if iterations > 0 and L > 0:
        masked = valid & (confidence < threshold)
        n_mask = masked.sum(1)  # (B,)
        rounds = np.minimum(n_mask, iterations)
        per_round = n_mask // np.maximum(rounds, 1)
        y[masked] = MASK
        rows = np.arange(B)  # the utterances that still have masks (ascending)
        for it in range(int(rounds.max(initial=0))):
            rows = rows[masked[rows].any(1)]  # utterances without masks leave the decoder's batch for good
            if not len(rows):
                break
            width = int(lengths[rows].max())
            log_probs = predict(rows, y[rows, :width], lengths[rows], masked[rows, :width]).astype(np.float32)
            log_probs[:, list(NOT_FILLED)] = -np.inf
            pred_lp = np.full(y.shape, -np.inf, np.float32)
            pred = y.copy()
            # every masked position is in `rows` and below `width`: `predict`'s rows are `masked`'s, in order
            pred_lp[masked] = log_probs.max(-1)
            pred[masked] = log_probs.argmax(-1)
            # how many to fill now: n // k in the first k - 1 rounds, all that are left in round k
            count = np.where(it < rounds - 1, per_round, masked.sum(1))
            count[it >= rounds] = 0
            rank = np.argsort(np.argsort(-pred_lp, axis=1, kind="stable"), axis=1, kind="stable")
            fill = masked & (rank < count[:, None])
            y = np.where(fill, pred, y)
            token_lp = np.where(fill, pred_lp, token_lp)
            masked = masked & ~fill
    scores = np.where(valid, token_lp, 0.0).sum(1, dtype=np.float64)
    return [[Hypothesis(y[b, :n].tolist(), float(scores[b]), {"ctc": float(ctc_scores[b])})]
            for b, n in enumerate(lengths.tolist())]


def with_sos(y: np.ndarray, lens: np.ndarray, masked: np.ndarray) -> tuple[np.ndarray, ...]:
    """The decoder's input for tokens y (n, L) with `masked` (n, L): <sos> y (n, L+1), lengths + 1, and the output
    positions that predict the masked tokens (n, L+1) (position i predicts token i + 1)."""
    n = len(y)
    return (np.concatenate([np.full((n, 1), SOS, np.int64), y], 1), lens + 1,
            np.concatenate([masked, np.zeros((n, 1), bool)], 1))


def greedy_with_confidence(log_probs: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    """Greedy CTC of a batch in numpy: log_probs (B, T, V), lengths (B,) → tokens (B, L) int64, token counts (B,),
    confidence (B, L) (each token's highest posterior over its frames), the path's log-probability (B,)."""
    B, T, _ = log_probs.shape
    best, best_lp = log_probs.argmax(-1), log_probs.max(-1)
    valid = np.arange(T)[None, :] < lengths[:, None]
    prev = np.concatenate([np.full((B, 1), -1), best[:, :-1]], 1)
    in_token = valid & (best != BLANK)
    starts = in_token & (best != prev)  # first frame of each emitted token
    counts = starts.sum(1)
    L = int(counts.max(initial=0))
    tokens, confidence = np.zeros((B, L), np.int64), np.zeros((B, L), np.float32)
    index = np.cumsum(starts, 1) - 1  # token index of each frame
    b, t = np.nonzero(starts)
    tokens[b, index[b, t]] = best[b, t]
    b, t = np.nonzero(in_token)
    np.maximum.at(confidence, (b, index[b, t]), np.exp(best_lp[b, t]))
    return tokens, counts, confidence, (best_lp * valid).sum(1)


def maskctc_search(model, enc, enc_lens, ctc_log_probs, iterations: int, threshold: float) -> list[list[Hypothesis]]:
    """Batched Mask-CTC with the PyTorch model: `fill_masks` with its decoder run as the NAT decoder.

    Args:
        model: ASRModel (its decoder trained for it, model.nat_weight > 0); enc (B, T', D), enc_lens (B,);
        ctc_log_probs: (B, T', V) (torch tensors); iterations, threshold: decode.maskctc_*.
    """
    import torch

    from asr_transformer.decode.ctc_prefix import ctc_greedy
    from asr_transformer.model.mask import lengths_to_mask

    g = ctc_greedy(ctc_log_probs, enc_lens)
    if iterations <= 0:
        return g.hypotheses()
    device = enc.device
    kv = model.decoder.cross_kv(enc)  # encoder keys/values projected once for all rounds
    enc_mask = lengths_to_mask(enc_lens.to(device), enc.size(1))
    held = {"rows": None}

    def predict(rows: np.ndarray, y: np.ndarray, lens: np.ndarray, masked: np.ndarray) -> np.ndarray:
        if held["rows"] is None or not np.array_equal(held["rows"], rows):
            index = torch.as_tensor(rows, device=device)
            held.update(rows=rows, kv=[c[index] for c in kv], mask=enc_mask[index])
        y_in, lens_in, select = with_sos(y, lens, masked)
        logits = model.decoder.forward_kv(held["kv"], held["mask"], torch.as_tensor(y_in, device=device),
                                          torch.as_tensor(lens_in, device=device), causal=False,
                                          select=torch.as_tensor(select, device=device))  # (masked positions, V)
        return torch.log_softmax(logits.detach().float(), -1).cpu().numpy()

    return fill_masks(g.tokens.cpu().numpy(), g.lengths.cpu().numpy(), g.confidence.float().cpu().numpy(),
                      g.score.float().cpu().numpy(), iterations, threshold, predict)
