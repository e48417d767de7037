"""A reference Whisper for the import tests, written from the definition of OpenAI's model (its module and weight
names), and writers of the three checkpoint formats `asr import whisper` reads: OpenAI's ``.pt``, a Hugging Face
folder (safetensors) and a CTranslate2 folder (``model.bin``). Nothing here imports the toolkit's model."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|startofprev|>", "<|nocaptions|>",
            "<|notimestamps|>"]


@dataclass
class Dims:
    n_mels: int = 80
    n_audio_ctx: int = 64
    n_audio_state: int = 32
    n_audio_head: int = 4
    n_audio_layer: int = 2
    n_vocab: int = 0
    n_text_ctx: int = 24
    n_text_state: int = 32
    n_text_head: int = 4
    n_text_layer: int = 2


def make_tokenizer(directory: Path) -> tuple[Path, dict]:
    """A small byte-level BPE `tokenizer.json` laid out as Whisper's English-only one: text pieces, then the
    special tokens in Whisper's order. → its path and {special: id}."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    sentences = ["the quick brown fox jumps over the lazy dog", "and you always want to see it",
                 "the ship should be in within a week or ten days", "hello world, (music) [noise]"] * 20
    tok.train_from_iterator(sentences, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(SPECIALS)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path, {s: tok.token_to_id(s) for s in SPECIALS}


def sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's encoder positions: sines of the first half of the channels, cosines of the second."""
    step = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2))
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class Attention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query, self.key = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state, bias=False)
        self.value, self.out = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state)

    def forward(self, x, xa=None, mask=None):
        q, k, v = self.query(x), self.key(x if xa is None else xa), self.value(x if xa is None else xa)
        B, Tq, D = q.shape
        split = lambda t: t.view(B, t.size(1), self.n_head, D // self.n_head).transpose(1, 2)  # noqa: E731
        scores = split(q) @ split(k).transpose(-1, -2) / math.sqrt(D // self.n_head)
        if mask is not None:
            scores = scores + mask[:Tq, :Tq]
        return self.out((scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(B, Tq, D))


class Block(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross: bool):
        super().__init__()
        self.attn, self.attn_ln = Attention(n_state, n_head), nn.LayerNorm(n_state)
        self.cross_attn = Attention(n_state, n_head) if cross else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def forward(self, x, xa=None, mask=None):
        x = x + self.attn(self.attn_ln(x), mask=mask)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa)
        return x + self.mlp(self.mlp_ln(x))


class Whisper(nn.Module):
    """encoder(mel (B, n_mels, T)) → (B, ceil(T/2), D); decoder(tokens (B, L), audio) → logits (B, L, n_vocab)."""

    def __init__(self, dims: Dims):
        super().__init__()
        self.dims = dims
        self.encoder, self.decoder = nn.Module(), nn.Module()
        e, d = self.encoder, self.decoder
        e.conv1 = nn.Conv1d(dims.n_mels, dims.n_audio_state, 3, padding=1)
        e.conv2 = nn.Conv1d(dims.n_audio_state, dims.n_audio_state, 3, stride=2, padding=1)
        e.register_buffer("positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
        e.blocks = nn.ModuleList(Block(dims.n_audio_state, dims.n_audio_head, False) for _ in range(dims.n_audio_layer))
        e.ln_post = nn.LayerNorm(dims.n_audio_state)
        d.token_embedding = nn.Embedding(dims.n_vocab, dims.n_text_state)
        d.positional_embedding = nn.Parameter(torch.empty(dims.n_text_ctx, dims.n_text_state))
        d.blocks = nn.ModuleList(Block(dims.n_text_state, dims.n_text_head, True) for _ in range(dims.n_text_layer))
        d.ln = nn.LayerNorm(dims.n_text_state)
        with torch.no_grad():  # random weights large enough that a wrong wiring shows
            for name, p in self.named_parameters():
                layer_norm_gain = "ln" in name and name.endswith("weight")
                p.normal_(1.0 if layer_norm_gain else 0.0, 0.3 if "ln" in name else 0.15)

    def encode(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.encoder.conv1(mel))
        x = F.gelu(self.encoder.conv2(x)).permute(0, 2, 1)
        x = x + self.encoder.positional_embedding[:x.size(1)]
        for block in self.encoder.blocks:
            x = block(x)
        return self.encoder.ln_post(x)

    def decode(self, tokens: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        d = self.decoder
        x = d.token_embedding(tokens) + d.positional_embedding[:tokens.size(1)]
        mask = torch.full((tokens.size(1), tokens.size(1)), float("-inf")).triu(1)
        for block in d.blocks:
            x = block(x, audio, mask)
        return d.ln(x) @ d.token_embedding.weight.T


# ---------------------------------------------------------------- the three formats

def write_openai(model: Whisper, path: Path) -> Path:
    torch.save({"dims": asdict(model.dims), "model_state_dict": model.state_dict()}, path)
    return path


def _hf_name(name: str) -> str:
    for openai, hf in [("encoder.positional_embedding", "encoder.embed_positions.weight"),
                       ("decoder.positional_embedding", "decoder.embed_positions.weight"),
                       ("decoder.token_embedding", "decoder.embed_tokens"), ("encoder.ln_post", "encoder.layer_norm"),
                       ("decoder.ln.", "decoder.layer_norm."), (".blocks.", ".layers."),
                       ("cross_attn_ln", "encoder_attn_layer_norm"), ("attn_ln", "self_attn_layer_norm"),
                       ("mlp_ln", "final_layer_norm"), ("cross_attn.", "encoder_attn."), (".attn.", ".self_attn."),
                       ("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"), ("attn.out", "attn.out_proj"),
                       ("mlp.0", "fc1"), ("mlp.2", "fc2")]:
        name = name.replace(openai, hf)
    return "model." + name


def write_hf(model: Whisper, folder: Path, tokenizer: Path) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {_hf_name(k): v.contiguous() for k, v in model.state_dict().items()}
    tensors["proj_out.weight"] = tensors["model.decoder.embed_tokens.weight"].clone()
    save_file(tensors, str(folder / "model.safetensors"))
    d = model.dims
    (folder / "config.json").write_text(json.dumps({
        "model_type": "whisper", "num_mel_bins": d.n_mels, "max_source_positions": d.n_audio_ctx,
        "d_model": d.n_audio_state, "encoder_attention_heads": d.n_audio_head, "encoder_layers": d.n_audio_layer,
        "vocab_size": d.n_vocab, "max_target_positions": d.n_text_ctx, "decoder_attention_heads": d.n_text_head,
        "decoder_layers": d.n_text_layer, "encoder_ffn_dim": 4 * d.n_audio_state}))
    (folder / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    return folder


def _ct2_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2(model: Whisper, folder: Path, tokenizer: Path, dtype=np.float16) -> Path:
    """CTranslate2's WhisperSpec layout: fused q|k|v (and cross k|v) projections, gamma/beta norms, float16 weights
    (or int8 with a per-row weight_scale when dtype is np.int8), the projection an alias of the embeddings."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    out: dict[str, np.ndarray] = {}

    def lin(ct2, openai, bias=True):
        out[f"{ct2}/weight"] = sd[f"{openai}.weight"]
        if bias:
            out[f"{ct2}/bias"] = sd[f"{openai}.bias"]

    def ln(ct2, openai):
        out[f"{ct2}/gamma"], out[f"{ct2}/beta"] = sd[f"{openai}.weight"], sd[f"{openai}.bias"]

    for side, layers in (("encoder", model.dims.n_audio_layer), ("decoder", model.dims.n_text_layer)):
        for i in range(layers):
            c, o = f"{side}/layer_{i}", f"{side}.blocks.{i}"
            ln(f"{c}/self_attention/layer_norm", f"{o}.attn_ln")
            zeros = np.zeros_like(sd[f"{o}.attn.query.bias"])
            out[f"{c}/self_attention/linear_0/weight"] = np.concatenate(
                [sd[f"{o}.attn.{p}.weight"] for p in ("query", "key", "value")])
            out[f"{c}/self_attention/linear_0/bias"] = np.concatenate(
                [sd[f"{o}.attn.query.bias"], zeros, sd[f"{o}.attn.value.bias"]])
            lin(f"{c}/self_attention/linear_1", f"{o}.attn.out")
            if side == "decoder":
                ln(f"{c}/attention/layer_norm", f"{o}.cross_attn_ln")
                lin(f"{c}/attention/linear_0", f"{o}.cross_attn.query")
                out[f"{c}/attention/linear_1/weight"] = np.concatenate(
                    [sd[f"{o}.cross_attn.key.weight"], sd[f"{o}.cross_attn.value.weight"]])
                out[f"{c}/attention/linear_1/bias"] = np.concatenate([zeros, sd[f"{o}.cross_attn.value.bias"]])
                lin(f"{c}/attention/linear_2", f"{o}.cross_attn.out")
            ln(f"{c}/ffn/layer_norm", f"{o}.mlp_ln")
            lin(f"{c}/ffn/linear_0", f"{o}.mlp.0")
            lin(f"{c}/ffn/linear_1", f"{o}.mlp.2")
        out[f"{side}/position_encodings/encodings"] = sd[f"{side}.positional_embedding"]
        out[f"{side}/num_heads"] = np.array(model.dims.n_audio_head, dtype=np.int16)
    lin("encoder/conv1", "encoder.conv1")
    lin("encoder/conv2", "encoder.conv2")
    ln("encoder/layer_norm", "encoder.ln_post")
    ln("decoder/layer_norm", "decoder.ln")
    out["decoder/embeddings/weight"] = sd["decoder.token_embedding.weight"]

    ids = {np.float32: 0, np.int8: 1, np.int16: 2, np.float16: 4}
    blob = [struct.pack("<I", 6), _ct2_string("WhisperSpec"), struct.pack("<I", 3)]
    variables = []
    for name, value in sorted(out.items()):
        if value.dtype == np.float32 and value.ndim >= 2 and dtype == np.int8 and name.endswith("weight") \
                and "embeddings" not in name and "conv" not in name:
            scale = 127.0 / np.abs(value.reshape(value.shape[0], -1)).max(1).clip(min=1e-8)
            variables.append((name, np.round(value * scale.reshape(-1, *[1] * (value.ndim - 1))).astype(np.int8)))
            variables.append((name.removesuffix("weight") + "weight_scale", scale.astype(np.float32)))
        elif value.dtype == np.float32:
            variables.append((name, value.astype(np.float16 if dtype == np.int8 else dtype)))
        else:
            variables.append((name, value))
    blob.append(struct.pack("<I", len(variables)))
    for name, value in variables:
        blob += [_ct2_string(name), struct.pack("<B", value.ndim), struct.pack(f"<{value.ndim}I", *value.shape),
                 struct.pack("<B", ids[value.dtype.type]), struct.pack("<I", value.nbytes), value.tobytes()]
    blob += [struct.pack("<I", 1), _ct2_string("decoder/projection/weight"), _ct2_string("decoder/embeddings/weight")]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.bin").write_bytes(b"".join(blob))
    (folder / "config.json").write_text(json.dumps({"suppress_ids": [], "suppress_ids_begin": []}))
    (folder / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    vocab = json.loads(tokenizer.read_text())["model"]["vocab"]
    vocab.update({t: i for i, t in enumerate(SPECIALS, len(vocab))})
    names = {i: t for t, i in vocab.items()}
    (folder / "vocabulary.txt").write_text("\n".join(names.get(i, f"<|{i}|>") for i in range(model.dims.n_vocab)))
    return folder
