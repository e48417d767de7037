"""The decoder: token embedding + positional encoding → M × [masked self-attention, cross-attention,
feed-forward] → linear over the vocabulary. Autoregressive (causal) or, for Mask-CTC, not.

The decoder owns every way of running it:

- `Decoder.forward`: whole sequences (training; `causal=False` for Mask-CTC);
- `Decoder.step`: one new position at a time, with a key/value cache (greedy and beam search);
- `Decoder.cross_kv` + `Decoder.forward_kv`: whole sequences with the encoder output projected to the
  cross-attention keys/values once and reused (Mask-CTC's iterations, rescoring an n-best list);
- `Decoder.cross_attention`: a layer's cross-attention weights, for plots;
- `Decoder.alignment`: the alignment heads' cross-attention weights, for word times without a CTC head;
- `Decoder.after_prompt_token`: the distribution after a prompt token (Whisper's no-speech probability).

A decoder with a prompt (`model.decoder_prompt`, Whisper's start sequence) reads those ids before BEGIN in every
pass; the caller never sees them: inputs and outputs are the positions from BEGIN on. In decoding (`step`) the
ids of `model.suppress_tokens`, and every id from `model.suppress_from` on, get probability 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asr_transformer.config import ModelConfig, max_output_tokens
from asr_transformer.model.attention import MultiHeadAttention
from asr_transformer.model.dropout import Dropout
from asr_transformer.model.feedforward import ACTIVATIONS, FeedForward
from asr_transformer.model.mask import causal_mask, key_padding_mask, lengths_to_mask
from asr_transformer.model.positional import make_positions

LayerCache = tuple[torch.Tensor, torch.Tensor]  # (self-attention K|V (N, L, 2D), cross-attention K|V (N, T', 2D))


class DecoderLayer(nn.Module):
    """Self-attention, cross-attention (queries from the decoder, keys/values from the encoder output)
    and feed-forward, each with dropout, residual and LayerNorm (pre- or post-, as EncoderLayer)."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, pre_norm: bool = True, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.src_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation)
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
        x, self_kv = self._masked_self_attention(x, mask, self_kv)
        x, cross_kv, _ = self._cross_attention(x, memory, memory_mask, cross_kv)
        x = self._feed_forward(x)
        return x, (None if cache is None else (self_kv, cross_kv))

    def cross_attention_weights(self, x: torch.Tensor, mask: torch.Tensor, memory: torch.Tensor,
                                memory_mask: torch.Tensor) -> torch.Tensor:
        """This layer's cross-attention weights for the layer input `x` (arguments as `forward`, no cache):
        (B, H, L, T')."""
        x, _ = self._masked_self_attention(x, mask, None)
        return self._cross_attention(x, memory, memory_mask, None, need_weights=True)[2]

    # each sub-layer with its dropout, residual and LayerNorm: x + f(LayerNorm(x)), or LayerNorm(x + f(x))

    def _masked_self_attention(self, x, mask, kv):
        if self.pre_norm:
            h = self.norm1(x)
            a, _, kv = self.self_attn(h, h, h, mask, kv)
            return x + self.dropout(a), kv
        a, _, kv = self.self_attn(x, x, x, mask, kv)
        return self.norm1(x + self.dropout(a)), kv

    def _cross_attention(self, x, memory, memory_mask, kv, need_weights=False):
        if self.pre_norm:
            a, weights, kv = self.src_attn(self.norm2(x), memory, memory, memory_mask, kv, need_weights=need_weights)
            return x + self.dropout(a), kv, weights
        a, weights, kv = self.src_attn(x, memory, memory, memory_mask, kv, need_weights=need_weights)
        return self.norm2(x + self.dropout(a)), kv, weights

    def _feed_forward(self, x):
        if self.pre_norm:
            return x + self.dropout(self.ffn(self.norm3(x)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class Decoder(nn.Module):
    """Tokens (B, L) and encoder output (B, T', D) → logits (B, L, vocab)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)  # ×√d in PositionalEncoding → unit scale
        self.pos = make_positions(cfg, "decoder")
        self.layers = nn.ModuleList(
            DecoderLayer(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout, cfg.pre_norm,
                         ACTIVATIONS[cfg.activation])
            for _ in range(cfg.decoder_layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size)
        if cfg.tie_embeddings:
            self.output.weight = self.embed.weight
        self.prompt_len = len(cfg.decoder_prompt)
        self.register_buffer("prompt", torch.tensor(cfg.decoder_prompt, dtype=torch.long), persistent=False)
        suppressed = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        suppressed[list(cfg.suppress_tokens)] = True
        if cfg.suppress_from:
            suppressed[cfg.suppress_from:] = True
        self.register_buffer("suppressed", suppressed if suppressed.any() else None, persistent=False)
        self.max_tokens = max_output_tokens(cfg)  # None, or what a fixed position table has room for

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
        tokens, token_lens = self._with_prompt(tokens, token_lens)
        mask = self._self_mask(tokens, token_lens, causal)
        x = self.pos(self.embed(tokens))
        memory_mask = enc_mask.unsqueeze(1)
        for layer in self.layers:
            x, _ = layer(x, mask, enc, memory_mask)
        return self.output(self.norm(self._after_prompt(x)))

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
        tokens, _ = self._with_prompt(tokens)
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
        memory_mask = self._memory_mask(enc_mask)
        x = self.pos(self.embed(tokens[:, start:]), offset=start)
        new_self, new_cross = [], []
        for layer, layer_cache in zip(self.layers, layer_caches):
            x, (self_kv, cross_kv) = layer(x, mask, memory, memory_mask, layer_cache)
            new_self.append(self_kv)
            new_cross.append(cross_kv)
        logits = self.output(self.norm(x[:, -1]))
        if self.suppressed is not None:
            logits = logits.masked_fill(self.suppressed, float("-inf"))
        return F.log_softmax(logits.float(), dim=-1), new_self + new_cross

    def cross_kv(self, enc: torch.Tensor) -> list[torch.Tensor]:
        """Cross-attention keys|values of every layer: enc (B, T', D) → M tensors (B, T', 2D), the format of
        `step`'s cache[M:], for `forward_kv`.

        Index every tensor with the same rows (`[c[rows] for c in kv]`) to share an utterance among hypotheses.
        """
        return [layer.src_attn.project_kv(enc, enc) for layer in self.layers]

    def forward_kv(self, kv: list[torch.Tensor], enc_mask: torch.Tensor, tokens: torch.Tensor,
                   token_lens: torch.Tensor, causal: bool = True, select: torch.Tensor | None = None) -> torch.Tensor:
        """`forward` with the encoder's keys/values already projected (`cross_kv`): for callers that run the
        decoder many times over one encoder output (Mask-CTC's iterations, rescoring each hypothesis of an
        n-best list). The logits equal `forward`'s (tests/test_decode.py checks it).

        Args:
            kv: from `cross_kv`, rows matching `tokens`; enc_mask (N, T') bool.
            tokens (N, L) (padding must be a valid id), token_lens (N,); causal as `forward`.
            select: optional (N, L) bool: compute the output layer only at these positions.
        Returns:
            (N, L, V) logits, or (n_selected, V) with `select`.
        """
        tokens, token_lens = self._with_prompt(tokens, token_lens)
        N, L = tokens.shape
        # masks that allow everything are left out (the attention then skips the masking work)
        mask = key_padding_mask(token_lens, L)  # (N, 1, L) or None
        if causal:
            mask = causal_mask(L, tokens.device).unsqueeze(0) if mask is None else mask & causal_mask(L, tokens.device)
        memory_mask = self._memory_mask(enc_mask)
        x = self.pos(self.embed(tokens))
        for layer, layer_kv in zip(self.layers, kv):  # no self-attention cache: every position is computed here
            x, _ = layer(x, mask, None, memory_mask, (None, layer_kv))
        x = self.norm(self._after_prompt(x))
        if select is not None:
            x = x[select]
        return self.output(x)

    def cross_attention(self, enc: torch.Tensor, enc_mask: torch.Tensor, tokens: torch.Tensor,
                        token_lens: torch.Tensor, layer: int = -1) -> torch.Tensor:
        """Where the decoder looks: the cross-attention weights of layer `layer` (default the last) for the
        teacher-forced `tokens` (arguments as `forward`, causal), (B, H, L, T'). The model is not modified."""
        index = range(len(self.layers))[layer]
        heads = [[index, h] for h in range(self.layers[index].src_attn.heads)]
        return self.alignment(enc, enc_mask, tokens, token_lens, heads)[0]

    def alignment(self, enc: torch.Tensor, enc_mask: torch.Tensor, tokens: torch.Tensor, token_lens: torch.Tensor,
                  heads: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced `tokens` (arguments as `forward`, causal) → the cross-attention weights of `heads`
        ([layer, head] pairs; [] every head of the upper half of the layers), (B, heads, L, T'), and the logits
        (B, L, vocab): what word timestamps without a CTC head are read from (decode/attention_align.py)."""
        if not heads:
            heads = [[i, h] for i in range(len(self.layers) // 2, len(self.layers))
                     for h in range(self.layers[i].src_attn.heads)]
        tokens, token_lens = self._with_prompt(tokens, token_lens)
        mask = self._self_mask(tokens, token_lens, causal=True)
        x = self.pos(self.embed(tokens))
        memory_mask = enc_mask.unsqueeze(1)
        maps = []
        for i, layer in enumerate(self.layers):
            chosen = [h for layer_index, h in heads if layer_index == i]
            if chosen:
                maps.append(layer.cross_attention_weights(x, mask, enc, memory_mask)[:, chosen])
            x, _ = layer(x, mask, enc, memory_mask)
        logits = self.output(self.norm(self._after_prompt(x)))
        return torch.cat(maps, 1)[:, :, self.prompt_len:], logits

    def after_prompt_token(self, enc: torch.Tensor, enc_mask: torch.Tensor, token: int) -> torch.Tensor:
        """Logits (N, vocab) of the next token after the prompt's `token` (its first occurrence), none suppressed:
        what the decoder expects once it has read that far (Whisper: <|startoftranscript|>, where its no-speech
        probability is read). enc (N, T', D), enc_mask (N, T')."""
        where = (self.prompt == token).nonzero()
        if where.numel() == 0:
            raise ValueError(f"token {token} is not in the decoder's prompt")
        tokens = self.prompt[: int(where[0]) + 1].expand(enc.size(0), -1)
        L = tokens.size(1)
        x = self.pos(self.embed(tokens))
        mask = causal_mask(L, tokens.device).unsqueeze(0) if L > 1 else None
        for layer in self.layers:
            x, _ = layer(x, mask, enc, self._memory_mask(enc_mask))
        return self.output(self.norm(x[:, -1])).float()

    def set_prompt(self, ids: list[int]) -> None:
        """Read `ids` before BEGIN from now on (a Whisper language or initial prompt); a fixed position table
        then has room for fewer output tokens."""
        if self.max_tokens is not None:
            room = self.max_tokens - (len(ids) - self.prompt_len)
            if room < 1:
                raise ValueError(f"a prompt of {len(ids)} tokens leaves the decoder no room to write")
            self.max_tokens = room
        self.prompt = torch.tensor(ids, dtype=torch.long, device=self.prompt.device)
        self.prompt_len = len(ids)

    def _with_prompt(self, tokens: torch.Tensor, token_lens: torch.Tensor | None = None):
        """(B, L) tokens, (B,) lengths → the same with the prompt's P ids in front: (B, P + L), lengths + P."""
        if not self.prompt_len:
            return tokens, token_lens
        prompted = torch.cat([self.prompt.expand(tokens.size(0), -1), tokens], 1)
        return prompted, (None if token_lens is None else token_lens + self.prompt_len)

    def _after_prompt(self, x: torch.Tensor) -> torch.Tensor:
        """(B, P + L, D) → (B, L, D): the positions from BEGIN on."""
        return x[:, self.prompt_len:] if self.prompt_len else x

    @staticmethod
    def _self_mask(tokens: torch.Tensor, token_lens: torch.Tensor, causal: bool) -> torch.Tensor:
        """The self-attention mask of `forward`: (B, 1, L) key padding, and with `causal` (B, L, L)."""
        L = tokens.size(1)
        mask = lengths_to_mask(token_lens, L).unsqueeze(1)  # (B, 1, L)
        if causal:
            mask = mask & causal_mask(L, tokens.device)  # (B, L, L)
        return mask

    @staticmethod
    def _memory_mask(enc_mask: torch.Tensor) -> torch.Tensor | None:
        """(N, 1, T') encoder key-padding mask, or None when no frame is padded (the attention skips the masking;
        while `torch.export` traces, always the mask)."""
        if not torch.compiler.is_exporting() and bool(enc_mask.all()):
            return None
        return enc_mask.unsqueeze(1)
