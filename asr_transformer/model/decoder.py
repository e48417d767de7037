"""The decoder: token embedding + positional encoding → M × [masked self-attention, cross-attention,
feed-forward] → linear over the vocabulary. Autoregressive (causal) or, for Mask-CTC, not."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asr_transformer.config import ModelConfig
from asr_transformer.model.attention import MultiHeadAttention
from asr_transformer.model.dropout import Dropout
from asr_transformer.model.embedding import PositionalEncoding
from asr_transformer.model.encoder import FeedForward
from asr_transformer.model.mask import causal_mask, lengths_to_mask

LayerCache = tuple[torch.Tensor, torch.Tensor]  # (self-attention K|V (N, L, 2D), cross-attention K|V (N, T', 2D))


class DecoderLayer(nn.Module):
    """Self-attention, cross-attention (queries from the decoder, keys/values from the encoder output)
    and feed-forward, each with dropout, residual and LayerNorm (pre- or post-, as EncoderLayer)."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, pre_norm: bool = True):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.src_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, mask: torch.Tensor, memory: torch.Tensor | None,
                memory_mask: torch.Tensor, cache: LayerCache | None = None) -> tuple[torch.Tensor, LayerCache | None]:
        """
        Args:
            x: (B, L, D) layer input; in incremental mode only the new positions.
            mask: (B | 1, 1 | L, L_total) self-attention mask (causal and/or key padding).
            memory: (B, T', D) encoder output; None when `cache` already holds its keys/values.
            memory_mask: (B, 1, T') encoder key-padding mask.
            cache: None (training), or (self K|V of earlier positions, cross K|V of the memory), each
                possibly empty (B, 0, 2D) on the first step.
        Returns:
            (B, L, D), and the updated cache (None when `cache` is None).
        """
        self_kv, cross_kv = cache if cache is not None else (None, None)
        if self.pre_norm:
            h = self.norm1(x)
            a, _, self_kv = self.self_attn(h, h, h, mask, self_kv)
            x = x + self.dropout(a)
            a, _, cross_kv = self.src_attn(self.norm2(x), memory, memory, memory_mask, cross_kv)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ffn(self.norm3(x)))
        else:
            a, _, self_kv = self.self_attn(x, x, x, mask, self_kv)
            x = self.norm1(x + self.dropout(a))
            a, _, cross_kv = self.src_attn(x, memory, memory, memory_mask, cross_kv)
            x = self.norm2(x + self.dropout(a))
            x = self.norm3(x + self.dropout(self.ffn(x)))
        return x, (None if cache is None else (self_kv, cross_kv))


class Decoder(nn.Module):
    """Tokens (B, L) and encoder output (B, T', D) → logits (B, L, vocab)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)  # ×√d in PositionalEncoding → unit scale
        self.pos = PositionalEncoding(cfg.d_model, cfg.dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout, cfg.pre_norm)
            for _ in range(cfg.decoder_layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size)
        if cfg.tie_embeddings:
            self.output.weight = self.embed.weight

    def forward(self, enc: torch.Tensor, enc_mask: torch.Tensor, tokens: torch.Tensor,
                token_lens: torch.Tensor, causal: bool = True) -> torch.Tensor:
        """
        Args:
            enc: (B, T', D) encoder output; enc_mask: (B, T') bool, True = valid frame.
            tokens: (B, L) int64 decoder input; every id must be a valid token id (pad with PAD, not -1).
            token_lens: (B,) valid positions of `tokens`.
            causal: True for the autoregressive decoder (position i sees ≤ i); False for Mask-CTC, which
                sees every valid position.
        Returns:
            logits (B, L, vocab).
        """
        L = tokens.size(1)
        mask = lengths_to_mask(token_lens, L).unsqueeze(1)  # (B, 1, L)
        if causal:
            mask = mask & causal_mask(L, tokens.device)  # (B, L, L)
        x = self.pos(self.embed(tokens))
        memory_mask = enc_mask.unsqueeze(1)
        for layer in self.layers:
            x, _ = layer(x, mask, enc, memory_mask)
        return self.output(self.norm(x))

    def step(self, enc: torch.Tensor, enc_mask: torch.Tensor, tokens: torch.Tensor,
             cache: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Incremental autoregressive decoding: only the positions not in `cache` are computed.

        Args:
            enc: (N, T', D) encoder output, one row per hypothesis; enc_mask: (N, T') bool.
            tokens: (N, L) the whole prefix so far, starting with SOS, no padding.
            cache: None on the first call (all L positions are computed), else the cache the previous
                call returned, for the first L_c < L positions (usually L_c = L - 1).
        Returns:
            log_probs (N, vocab) of the next token after the last position, and the new cache.

        The cache is a list of 2·M tensors (M = decoder layers), all with the hypotheses on dim 0:
        cache[i] (N, L, 2D) keys|values of layer i's self-attention for the prefix positions, and
        cache[M + i] (N, T', 2D) keys|values of layer i's cross-attention over `enc` (projected once, on
        the first call). Reorder or select hypotheses for beam search with `[c[idx] for c in cache]`
        (index `enc` and `enc_mask` the same way).
        """
        M, (N, L) = len(self.layers), tokens.shape
        if cache is None:
            start, memory = 0, enc
            empty = enc.new_zeros(N, 0, 2 * enc.size(-1))
            layer_caches = [(empty, empty)] * M
        else:
            start, memory = cache[0].size(1), None
            layer_caches = list(zip(cache[:M], cache[M:]))
        # masks that would allow everything are left out (the attention then skips the masking work):
        # one new position sees every earlier one, and a batch without padded frames needs no memory mask
        mask = causal_mask(L, tokens.device)[start:].unsqueeze(0) if L - start > 1 else None  # (1, L - start, L)
        memory_mask = None if bool(enc_mask.all()) else enc_mask.unsqueeze(1)
        x = self.pos(self.embed(tokens[:, start:]), offset=start)
        new_self, new_cross = [], []
        for layer, layer_cache in zip(self.layers, layer_caches):
            x, (self_kv, cross_kv) = layer(x, mask, memory, memory_mask, layer_cache)
            new_self.append(self_kv)
            new_cross.append(cross_kv)
        logits = self.output(self.norm(x[:, -1]))
        return F.log_softmax(logits.float(), dim=-1), new_self + new_cross
