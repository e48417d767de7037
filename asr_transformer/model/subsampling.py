"""The convolutional front-end: conv2d subsampling, features (B, T, F) → (B, T/4, d_model) (or /6, /8); or
Whisper's two Conv1d layers, (B, T, F) → (B, T/2, d_model).

Its length arithmetic, `subsampled_length`, lives in asr_transformer/frames.py, so that the data loader can
use it without importing the model.
"""

from __future__ import annotations

import torch
from torch import nn

from asr_transformer.frames import SUBSAMPLING_LAYERS, subsampled_length
from asr_transformer.model.mask import lengths_to_mask


class Conv2dSubsampling(nn.Module):
    """Conv2d layers (stride 2·2, 2·3 or 2·2·2, each + ReLU, no padding) over (time, frequency), then a
    linear layer to d_model: shortens time by `factor`.

    Without padding, every output frame within the output length depends only on real input frames,
    so an utterance gives the same output alone or padded inside a batch.
    """

    def __init__(self, idim: int, d_model: int, factor: int = 4, channels: int = 0):
        """channels: conv channels (0 = d_model, as ESPnet and WeNet). The second conv costs
        channels² per output cell, so at d_model channels it outweighs the whole encoder of a small
        model; 32–64 channels (as Zipformer's front-end) make a training step much cheaper (measured:
        bench/train_speed.py, shapes `small` against `small_c32`)."""
        super().__init__()
        if factor not in SUBSAMPLING_LAYERS:
            raise ValueError(f"subsampling factor must be one of {sorted(SUBSAMPLING_LAYERS)}, got {factor}")
        self.factor, self.layers = factor, SUBSAMPLING_LAYERS[factor]
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


class Conv1dSubsampling(nn.Module):
    """Whisper's front-end: Conv1d (kernel 3, stride 1) → GELU → Conv1d (kernel 3, stride 2) → GELU, each padded
    by one frame on both sides: (B, T, F) → (B, ⌈T/2⌉, D).

    Frames beyond each length are zeroed before each convolution, so an utterance gives the same output alone
    (where the convolution pads with zeros) or padded inside a batch."""

    factor = 2

    def __init__(self, idim: int, d_model: int):
        super().__init__()
        self.conv1 = nn.Conv1d(idim, d_model, 3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, 3, stride=2, padding=1)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return subsampled_length(lengths, self.factor)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, F), lengths (B,) → (B, T', D) with frames beyond their length zeroed, lengths (B,)."""
        valid = lengths_to_mask(lengths, x.size(1)).unsqueeze(1)  # (B, 1, T)
        h = nn.functional.gelu(self.conv1(x.transpose(1, 2).masked_fill(~valid, 0.0)))
        h = nn.functional.gelu(self.conv2(h.masked_fill(~valid, 0.0))).transpose(1, 2)  # (B, T', D)
        lengths = self.output_lengths(lengths)
        return h.masked_fill(~lengths_to_mask(lengths, h.size(1)).unsqueeze(-1), 0.0), lengths


def make_subsampling(cfg) -> nn.Module:
    """The front-end `cfg` (config.ModelConfig) names: conv2d subsampling, or Whisper's Conv1d layers."""
    if cfg.frontend == "whisper":
        return Conv1dSubsampling(cfg.input_dim, cfg.d_model)
    return Conv2dSubsampling(cfg.input_dim, cfg.d_model, cfg.subsampling, cfg.subsampling_channels)
