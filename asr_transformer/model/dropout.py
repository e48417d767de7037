"""Dropout with cheap random masks on the CPU.

``nn.Dropout`` on a CPU draws one Bernoulli sample per element, which costs about as much as a
matrix multiply of the same tensor. Here one 64-bit draw gives the coin flips of four elements:
each 16-bit quarter is compared with a threshold, so an element is kept with probability
``1 - round(p · 65536) / 65536`` and kept values are scaled by the inverse of exactly that
probability (the expectation is unchanged).
On other devices this is ``F.dropout``, whose kernels are already fused there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEVELS = 1 << 16


def keep_mask(shape: torch.Size, p: float, device: torch.device | str = "cpu") -> tuple[torch.Tensor, float]:
    """A boolean mask of ``shape`` (True = keep) and the probability each element was kept with."""
    dropped = round(p * _LEVELS)
    n = shape.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), 2**63 - 1)
    quarters = bits.view(torch.int16)[:n].view(shape)  # uniform over [-32768, 32767]
    return quarters >= dropped - _LEVELS // 2, 1.0 - dropped / _LEVELS


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the rest; identity when not training."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or round(p * _LEVELS) >= _LEVELS:  # p within 2⁻¹⁷ of 1 keeps nothing
        return F.dropout(x, p, training)
    keep, kept = keep_mask(x.shape, p, x.device)
    return torch.where(keep, x, 0.0) * (1.0 / kept)


class Dropout(nn.Module):
    """``nn.Dropout`` with CPU-cheap masks (see the module docstring)."""

    def __init__(self, p: float = 0.1):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
