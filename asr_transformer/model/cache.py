"""What a streaming encoder block keeps between chunks (model/encoder.py `EncoderState`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LayerCache:
    """One encoder block's memory of the chunks before: the keys and values its self-attention may still
    look at, (B, Tc, 2·D) as `MultiHeadAttention` caches them, and a Conformer block's last kernel − 1
    convolution inputs, (B, kernel − 1, D) (None in a Transformer block)."""

    attention: torch.Tensor
    conv: torch.Tensor | None = None
