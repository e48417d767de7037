"""Dropout with a cheaper random mask on CPU.

torch's CPU dropout draws one random number per element (`bernoulli_`), which made dropout about a
fifth of a `small` training step on 2 cores. Here one 64-bit draw serves four elements: the draw is
viewed as four 16-bit integers, and an element is kept when its integer is at or above the quantile
of p (so P(drop) = p to within 1/65536). Same expectation and gradient as `nn.Dropout`; on other
devices it is `nn.functional.dropout`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p); identity when not training."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    keep = words.view(torch.int16)[:n].view(x.shape) >= round(p * 65536) - 32768
    return torch.where(keep, x, 0.0) * (1.0 / (1.0 - p))


class Dropout(nn.Module):
    """`nn.Dropout` with the cheaper CPU mask of `dropout`. (any shape) → (same shape)."""

    def __init__(self, p: float = 0.1):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
