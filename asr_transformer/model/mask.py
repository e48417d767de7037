"""Boolean masks, True = keep (a valid frame, or a key the query may attend to)."""

from __future__ import annotations

import torch


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """lengths (B,) int → (B, max_len) bool, True where the position is < its length.

    Note: WeNet's `make_pad_mask` is the opposite (True = padding); this toolkit keeps True = valid.
    """
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    return torch.arange(max_len, device=lengths.device) < lengths.unsqueeze(-1)


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(size, size) bool, lower triangular: position i may attend to positions ≤ i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
