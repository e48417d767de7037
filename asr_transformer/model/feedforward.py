"""The position-wise feed-forward box of every encoder, Conformer and decoder block."""

from __future__ import annotations

import torch
from torch import nn

from asr_transformer.model.dropout import Dropout


class FeedForward(nn.Module):
    """Position-wise feed-forward: Linear → ReLU (or GELU, Swish) → dropout → Linear. (B, T, D) → (B, T, D)."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float = 0.0, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        # in place: saves writing a (B, T, ffn_dim) tensor (the Linear's output is not needed for backward)
        act = nn.ReLU(inplace=True) if activation is nn.ReLU else activation()
        self.net = nn.Sequential(nn.Linear(d_model, ffn_dim), act, Dropout(dropout), nn.Linear(ffn_dim, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}  # config.ModelConfig.activation
