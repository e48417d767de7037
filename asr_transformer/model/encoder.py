"""The encoder: conv2d subsampling (or Whisper's Conv1d front-end) → positional encoding → N × [self-attention, feed-forward] → LayerNorm.

With ``model.conv_kernel > 0`` each block is a Conformer block instead (model/conformer.py).
"""

from __future__ import annotations

import torch
from torch import nn

from asr_transformer.config import ModelConfig
from asr_transformer.model.attention import MultiHeadAttention
from asr_transformer.model.conformer import ConformerLayer
from asr_transformer.model.dropout import Dropout
from asr_transformer.model.feedforward import ACTIVATIONS, FeedForward
from asr_transformer.model.mask import key_padding_mask
from asr_transformer.model.positional import make_positions
from asr_transformer.model.subsampling import make_subsampling


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each followed by dropout and a residual connection.

    pre_norm=True: x + f(LayerNorm(x)) (stable, the default); False: LayerNorm(x + f(x)) (the original drawing).
    """

    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, pre_norm: bool = True, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation)
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


class Encoder(nn.Module):
    """Features (B, T, F) → encoder output (B, T', D), T' ≈ T / cfg.subsampling."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.subsampling = make_subsampling(cfg)
        self.pos = make_positions(cfg, "encoder")
        if cfg.conv_kernel > 0:
            self.layers = nn.ModuleList(
                ConformerLayer(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.conv_kernel, cfg.dropout, cfg.attention_dropout)
                for _ in range(cfg.encoder_layers))
        else:
            self.layers = nn.ModuleList(
                EncoderLayer(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout, cfg.pre_norm,
                             ACTIVATIONS[cfg.activation])
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
