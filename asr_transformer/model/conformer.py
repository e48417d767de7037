"""The Conformer block (Gulati et al. 2020), the encoder's block with ``model.block: conformer``: half-step FFN, self-attention, a depthwise convolution module, half-step FFN,
LayerNorm. The convolution gives every frame its neighbours directly, which on small data makes the encoder
learn much faster."""

from __future__ import annotations

import torch
from torch import nn

from asr_transformer.config import ModelConfig
from asr_transformer.model.attention import MultiHeadAttention
from asr_transformer.model.cache import LayerCache
from asr_transformer.model.dropout import Dropout
from asr_transformer.model.feedforward import FeedForward


class ConvModule(nn.Module):
    """Conformer convolution: pointwise → GLU → depthwise conv → LayerNorm → Swish → pointwise.

    LayerNorm rather than the paper's BatchNorm, so an utterance's output never depends on the
    others in its batch; padded frames are zeroed before the depthwise convolution.
    The depthwise convolution runs as a (1 × kernel) conv2d on a (B, D, 1, T) view of the
    (B, T, D) activations: that view is channels-last in memory, which oneDNN convolves without
    copies, faster on the CPU than a conv1d on the transposed tensor (same weights).
    causal=True (streaming models): the convolution sees the kernel − 1 frames before each frame and none after;
    fed chunk by chunk it keeps those frames in `cache`.
    """

    def __init__(self, d_model: int, kernel: int, dropout: float = 0.0, causal: bool = False):
        super().__init__()
        if kernel % 2 == 0:
            raise ValueError(f"conv_kernel must be odd, got {kernel}")
        self.pointwise_in = nn.Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2, groups=d_model)
        self.norm = nn.LayerNorm(d_model)
        self.pointwise_out = nn.Linear(d_model, d_model)
        self.dropout = Dropout(dropout)
        self.causal = causal

    def forward(self, x: torch.Tensor, valid: torch.Tensor | None,
                cache: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D), valid (B, T, 1) bool or None (no padding) → (B, T, D), and with `cache` (causal only:
        the previous kernel − 1 frames of the convolution's input, (B, kernel − 1, D)) that cache updated."""
        h = nn.functional.glu(self.pointwise_in(x), dim=-1)
        if valid is not None:
            h = h.masked_fill(~valid, 0.0)
        conv, k = self.depthwise, self.depthwise.kernel_size[0]
        padding = conv.padding[0]
        if self.causal:  # the kernel − 1 frames before: zeros, or the cache's
            h = torch.cat([cache, h], 1) if cache is not None else nn.functional.pad(h, (0, 0, k - 1, 0))
            cache, padding = (h[:, h.size(1) - (k - 1):] if cache is not None else None), 0
        h = nn.functional.conv2d(
            h.transpose(1, 2).unsqueeze(2), conv.weight.unsqueeze(2), conv.bias, padding=(0, padding),
            groups=conv.groups,
        )
        h = h.squeeze(2).transpose(1, 2)
        h = nn.functional.silu(self.norm(h))
        return self.dropout(self.pointwise_out(h)), cache


class ConformerLayer(nn.Module):
    """x + ½FFN(LN x) → + MHSA(LN x) → + Conv(LN x) → + ½FFN(LN x) → LN. (B, T, D) → (B, T, D)."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, kernel: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, causal: bool = False):
        super().__init__()
        self.ffn_in = FeedForward(d_model, ffn_dim, dropout, nn.SiLU)
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.conv = ConvModule(d_model, kernel, dropout, causal)
        self.ffn_out = FeedForward(d_model, ffn_dim, dropout, nn.SiLU)
        self.norm_ffn_in, self.norm_attn, self.norm_conv, self.norm_ffn_out, self.norm_final = (
            nn.LayerNorm(d_model) for _ in range(5))
        self.dropout = Dropout(dropout)

    pre_norm = True  # LayerNorm before each module, and one at the end of the block

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "ConformerLayer":
        return cls(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.conv_kernel, cfg.dropout, cfg.attention_dropout,
                   causal=cfg.streaming)

    @property
    def look_ahead(self) -> int:
        """Frames past its input the block reads: the convolution's right half, none when it is causal."""
        return 0 if self.conv.causal else self.conv.depthwise.kernel_size[0] // 2

    def new_cache(self, batch: int, like: torch.Tensor) -> LayerCache:
        """An empty streaming memory: no keys and values, (batch, 0, 2·D), and kernel − 1 zero frames of
        convolution input, (batch, kernel − 1, D); `like`'s dtype and device."""
        d, k = self.conv.norm.normalized_shape[0], self.conv.depthwise.kernel_size[0]
        return LayerCache(like.new_zeros(batch, 0, 2 * d), like.new_zeros(batch, k - 1, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, valid: torch.Tensor | None = None,
                cache: LayerCache | None = None) -> torch.Tensor:
        """x (B, T, D), mask (B, 1 | T, T) attention mask or None, valid (B, T, 1) bool or None (no padding)
        → (B, T, D). With `cache` (streaming, model/encoder.py) x is the next chunk and the cache is updated."""
        x = x + 0.5 * self.dropout(self.ffn_in(self.norm_ffn_in(x)))
        h = self.norm_attn(x)
        a, _, att = self.self_attn(h, h, h, mask, None if cache is None else cache.attention)
        x = x + self.dropout(a)
        c, conv = self.conv(self.norm_conv(x), valid, None if cache is None else cache.conv)
        x = x + c
        if cache is not None:
            cache.attention, cache.conv = att, conv
        x = x + 0.5 * self.dropout(self.ffn_out(self.norm_ffn_out(x)))
        return self.norm_final(x)
