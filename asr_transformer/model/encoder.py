"""The encoder: conv2d subsampling (or Whisper's Conv1d front-end) → positional encoding → N × [self-attention, feed-forward] → LayerNorm.

With ``model.conv_kernel > 0`` each block is a Conformer block instead (model/conformer.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


class Encoder(nn.Module):
    """Features (B, T, F) → encoder output (B, T', D), T' ≈ T / cfg.subsampling."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.subsampling = make_subsampling(cfg)
        self.pos = make_positions(cfg, "encoder")
        if cfg.conv_kernel > 0:
            self.layers = nn.ModuleList(
                ConformerLayer(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.conv_kernel, cfg.dropout, cfg.attention_dropout,
                               causal=cfg.streaming)
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
        self.streaming, self.max_chunk = cfg.streaming, cfg.streaming_max_chunk

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor, ctc_head: nn.Module | None = None,
                chunk: int = 0, left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F), lengths (B,) → enc (B, T', D), enc_lens (B,).

        Padded frames never influence valid ones: they are zeroed before the convolutions, the conv
        outputs beyond each length are zeroed, and every self-attention masks padded keys.
        ctc_head: the CTC head's linear layer, (…, D) → (…, vocab) logits; needed with self-conditioning.
        chunk > 0: attention in chunks of that many encoder frames (`chunk_mask`), what streaming computes.
        """
        enc, lengths, _ = self.forward_with_intermediate(feats, lengths, ctc_head, False, chunk, left_chunks)
        return enc, lengths

    def forward_with_intermediate(self, feats: torch.Tensor, lengths: torch.Tensor, ctc_head: nn.Module | None = None,
                                  intermediate: bool = True, chunk: int = 0,
                                  left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """As `forward`, and also block `inter_layer`'s output through the final LayerNorm, (B, T', D), for
        InterCTC (None when `intermediate` is False). A streaming model in training draws its chunk size
        itself (`draw_chunk`)."""
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
        x, inter = self._blocks(x, mask, valid, ctc_head, intermediate)
        return self.norm(x), lengths, inter

    def draw_chunk(self) -> int:
        """Dynamic chunk training (WeNet's U2): full context (0) half the time, else 1 … max_chunk frames."""
        if torch.rand(()) < 0.5:
            return 0
        return int(torch.randint(1, self.max_chunk + 1, ()))

    def _blocks(self, x: torch.Tensor, mask: torch.Tensor | None, valid: torch.Tensor | None,
                ctc_head: nn.Module | None, intermediate: bool,
                caches: list[LayerCache] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The encoder blocks over x (B, T', D) → (B, T', D), and InterCTC's normalised block output or None."""
        inter = None
        for i, block in enumerate(self.layers, 1):
            x = block(x, mask, valid, None if caches is None else caches[i - 1])
            if i == self.inter_layer and (intermediate or self.condition is not None):
                inter = self.norm(x)
                if self.condition is not None:
                    x = x + self._conditioning(inter, ctc_head)
        return x, inter if intermediate else None

    def start_stream(self, chunk: int, left_chunks: int = -1, batch: int = 1) -> EncoderState:
        """A fresh `EncoderState` for chunks of `chunk` encoder frames (empty caches, position 0)."""
        p = next(self.parameters())
        caches = []
        for block in self.layers:
            att = p.new_zeros(batch, 0, 2 * block.self_attn.d_k * block.self_attn.heads)
            conv = getattr(block, "conv", None)
            k = conv.depthwise.kernel_size[0] if conv is not None else 0
            caches.append(LayerCache(att, p.new_zeros(batch, k - 1, att.size(-1) // 2) if conv is not None else None))
        return EncoderState(chunk, left_chunks, 0, caches)

    def forward_chunk(self, feats: torch.Tensor, state: EncoderState,
                      ctc_head: nn.Module | None = None) -> torch.Tensor:
        """The next chunk's encoder output, as the whole utterance under `chunk_mask` gives it.

        feats (B, T, F): the input frames of the next ≤ state.chunk output frames — `chunk_input_frames`
        of them from frame `state.offset · subsampling` on (fewer at the end of the input) → (B, T', D).
        `state` is updated: offset advanced, caches extended and cut to the left context."""
        if self.condition is None:
            ctc_head = None
        lengths = torch.full((feats.size(0),), feats.size(1), dtype=torch.long, device=feats.device)
        x, lengths = self.subsampling(feats, lengths)
        x = x[:, :int(lengths[0])]  # input shorter than the receptive field gives no frame
        if x.size(1) == 0:
            return x
        x = self.pos(x, state.offset)
        x, _ = self._blocks(x, None, None, ctc_head, False, state.caches)
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

    def _conditioning(self, inter: torch.Tensor, ctc_head: nn.Module | None) -> torch.Tensor:
        """Self-conditioned CTC: softmax(ctc_head(inter)) (B, T', vocab) → (B, T', D) through `condition`."""
        if ctc_head is None:
            raise ValueError("this encoder is self-conditioned (model.interctc_condition): pass the CTC head")
        logits = ctc_head(inter.to(ctc_head.weight.dtype))  # the head stays float32 under a bf16 encoder
        return self.condition(logits.softmax(-1).to(inter.dtype))
