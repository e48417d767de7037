"""Mask-CTC non-autoregressive decoding (Higuchi et al. 2020), batched over utterances.

1. Greedy CTC gives the output length and a first guess; each token's confidence is its highest CTC
   posterior over the frames it spans.
2. Tokens with confidence < `threshold` become <mask>.
3. The decoder, run without the causal mask, predicts every position at once; over `iterations` rounds the
   most confident predictions at masked positions are filled in (easy-first, as ESPnet: with n masks and
   k = min(iterations, n) rounds, each of the first k − 1 rounds fills n // k of them and the last round the
   rest). Each utterance follows its own schedule; the rounds run for all of them together, and an
   utterance whose masks are all filled leaves the decoder's batch (on bench/decode_speed.py's batch of 16,
   the decoder then runs on half the rows it would run on otherwise).

`iterations = 0` returns greedy CTC unchanged.
"""

from __future__ import annotations

import torch

from asr_transformer.decode import Hypothesis
from asr_transformer.decode.ctc_prefix import ctc_greedy
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import BLANK, EOS, MASK, SOS

NOT_FILLED = (BLANK, SOS, EOS, MASK)  # a masked position is never filled with these


def maskctc_search(model, enc: torch.Tensor, enc_lens: torch.Tensor, ctc_log_probs: torch.Tensor,
                   iterations: int = 10, threshold: float = 0.99) -> list[list[Hypothesis]]:
    """Batched Mask-CTC.

    Args:
        model: ASRModel (its `decoder`, trained with the masked-token objective); enc (B, T', D), enc_lens (B,);
        ctc_log_probs: (B, T', V).
    Returns:
        per utterance one Hypothesis; score = Σ log(confidence) of the CTC tokens kept + Σ log p of the
        decoder's fills, parts {"ctc": greedy-CTC path log-probability}.
    """
    g = ctc_greedy(ctc_log_probs, enc_lens)
    if iterations <= 0:
        return g.hypotheses()
    tokens, lens = g.tokens, g.lengths.to(enc.device)
    B, L = tokens.shape
    valid = lengths_to_mask(lens, L)
    token_lp = g.confidence.clamp(min=1e-30).log().masked_fill(~valid, 0.0)
    if L > 0:
        masked = valid & (g.confidence < threshold)
        n_mask = masked.sum(1)  # (B,)
        rounds = torch.where(n_mask >= iterations, torch.full_like(n_mask, iterations), n_mask)
        per_round = n_mask // rounds.clamp(min=1)
        enc_mask = lengths_to_mask(enc_lens.to(enc.device), enc.size(1))
        kv = model.decoder.cross_kv(enc)  # encoder keys/values projected once for all rounds
        y = tokens.masked_fill(masked, MASK)
        not_filled = torch.tensor(NOT_FILLED, device=enc.device)
        rows = torch.arange(B, device=enc.device)  # the utterances that still have masks (ascending)
        for it in range(int(rounds.max())):
            left = masked[rows].any(1)
            if not bool(left.all()):  # utterances without masks leave the decoder's batch for good
                if not bool(left.any()):
                    break
                rows, kv, enc_mask = rows[left], [c[left] for c in kv], enc_mask[left]
            # the decoder sees every position (no causal mask); outputs are needed at masked positions only
            width = int(lens[rows].max())
            logits = model.decoder.forward_kv(kv, enc_mask, y[rows, :width], lens[rows], causal=False,
                                              select=masked[rows, :width])  # (masked positions, V), in the order of `masked`
            best_lp, best = torch.log_softmax(logits.float(), -1).index_fill(-1, not_filled, float("-inf")).max(-1)
            pred_lp = torch.full(y.shape, float("-inf"), device=y.device).masked_scatter(masked, best_lp)
            pred = y.masked_scatter(masked, best)
            # how many to fill now: n // k in the first k - 1 rounds, all that are left in round k
            count = torch.where(it < rounds - 1, per_round, masked.sum(1)).masked_fill(it >= rounds, 0)
            rank = pred_lp.argsort(dim=1, descending=True, stable=True).argsort(1)
            fill = masked & (rank < count.unsqueeze(1))
            y = torch.where(fill, pred, y)
            token_lp = torch.where(fill, pred_lp, token_lp)
            masked = masked & ~fill
        tokens = y
    score = (token_lp * valid).sum(1).tolist()
    tokens, lengths, ctc = tokens.cpu(), lens.tolist(), g.score.tolist()
    return [[Hypothesis(tokens[b, :n].tolist(), score[b], {"ctc": ctc[b]})] for b, n in enumerate(lengths)]
