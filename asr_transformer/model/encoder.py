"""The encoder: conv2d subsampling → positional encoding → N × [self-attention, feed-forward].

With ``conv_kernel > 0`` each block is a Conformer block (Gulati et al. 2020): half-step FFN,
self-attention, a depthwise convolution module, half-step FFN, LayerNorm. The convolution gives
every frame its neighbours directly, which on small data makes the encoder learn much faster.
"""

from __future__ import annotations

import torch
from torch import nn

from asr_transformer.config import ModelConfig
from asr_transformer.model.attention import MultiHeadAttention
from asr_transformer.model.dropout import Dropout
from asr_transformer.model.embedding import Conv2dSubsampling, PositionalEncoding
from asr_transformer.model.mask import key_padding_mask


class FeedForward(nn.Module):
    """Position-wise feed-forward: Linear → ReLU (or Swish) → dropout → Linear. (B, T, D) → (B, T, D)."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float = 0.0, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        # in place: saves writing a (B, T, ffn_dim) tensor (the Linear's output is not needed for backward)
        act = nn.ReLU(inplace=True) if activation is nn.ReLU else activation()
        self.net = nn.Sequential(nn.Linear(d_model, ffn_dim), act, Dropout(dropout), nn.Linear(ffn_dim, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each followed by dropout and a residual connection.

    pre_norm=True: x + f(LayerNorm(x)) (stable, the default); False: LayerNorm(x + f(x)) (the original drawing).
    """

    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, pre_norm: bool = True):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, T, D), mask (B, 1, T) key-padding mask or None (no padding) → (B, T, D)."""
        if self.pre_norm:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask)[0])
            return x + self.dropout(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + self.dropout(self.ffn(x)))


class ConvModule(nn.Module):
    """Conformer convolution: pointwise → GLU → depthwise conv → LayerNorm → Swish → pointwise.

    LayerNorm rather than the paper's BatchNorm, so an utterance's output never depends on the
    others in its batch; padded frames are zeroed before the depthwise convolution.
    The depthwise convolution runs as a (1 × kernel) conv2d on a (B, D, 1, T) view of the
    (B, T, D) activations: that view is channels-last in memory, which oneDNN convolves without
    copies, faster on the CPU than a conv1d on the transposed tensor (same weights).
    """

    def __init__(self, d_model: int, kernel: int, dropout: float = 0.0):
        super().__init__()
        if kernel % 2 == 0:
            raise ValueError(f"conv_kernel must be odd, got {kernel}")
        self.pointwise_in = nn.Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2, groups=d_model)
        self.norm = nn.LayerNorm(d_model)
        self.pointwise_out = nn.Linear(d_model, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """x (B, T, D), valid (B, T, 1) bool or None (no padding) → (B, T, D)."""
        h = nn.functional.glu(self.pointwise_in(x), dim=-1)
        if valid is not None:
            h = h.masked_fill(~valid, 0.0)
        conv = self.depthwise
        h = nn.functional.conv2d(
            h.transpose(1, 2).unsqueeze(2), conv.weight.unsqueeze(2), conv.bias, padding=(0, conv.padding[0]),
            groups=conv.groups,
        )
        h = h.squeeze(2).transpose(1, 2)
        h = nn.functional.silu(self.norm(h))
        return self.dropout(self.pointwise_out(h))


class ConformerLayer(nn.Module):
    """x + ½FFN(LN x) → + MHSA(LN x) → + Conv(LN x) → + ½FFN(LN x) → LN. (B, T, D) → (B, T, D)."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, kernel: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0):
        super().__init__()
        self.ffn_in = FeedForward(d_model, ffn_dim, dropout, nn.SiLU)
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.conv = ConvModule(d_model, kernel, dropout)
        self.ffn_out = FeedForward(d_model, ffn_dim, dropout, nn.SiLU)
        self.norm_ffn_in, self.norm_attn, self.norm_conv, self.norm_ffn_out, self.norm_final = (
            nn.LayerNorm(d_model) for _ in range(5))
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, T, D), mask (B, 1, T) key-padding mask or None (no padding) → (B, T, D)."""
        x = x + 0.5 * self.dropout(self.ffn_in(self.norm_ffn_in(x)))
        h = self.norm_attn(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask)[0])
        x = x + self.conv(self.norm_conv(x), None if mask is None else mask.transpose(1, 2))
        x = x + 0.5 * self.dropout(self.ffn_out(self.norm_ffn_out(x)))
        return self.norm_final(x)


class Encoder(nn.Module):
    """Features (B, T, F) → encoder output (B, T', D), T' ≈ T / cfg.subsampling."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.subsampling = Conv2dSubsampling(cfg.input_dim, cfg.d_model, cfg.subsampling, cfg.subsampling_channels)
        self.pos = PositionalEncoding(cfg.d_model, cfg.dropout)
        if cfg.conv_kernel > 0:
            self.layers = nn.ModuleList(
                ConformerLayer(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.conv_kernel, cfg.dropout, cfg.attention_dropout)
                for _ in range(cfg.encoder_layers))
        else:
            self.layers = nn.ModuleList(
                EncoderLayer(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout, cfg.pre_norm)
                for _ in range(cfg.encoder_layers))
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm or cfg.conv_kernel > 0 else nn.Identity()
        self.inter_layer = cfg.interctc_layer or (cfg.encoder_layers + 1) // 2  # InterCTC's block (1-based)
        # self-conditioned CTC: that block's CTC posteriors (vocab) → d_model, added to its output
        self.condition = nn.Linear(cfg.vocab_size, cfg.d_model) if cfg.interctc_condition else None

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor,
                ctc_head: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F), lengths (B,) → enc (B, T', D), enc_lens (B,).

        Padded frames never influence valid ones: they are zeroed before the convolutions, the conv
        outputs beyond each length are zeroed, and every self-attention masks padded keys.
        ctc_head: the CTC head's linear layer, (…, D) → (…, vocab) logits; needed with self-conditioning.
        """
        enc, lengths, _ = self.forward_with_intermediate(feats, lengths, ctc_head, intermediate=False)
        return enc, lengths

    def forward_with_intermediate(self, feats: torch.Tensor, lengths: torch.Tensor, ctc_head: nn.Module | None = None,
                                  intermediate: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """As `forward`, and also block `inter_layer`'s output through the final LayerNorm, (B, T', D), for
        InterCTC (None when `intermediate` is False)."""
        x, lengths = self.subsampling(feats, lengths)
        x = self.pos(x)
        mask = key_padding_mask(lengths, x.size(1))  # (B, 1, T') or None
        inter = None
        for i, block in enumerate(self.layers, 1):
            x = block(x, mask)
            if i == self.inter_layer and (intermediate or self.condition is not None):
                inter = self.norm(x)
                if self.condition is not None:
                    x = x + self._conditioning(inter, ctc_head)
        return self.norm(x), lengths, inter if intermediate else None

    def _conditioning(self, inter: torch.Tensor, ctc_head: nn.Module | None) -> torch.Tensor:
        """Self-conditioned CTC: softmax(ctc_head(inter)) (B, T', vocab) → (B, T', D) through `condition`."""
        if ctc_head is None:
            raise ValueError("this encoder is self-conditioned (model.interctc_condition): pass the CTC head")
        logits = ctc_head(inter.to(ctc_head.weight.dtype))  # the head stays float32 under a bf16 encoder
        return self.condition(logits.softmax(-1).to(inter.dtype))
