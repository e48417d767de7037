"""The encoder, as the figure draws it: conv2d subsampling (or Whisper's Conv1d front-end) → positional encoding →
N blocks → LayerNorm.

The block is `model.block`: "transformer" (`EncoderLayer` below: self-attention and feed-forward) or "conformer"
(model/conformer.py). A block class is built from the config (`from_config`), makes its own streaming memory
(`new_cache`) and says how many frames past its input it reads (`look_ahead`); `BLOCKS` maps the names to them,
so a new block type is its file and one line there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from asr_transformer.config import ModelConfig
from asr_transformer.model.attention import MultiHeadAttention
from asr_transformer.model.cache import LayerCache
from asr_transformer.model.conformer import ConformerLayer
from asr_transformer.model.dropout import Dropout
from asr_transformer.model.feedforward import ACTIVATIONS, FeedForward
from asr_transformer.model.mask import chunk_mask, key_padding_mask
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

    look_ahead = 0  # frames past its input a block reads: attention reads none beyond its mask

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "EncoderLayer":
        return cls(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout, cfg.pre_norm,
                   ACTIVATIONS[cfg.activation])

    def new_cache(self, batch: int, like: torch.Tensor) -> LayerCache:
        """An empty streaming memory: no keys and values yet, (batch, 0, 2·D), of `like`'s dtype and device."""
        return LayerCache(like.new_zeros(batch, 0, 2 * self.self_attn.d_k * self.self_attn.heads))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, valid: torch.Tensor | None = None,
                cache: LayerCache | None = None) -> torch.Tensor:
        """x (B, T, D), mask (B, 1 | T, T) attention mask or None (attend everywhere) → (B, T, D).
        `valid` is unused (the Conformer block's convolution needs it). With `cache` (streaming) x is the next
        chunk: it also attends to the cached keys and values, which are extended by its own."""
        h = self.norm1(x) if self.pre_norm else x
        a, _, att = self.self_attn(h, h, h, mask, None if cache is None else cache.attention)
        if cache is not None:
            cache.attention = att
        if self.pre_norm:
            x = x + self.dropout(a)
            return x + self.dropout(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout(a))
        return self.norm2(x + self.dropout(self.ffn(x)))


@dataclass
class EncoderState:
    """A streaming encoder's position and memory (`Encoder.forward_chunk`): chunks of `chunk` encoder frames, each
    attending to `left_chunks` chunks before it (all when < 0), as `chunk_mask` does over a whole utterance."""

    chunk: int
    left_chunks: int = -1
    offset: int = 0  # encoder frames given out so far
    caches: list[LayerCache] = field(default_factory=list)


BLOCKS = {"transformer": EncoderLayer, "conformer": ConformerLayer}  # model.block → its class

AfterBlock = Callable[[int, torch.Tensor], torch.Tensor]  # (block number from 1, its output (B, T', D)) → output


class Encoder(nn.Module):
    """Features (B, T, F) → encoder output (B, T', D), T' ≈ T / cfg.subsampling.

    `after_block`, where a method takes it, sees each block's output and returns what the next block reads
    (ASRModel's InterCTC and self-conditioning read it there)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.subsampling = make_subsampling(cfg)
        self.pos = make_positions(cfg, "encoder")
        if cfg.block not in BLOCKS:
            raise ValueError(f"model.block={cfg.block!r}: must be one of {', '.join(BLOCKS)}")
        self.layers = nn.ModuleList(BLOCKS[cfg.block].from_config(cfg) for _ in range(cfg.encoder_layers))
        self.norm = nn.LayerNorm(cfg.d_model) if self.layers[0].pre_norm else nn.Identity()  # post-LN ends normed
        self.streaming, self.max_chunk = cfg.streaming, cfg.streaming_max_chunk

    @property
    def look_ahead(self) -> int:
        """Encoder frames past a chunk that its output depends on (0: the model can stream)."""
        return sum(block.look_ahead for block in self.layers)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor, chunk: int = 0, left_chunks: int = -1,
                after_block: AfterBlock | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F), lengths (B,) → enc (B, T', D), enc_lens (B,).

        Padded frames never influence valid ones: they are zeroed before the convolutions, the conv
        outputs beyond each length are zeroed, and every self-attention masks padded keys.
        chunk > 0: attention in chunks of that many encoder frames (`chunk_mask`), what streaming computes; a
        streaming model in training draws its chunk size itself (`draw_chunk`)."""
        x, lengths = self.subsampling(feats, lengths)
        x = self.pos(x)
        pad = key_padding_mask(lengths, x.size(1))  # (B, 1, T') or None
        if self.training and self.streaming and chunk == 0:
            chunk = self.draw_chunk()
        mask = pad
        if chunk > 0:
            mask = chunk_mask(x.size(1), chunk, left_chunks, x.device).unsqueeze(0)  # (1, T', T')
            mask = mask if pad is None else mask & pad
        valid = None if pad is None else pad.transpose(1, 2)  # (B, T', 1)
        return self.norm(self._blocks(x, mask, valid, after_block)), lengths

    def draw_chunk(self) -> int:
        """Dynamic chunk training (WeNet's U2): full context (0) half the time, else 1 … max_chunk frames."""
        if torch.rand(()) < 0.5:
            return 0
        return int(torch.randint(1, self.max_chunk + 1, ()))

    def _blocks(self, x: torch.Tensor, mask: torch.Tensor | None, valid: torch.Tensor | None,
                after_block: AfterBlock | None, caches: list[LayerCache] | None = None) -> torch.Tensor:
        """The encoder blocks over x (B, T', D) → (B, T', D)."""
        for i, block in enumerate(self.layers, 1):
            x = block(x, mask, valid, None if caches is None else caches[i - 1])
            if after_block is not None:
                x = after_block(i, x)
        return x

    def start_stream(self, chunk: int, left_chunks: int = -1, batch: int = 1) -> EncoderState:
        """A fresh `EncoderState` for chunks of `chunk` encoder frames (empty caches, position 0)."""
        like = next(self.parameters())
        return EncoderState(chunk, left_chunks, 0, [block.new_cache(batch, like) for block in self.layers])

    def forward_chunk(self, feats: torch.Tensor, state: EncoderState,
                      after_block: AfterBlock | None = None) -> torch.Tensor:
        """The next chunk's encoder output, as the whole utterance under `chunk_mask` gives it.

        feats (B, T, F): the input frames of the next ≤ state.chunk output frames — `chunk_input_frames`
        of them from frame `state.offset · subsampling` on (fewer at the end of the input) → (B, T', D).
        `state` is updated: offset advanced, caches extended and cut to the left context."""
        lengths = torch.full((feats.size(0),), feats.size(1), dtype=torch.long, device=feats.device)
        x, lengths = self.subsampling(feats, lengths)
        x = x[:, :int(lengths[0])]  # input shorter than the receptive field gives no frame
        if x.size(1) == 0:
            return x
        x = self.pos(x, state.offset)
        x = self._blocks(x, None, None, after_block, state.caches)
        state.offset += x.size(1)
        if state.left_chunks >= 0:
            keep = state.left_chunks * state.chunk
            for cache in state.caches:
                cache.attention = cache.attention[:, cache.attention.size(1) - min(keep, cache.attention.size(1)):]
        return self.norm(x)

    def chunk_input_frames(self, chunk: int) -> int:
        """Input frames that give `chunk` encoder frames: (chunk − 1)·subsampling + the front-end's receptive field."""
        sub = self.subsampling
        return (chunk - 1) * sub.factor + sub.receptive_field
