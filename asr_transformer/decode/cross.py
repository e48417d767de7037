"""Whole-sequence decoder passes that reuse the cross-attention keys/values.

`model.decoder(enc, …)` projects the encoder output to keys/values in every layer on every call. Mask-CTC
calls the decoder once per iteration and rescoring once for each of an utterance's n-best hypotheses, so
here the projection is made once per utterance (`cross_kv`, in the format of the decoder's step cache) and
`decoder_logits` runs the layers on it. The result equals `model.decoder(enc, enc_mask, tokens, lens, causal)`
(tests/test_decode.py checks it).
"""

from __future__ import annotations

import torch

from asr_transformer.model.mask import causal_mask, key_padding_mask


def cross_kv(model, enc: torch.Tensor) -> list[torch.Tensor]:
    """Cross-attention keys|values of every decoder layer: enc (B, T', D) → M tensors (B, T', 2D).

    Index every tensor with the same rows (`[c[rows] for c in kv]`) to share an utterance among hypotheses.
    """
    return [layer.src_attn.project_kv(enc, enc) for layer in model.decoder.layers]


def decoder_logits(model, kv: list[torch.Tensor], enc_mask: torch.Tensor, tokens: torch.Tensor,
                   token_lens: torch.Tensor, causal: bool = True, select: torch.Tensor | None = None) -> torch.Tensor:
    """Decoder logits from cached cross keys/values.

    Args:
        kv: from `cross_kv`, rows matching `tokens`; enc_mask (N, T') bool.
        tokens (N, L) (padding must be a valid id), token_lens (N,); causal as `Decoder.forward`.
        select: optional (N, L) bool: compute the output layer only at these positions.
    Returns:
        (N, L, V) logits, or (n_selected, V) with `select`.
    """
    dec = model.decoder
    N, L = tokens.shape
    # masks that allow everything are left out (the attention then skips the masking work)
    mask = key_padding_mask(token_lens, L)  # (N, 1, L) or None
    if causal:
        mask = causal_mask(L, tokens.device).unsqueeze(0) if mask is None else mask & causal_mask(L, tokens.device)
    memory_mask = None if bool(enc_mask.all()) else enc_mask.unsqueeze(1)
    x = dec.pos(dec.embed(tokens))
    for layer, layer_kv in zip(dec.layers, kv):  # no self-attention cache: every position is computed here
        x, _ = layer(x, mask, None, memory_mask, (None, layer_kv))
    x = dec.norm(x)
    if select is not None:
        x = x[select]
    return dec.output(x)
