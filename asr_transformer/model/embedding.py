"""Sinusoidal positional encoding and the convolutional front-end (conv2d subsampling)."""

from __future__ import annotations

import math

import torch
from torch import nn

from asr_transformer.model.dropout import Dropout
from asr_transformer.model.mask import lengths_to_mask


class PositionalEncoding(nn.Module):
    """x·√d + PE[offset : offset+T], then dropout (Vaswani et al. 2017, sec. 3.5).

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


# (kernel, stride) of each conv2d layer, as WeNet's Conv2dSubsampling4/6/8
_SUBSAMPLING_LAYERS = {4: ((3, 2), (3, 2)), 6: ((3, 2), (5, 3)), 8: ((3, 2), (3, 2), (3, 2))}


def subsampled_length(frames, factor: int = 4):
    """Encoder frames for `frames` input frames (an int or an int tensor), exactly as Conv2dSubsampling:
    factor 4: ((T-1)//2 - 1)//2; 6: ((T-1)//2 - 2)//3; 8: (((T-1)//2 - 1)//2 - 1)//2; never below 0."""
    for kernel, stride in _SUBSAMPLING_LAYERS[factor]:
        frames = (frames - kernel) // stride + 1
        frames = frames.clamp(min=0) if isinstance(frames, torch.Tensor) else max(frames, 0)
    return frames


class Conv2dSubsampling(nn.Module):
    """Conv2d layers (stride 2·2, 2·3 or 2·2·2, each + ReLU, no padding) over (time, frequency), then a
    linear layer to d_model: shortens time by `factor`.

    Without padding, every output frame within the output length depends only on real input frames,
    so an utterance gives the same output alone or padded inside a batch.
    """

    def __init__(self, idim: int, d_model: int, factor: int = 4, channels: int = 0):
        """channels: conv channels (0 = d_model, as ESPnet and WeNet). The second conv costs
        channels² per output cell, so at d_model channels it outweighs the whole encoder of a small
        model; 32–64 channels (as Zipformer's front-end) cut a training step by a third or more."""
        super().__init__()
        if factor not in _SUBSAMPLING_LAYERS:
            raise ValueError(f"subsampling factor must be one of {sorted(_SUBSAMPLING_LAYERS)}, got {factor}")
        self.factor, self.layers = factor, _SUBSAMPLING_LAYERS[factor]
        width = channels or d_model
        convs, channels, freq = [], 1, idim
        for kernel, stride in self.layers:
            convs += [nn.Conv2d(channels, width, kernel, stride), nn.ReLU(inplace=True)]
            channels, freq = width, (freq - kernel) // stride + 1
        if freq < 1:
            raise ValueError(f"input_dim={idim} is too small for subsampling {factor}")
        # channels-last convolutions run faster on CPUs (oneDNN), in fp32 and more so in bf16
        self.conv = nn.Sequential(*convs).to(memory_format=torch.channels_last)
        self.out = nn.Linear(freq * width, d_model)  # input ordered (frequency, channel)
        # input frames seen by one output frame (7, 11 or 15)
        self.receptive_field = 1
        for kernel, stride in reversed(self.layers):
            self.receptive_field = (self.receptive_field - 1) * stride + kernel

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Exact output lengths: factor 4: ((T-1)//2-1)//2; 6: ((T-1)//2-2)//3; 8: three times (T-1)//2."""
        return subsampled_length(lengths, self.factor)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, F), lengths (B,) → (B, T', D) with frames beyond their length zeroed, lengths (B,)."""
        x = x.masked_fill(~lengths_to_mask(lengths, x.size(1)).unsqueeze(-1), 0.0)  # padded frames = 0
        if x.size(1) < self.receptive_field:  # too short for the convs: pad (outputs are masked anyway)
            x = nn.functional.pad(x, (0, 0, 0, self.receptive_field - x.size(1)))
        x = self.conv(x.unsqueeze(1).contiguous(memory_format=torch.channels_last))  # (B, C, T', F')
        x = self.out(x.permute(0, 2, 3, 1).flatten(2))  # a view of channels-last memory → (B, T', D)
        lengths = self.output_lengths(lengths)
        return x.masked_fill(~lengths_to_mask(lengths, x.size(1)).unsqueeze(-1), 0.0), lengths
