"""Multi-head scaled dot-product attention (Vaswani et al. 2017), with an optional key/value cache."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate query/key/value/output projections.

    The usual path calls `F.scaled_dot_product_attention` (fused kernels); `need_weights=True` takes an
    explicit softmax path that also returns the attention weights (for plots). Both give the same output.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.heads, self.d_k, self.dropout = heads, d_model // heads, dropout
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        mask: torch.Tensor | None = None,
        cache: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Attend from `query` to `key`/`value`.

        Args:
            query: (B, Tq, D).
            key, value: (B, Tk, D); None when `cache` already holds every key and value.
            mask: (B, 1 | Tq, Tk_total) bool, True = the query may attend to that key. A query row with no
                key at all (e.g. an utterance of length 0) gives a zero output, never NaN.
            cache: None (no cache), or (B, Tc, 2·D): keys and values (projected, heads merged, concatenated
                on the last dim) from earlier calls; the new keys/values are appended after them, so
                Tk_total = Tc + Tk. Start a cache with an empty (B, 0, 2·D) tensor.
            need_weights: also return the attention weights.
        Returns:
            out (B, Tq, D); weights (B, H, Tq, Tk_total) or None; new cache (B, Tk_total, 2·D) or None
            when `cache` is None.
        """
        B, Tq, _ = query.shape
        q = self.q(query).unflatten(-1, (self.heads, self.d_k)).transpose(1, 2)  # (B, H, Tq, d_k)
        if cache is not None:
            cache = torch.cat([cache, self.project_kv(key, value)], 1) if key is not None else cache
            k, v = cache.chunk(2, -1)
        else:
            k, v = self.k(key), self.v(value)
        k = k.unflatten(-1, (self.heads, self.d_k)).transpose(1, 2)  # (B, H, Tk, d_k)
        v = v.unflatten(-1, (self.heads, self.d_k)).transpose(1, 2)

        has_key = None
        if mask is not None:
            mask = mask.unsqueeze(1)  # (B, 1, Tq|1, Tk): broadcast over heads
            has_key = mask.any(-1, keepdim=True)  # rows with at least one key to attend to
            mask = mask | ~has_key  # fully masked rows attend everywhere, then are zeroed below
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, Tq, Tk)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = scores.softmax(-1)
            if has_key is not None:
                weights = weights.masked_fill(~has_key, 0.0)
            out = F.dropout(weights, p, self.training) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            if has_key is not None:
                out = out.masked_fill(~has_key, 0.0)
        out = out.transpose(1, 2).reshape(B, Tq, -1)  # (B, Tq, D)
        return self.out(out), weights, cache

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Keys and values as the cache holds them: (B, Tk, D) each → (B, Tk, 2·D), keys first."""
        return torch.cat([self.k(key), self.v(value)], -1)
