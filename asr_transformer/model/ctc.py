"""The CTC head (Graves et al. 2006) on the encoder output: a linear layer over the vocabulary."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import BLANK


class CTC(nn.Module):
    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def log_probs(self, enc: torch.Tensor) -> torch.Tensor:
        """enc (B, T', D) → log-probabilities (B, T', vocab), float32."""
        return F.log_softmax(self.proj(enc).float(), dim=-1)

    def loss(self, enc: torch.Tensor, enc_lens: torch.Tensor, targets: torch.Tensor,
             target_lens: torch.Tensor) -> torch.Tensor:
        """CTC loss summed over the batch and divided by the batch size.

        targets (B, S) int64, any padding value beyond target_lens (B,). Impossible alignments
        (a target longer than its input) count as zero loss (zero_infinity).
        """
        targets = targets.masked_fill(~lengths_to_mask(target_lens, targets.size(1)), BLANK)
        loss = F.ctc_loss(self.log_probs(enc).transpose(0, 1), targets, enc_lens, target_lens,
                          blank=BLANK, reduction="sum", zero_infinity=True)
        return loss / enc.size(0)

    @torch.no_grad()
    def greedy(self, enc: torch.Tensor, enc_lens: torch.Tensor) -> list[list[int]]:
        """Best path: argmax per frame, merge repeats, drop blanks. → one token-id list per utterance."""
        best = self.proj(enc).argmax(-1)  # (B, T')
        keep = lengths_to_mask(enc_lens, best.size(1)) & (best != BLANK)
        keep[:, 1:] &= best[:, 1:] != best[:, :-1]
        return [row[k].tolist() for row, k in zip(best.cpu(), keep.cpu())]
