"""Positional encoding: the "+ positions" box of the encoder (after the subsampling) and of the decoder (after
the token embedding). Sinusoidal (Vaswani et al. 2017, sec. 3.5), or Whisper's tables (`TablePositions`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from asr_transformer.errors import UserError
from asr_transformer.model.dropout import Dropout


class PositionalEncoding(nn.Module):
    """x·√d + PE[offset : offset+T], then dropout.

    The sine/cosine table is a non-persistent buffer, rebuilt longer when a longer input arrives.
    """

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 5000):
        super().__init__()
        self.d_model, self.xscale = d_model, math.sqrt(d_model)
        self.dropout = Dropout(dropout)
        self.register_buffer("pe", self._table(max_len), persistent=False)

    def _table(self, length: int) -> torch.Tensor:
        pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / self.d_model))
        pe = torch.zeros(length, self.d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        return pe

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, T, D) → (B, T, D), positions offset … offset+T-1 (offset > 0 for incremental decoding)."""
        end = offset + x.size(1)
        if end > self.pe.size(0):
            self.pe = self._table(max(end, 2 * self.pe.size(0))).to(self.pe.device)
        return self.dropout(x * self.xscale + self.pe[offset:end].to(x.dtype))


class PositionError(UserError, ValueError):
    """An input longer than a fixed position table."""


def whisper_sinusoids(length: int, d_model: int) -> torch.Tensor:
    """Whisper's encoder table (length, d_model): sines in the first half of the channels, cosines in the second,
    timescales from 1 to 10000 spaced geometrically."""
    step = math.log(10000.0) / (d_model // 2 - 1)
    t = torch.arange(length, dtype=torch.float32)[:, None] * torch.exp(-step * torch.arange(d_model // 2))[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class TablePositions(nn.Module):
    """x + table[offset : offset+T], unscaled, then dropout: Whisper's positions. The encoder's table is fixed
    sinusoids (a buffer: an imported model keeps its own copy), the decoder's learned (a parameter)."""

    def __init__(self, length: int, d_model: int, dropout: float = 0.0, learned: bool = False):
        super().__init__()
        self.dropout = Dropout(dropout)
        if learned:
            self.table = nn.Parameter(torch.randn(length, d_model) * 0.01)
        else:
            self.register_buffer("table", whisper_sinusoids(length, d_model))

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, T, D) → (B, T, D), positions offset … offset+T-1; more than the table holds is an error."""
        end = offset + x.size(1)
        if end > self.table.size(0):
            raise PositionError(f"{end} positions, but this model's table holds {self.table.size(0)} (Whisper's: "
                                f"30 s of audio, 448 tokens); cut the audio shorter")
        return self.dropout(x + self.table[offset:end].to(x.dtype))


def make_positions(cfg, side: str) -> nn.Module:
    """The positional encoding of the encoder or decoder (`side`) that `cfg` (config.ModelConfig) names."""
    if cfg.positions == "whisper":
        if side == "encoder":
            return TablePositions(cfg.max_source_positions, cfg.d_model, cfg.dropout)
        return TablePositions(cfg.max_target_positions, cfg.d_model, cfg.dropout, learned=True)
    return PositionalEncoding(cfg.d_model, cfg.dropout)
