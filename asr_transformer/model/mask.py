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


def key_padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor | None:
    """lengths (B,) → (B, 1, max_len) bool attention mask over keys, or None when no position is padded
    (one utterance alone): attention and the Conformer convolution then skip the masking work. While
    `torch.export` traces the model (`asr export`), always the mask: the graph serves padded batches too."""
    if not torch.compiler.is_exporting() and bool((lengths == max_len).all()):
        return None
    return lengths_to_mask(lengths, max_len).unsqueeze(1)


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(size, size) bool, lower triangular: position i may attend to positions ≤ i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def chunk_mask(size: int, chunk: int, left_chunks: int = -1, device: torch.device | str | None = None) -> torch.Tensor:
    """(size, size) bool, the streaming encoder's attention: frame i, in chunk i // chunk, may attend to the
    frames of its own chunk and of the `left_chunks` chunks before it (all earlier chunks when < 0)."""
    block = torch.arange(size, device=device) // chunk
    diff = block.unsqueeze(1) - block.unsqueeze(0)  # query chunk − key chunk
    allowed = diff >= 0
    return allowed & (diff <= left_chunks) if left_chunks >= 0 else allowed
