"""Import OpenAI Whisper checkpoints as model packages (`asr import whisper`).

Whisper is the lecture's model: log-mel features, a convolutional front-end, sinusoidal positions, pre-LN
encoder blocks and a decoder with masked self-attention and cross-attention that starts at BEGIN and stops at
END. Its weights map one to one onto the toolkit's blocks with the model options `frontend: whisper`,
`activation: gelu` and `positions: whisper` (config.ModelConfig). Three formats are read, each by its own
definition, without the libraries that wrote them:

- OpenAI's ``.pt`` checkpoints (``{"dims": …, "model_state_dict": …}``; the tokenizer comes separately,
  a Hugging Face ``tokenizer.json``);
- Hugging Face ``transformers`` folders (``config.json``, ``model.safetensors``, ``tokenizer.json``);
- CTranslate2 folders (``config.json``, ``model.bin``, ``tokenizer.json``), as faster-whisper uses; float16,
  bfloat16 and int8 weights are turned back into floats.

Each reader gives the weights under OpenAI's names (`OPENAI` naming); `package_weights` maps those onto the
toolkit's model. Ids shift by NUM_SPECIAL (data/whisper_tokenizer.py); the decoder reads Whisper's start
sequence (``<|startoftranscript|>`` [``<|en|><|transcribe|>``]) before BEGIN, which plays ``<|notimestamps|>``.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asr_transformer.config import Config, DecodeConfig
from asr_transformer.data.whisper_tokenizer import WhisperTokenizer
from asr_transformer.errors import UserError
from asr_transformer.tokens import BLANK, EOS, MASK, NUM_SPECIAL, SOS, UNK


class WhisperImportError(UserError, ValueError):
    """A Whisper checkpoint that cannot be read or does not describe a Whisper model."""


@dataclass
class WhisperDims:
    """Whisper's hyper-parameters, under OpenAI's names."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @property
    def multilingual(self) -> bool:
        return self.n_vocab >= 51865


@dataclass
class WhisperCheckpoint:
    """What a reader found: the dimensions, the weights under OpenAI's names (float tensors), and when the source
    carries them, the tokenizer (``tokenizer.json`` bytes) and the ids Whisper's decoding suppresses."""

    dims: WhisperDims
    weights: dict[str, torch.Tensor]
    tokenizer_json: bytes | None = None
    suppress_ids: list[int] | None = None
    alignment_heads: list[list[int]] | None = None  # [layer, head] pairs whose cross-attention follows time


# ---------------------------------------------------------------- OpenAI's .pt

def read_openai(path: Path) -> WhisperCheckpoint:
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds on a foreign file
        raise WhisperImportError(f"{path}: not a PyTorch checkpoint ({str(e).splitlines()[0][:200]})") from None
    if not isinstance(checkpoint, dict) or "dims" not in checkpoint or "model_state_dict" not in checkpoint:
        raise WhisperImportError(f"{path}: not an OpenAI Whisper checkpoint (no 'dims' and 'model_state_dict')")
    try:
        dims = WhisperDims(**checkpoint["dims"])
    except TypeError as e:
        raise WhisperImportError(f"{path}: its 'dims' are not Whisper's ({e})") from None
    return WhisperCheckpoint(dims, {k: v.float() for k, v in checkpoint["model_state_dict"].items()})


# ---------------------------------------------------------------- Hugging Face transformers (safetensors)

def _bfloat16(raw) -> np.ndarray:
    """Little-endian bfloat16 bytes → float32 (bfloat16 is float32's upper half)."""
    return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)


SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
                      "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A ``.safetensors`` file: an 8-byte little-endian header size, a JSON header (name → dtype, shape,
    data_offsets), then the raw little-endian data. bfloat16 arrays are widened to float32."""
    data = path.read_bytes()
    if len(data) < 8:
        raise WhisperImportError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + size])
    except (ValueError, UnicodeDecodeError):
        raise WhisperImportError(f"{path}: not a safetensors file (its header is not JSON)") from None
    body, tensors = memoryview(data)[8 + size:], {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = body[begin:end]
        if entry["dtype"] == "BF16":
            array = _bfloat16(raw)
        elif entry["dtype"] in SAFETENSORS_DTYPES:
            array = np.frombuffer(raw, dtype=np.dtype(SAFETENSORS_DTYPES[entry["dtype"]]).newbyteorder("<"))
        else:
            raise WhisperImportError(f"{path}: tensor {name} has dtype {entry['dtype']}, which this reader does not know")
        tensors[name] = torch.from_numpy(array.reshape(entry["shape"]).copy())
    return tensors


HF_NAMES = [  # (Hugging Face, OpenAI) name pieces, applied in order
    ("encoder.embed_positions.weight", "encoder.positional_embedding"),
    ("decoder.embed_positions.weight", "decoder.positional_embedding"),
    ("decoder.embed_tokens", "decoder.token_embedding"),
    ("encoder.layer_norm", "encoder.ln_post"), ("decoder.layer_norm", "decoder.ln"),
    (".layers.", ".blocks."), ("self_attn_layer_norm", "attn_ln"), ("encoder_attn_layer_norm", "cross_attn_ln"),
    ("final_layer_norm", "mlp_ln"), ("self_attn.", "attn."), ("encoder_attn.", "cross_attn."),
    ("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "out"), ("fc1", "mlp.0"),
    ("fc2", "mlp.2"),
]


def read_hf(folder: Path) -> WhisperCheckpoint:
    config = _read_json(folder / "config.json")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WhisperImportError(f"{folder}: no .safetensors weights (save the model with safe_serialization=True)")
    try:
        dims = WhisperDims(config["num_mel_bins"], config["max_source_positions"], config["d_model"],
                           config["encoder_attention_heads"], config["encoder_layers"], config["vocab_size"],
                           config["max_target_positions"], config["d_model"], config["decoder_attention_heads"],
                           config["decoder_layers"])
    except KeyError as e:
        raise WhisperImportError(f"{folder / 'config.json'}: no {e.args[0]}: not a Whisper config") from None
    weights = {}
    for file in files:
        for name, tensor in read_safetensors(file).items():
            name = name.removeprefix("model.")
            if name == "proj_out.weight":  # tied to the token embedding
                continue
            for hf, openai in HF_NAMES:
                name = name.replace(hf, openai)
            weights[name] = tensor.float()
    generation = folder / "generation_config.json"
    generation = _read_json(generation) if generation.exists() else {}
    return WhisperCheckpoint(dims, weights, _optional_bytes(folder / "tokenizer.json"),
                             generation.get("suppress_tokens"), generation.get("alignment_heads"))


# ---------------------------------------------------------------- CTranslate2 (faster-whisper)

CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bfloat16"}


def read_ct2_model(path: Path) -> dict[str, np.ndarray]:
    """CTranslate2's ``model.bin``: uint32 binary version (≥ 2: then a name string and a uint32 revision), uint32
    count of variables, each: name string, uint8 rank, rank × uint32 dims, uint8 dtype, uint32 byte count, the
    data; then uint32 count of aliases (alias string, target string). A string is a uint16 length (with its
    terminating NUL) and the UTF-8 bytes. All little-endian."""
    data, pos = path.read_bytes(), 0

    def take(fmt: str):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string() -> str:
        nonlocal pos
        (length,) = take("H")
        text = data[pos:pos + length - 1].decode("utf-8")
        pos += length
        return text

    try:
        (version,) = take("I")
        if version > 6 or version < 1:
            raise WhisperImportError(f"{path}: CTranslate2 binary version {version}, which this reader does not know")
        if version >= 2:
            string(), take("I")  # spec name, revision
        variables = {}
        for _ in range(take("I")[0]):
            name = string()
            (rank,) = take("B")
            shape = take(f"{rank}I")
            dtype, (size,) = CT2_DTYPES.get(take("B")[0]), take("I")
            raw = data[pos:pos + size]
            pos += size
            if dtype is None:
                raise WhisperImportError(f"{path}: {name} has a data type this reader does not know")
            if dtype == "bfloat16":
                array = _bfloat16(raw)
            else:
                array = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
            variables[name] = array.reshape(shape)
        if pos < len(data):
            for _ in range(take("I")[0]):
                alias, target = string(), string()
                variables[alias] = variables[target]
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, WhisperImportError):
            raise
        raise WhisperImportError(f"{path}: not a CTranslate2 model.bin, or cut short ({e})") from None
    return variables


def _ct2_float(variables: dict, name: str) -> torch.Tensor:
    """A weight as float32; an int8 weight is divided by its per-row `weight_scale` (CTranslate2's quantization)."""
    value = variables[name]
    tensor = torch.from_numpy(value.astype(np.float32))
    scale = variables.get(name.removesuffix("weight") + "weight_scale")
    if value.dtype == np.int8 and scale is not None:
        tensor = tensor / torch.from_numpy(scale.astype(np.float32)).reshape(-1, *([1] * (tensor.dim() - 1)))
    return tensor


def read_ct2(folder: Path) -> WhisperCheckpoint:
    variables = read_ct2_model(folder / "model.bin")
    config = _read_json(folder / "config.json") if (folder / "config.json").exists() else {}
    if "encoder/conv1/weight" not in variables:
        raise WhisperImportError(f"{folder / 'model.bin'}: a CTranslate2 model, but not a Whisper one")
    get = lambda name: _ct2_float(variables, name)  # noqa: E731
    weights = {}

    def linear(ct2: str, openai: str):
        weights[f"{openai}.weight"] = get(f"{ct2}/weight")
        if f"{ct2}/bias" in variables:
            weights[f"{openai}.bias"] = get(f"{ct2}/bias")

    def norm(ct2: str, openai: str):
        weights[f"{openai}.weight"], weights[f"{openai}.bias"] = get(f"{ct2}/gamma"), get(f"{ct2}/beta")

    def fused(ct2: str, openai: str, parts: list[str]):  # one linear layer holding q|k|v or k|v
        for part, w, b in zip(parts, get(f"{ct2}/weight").chunk(len(parts)), get(f"{ct2}/bias").chunk(len(parts))):
            weights[f"{openai}.{part}.weight"] = w
            if part != "key":  # Whisper's keys have no bias (CTranslate2 stores zeros)
                weights[f"{openai}.{part}.bias"] = b

    for side in ("encoder", "decoder"):
        layers = sum(1 for n in variables if n.startswith(f"{side}/layer_") and n.endswith("ffn/linear_0/weight"))
        for i in range(layers):
            ct2, openai = f"{side}/layer_{i}", f"{side}.blocks.{i}"
            norm(f"{ct2}/self_attention/layer_norm", f"{openai}.attn_ln")
            fused(f"{ct2}/self_attention/linear_0", f"{openai}.attn", ["query", "key", "value"])
            linear(f"{ct2}/self_attention/linear_1", f"{openai}.attn.out")
            if side == "decoder":
                norm(f"{ct2}/attention/layer_norm", f"{openai}.cross_attn_ln")
                linear(f"{ct2}/attention/linear_0", f"{openai}.cross_attn.query")
                fused(f"{ct2}/attention/linear_1", f"{openai}.cross_attn", ["key", "value"])
                linear(f"{ct2}/attention/linear_2", f"{openai}.cross_attn.out")
            norm(f"{ct2}/ffn/layer_norm", f"{openai}.mlp_ln")
            linear(f"{ct2}/ffn/linear_0", f"{openai}.mlp.0")
            linear(f"{ct2}/ffn/linear_1", f"{openai}.mlp.2")
        weights[f"{side}.positional_embedding"] = get(f"{side}/position_encodings/encodings")
    linear("encoder/conv1", "encoder.conv1")
    linear("encoder/conv2", "encoder.conv2")
    norm("encoder/layer_norm", "encoder.ln_post")
    norm("decoder/layer_norm", "decoder.ln")
    weights["decoder.token_embedding.weight"] = get("decoder/embeddings/weight")
    heads = [int(variables[f"{side}/num_heads"]) if f"{side}/num_heads" in variables else None
             for side in ("encoder", "decoder")]
    if None in heads:
        raise WhisperImportError(f"{folder / 'model.bin'}: no encoder/num_heads or decoder/num_heads")
    (n_audio_ctx, d_audio), (n_text_ctx, d_text) = (weights[f"{s}.positional_embedding"].shape
                                                     for s in ("encoder", "decoder"))
    dims = WhisperDims(weights["encoder.conv1.weight"].shape[1], n_audio_ctx, d_audio, heads[0],
                       _count_blocks(weights, "encoder"), weights["decoder.token_embedding.weight"].shape[0],
                       n_text_ctx, d_text, heads[1], _count_blocks(weights, "decoder"))
    return WhisperCheckpoint(dims, weights, _optional_bytes(folder / "tokenizer.json"), config.get("suppress_ids"),
                             config.get("alignment_heads"))


# ---------------------------------------------------------------- one reader for any source

def read_whisper(source: str | os.PathLike) -> WhisperCheckpoint:
    """The checkpoint at `source`: an OpenAI ``.pt`` file, a Hugging Face folder or a CTranslate2 folder."""
    source = Path(source)
    if source.is_file():
        return read_openai(source)
    if not source.is_dir():
        raise WhisperImportError(f"{source}: no such file or folder")
    if (source / "model.bin").exists():
        return read_ct2(source)
    if (source / "config.json").exists():
        return read_hf(source)
    raise WhisperImportError(f"{source}: neither a CTranslate2 folder (model.bin) nor a Hugging Face one "
                             f"(config.json + *.safetensors)")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WhisperImportError(f"{path}: not found") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise WhisperImportError(f"{path}: not valid JSON ({e})") from None


def _optional_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def _count_blocks(weights: dict, side: str) -> int:
    return sum(1 for n in weights if n.startswith(f"{side}.blocks.") and n.endswith("mlp.0.weight"))


# ---------------------------------------------------------------- Whisper's weights → the toolkit's model

# characters and sequences that Whisper's decoding never emits by default (its "non-speech" tokens)
WHISPER_BATCH = 2  # 30-s windows an imported package decodes at once (decode.batch_size)
NON_SPEECH = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + [
    "<<", ">>", "<<<", ">>>", "--", "---", "-(", "-[", "('", '("', "((", "))", "(((", ")))", "[[", "]]", "{{",
    "}}", "♪♪", "♪♪♪"] + list("♩♪♫♬♭♮♯")


def non_speech_ids(tokenizer: WhisperTokenizer) -> list[int]:
    """Whisper ids of the tokens that spell only a non-speech symbol, alone or after a space (and the first token
    of " -" and " '", which would open one)."""
    bpe = tokenizer.bpe
    ids = {bpe.encode(" -", add_special_tokens=False).ids[0], bpe.encode(" '", add_special_tokens=False).ids[0]}
    for symbol in NON_SPEECH:
        for text in (symbol, " " + symbol):
            pieces = bpe.encode(text, add_special_tokens=False).ids
            if len(pieces) == 1 or (symbol in "♩♪♫♬♭♮♯" and pieces):
                ids.add(pieces[0])
    return sorted(ids)


def start_sequence(tokenizer: WhisperTokenizer, dims: WhisperDims, language: str) -> list[int]:
    """Whisper ids the decoder reads first: <|startoftranscript|> [<|lang|> <|transcribe|>] <|notimestamps|>."""
    ids = [tokenizer._special("<|startoftranscript|>")]
    if dims.multilingual:
        lang = tokenizer.whisper_id(f"<|{language}|>")
        if lang is None:
            raise WhisperImportError(f"--language {language}: Whisper has no <|{language}|> token")
        ids += [lang, tokenizer._special("<|transcribe|>")]
    return ids + [tokenizer._special("<|notimestamps|>")]


def package_config(dims: WhisperDims, tokenizer: WhisperTokenizer, pad_to_seconds: float, ctc: bool) -> Config:
    """The toolkit config of this Whisper model: its sizes, the Whisper options of the blocks, the options its
    tokenizer fixes (prompt, suppressed ids), Whisper's features and beam search over the attention decoder."""
    if dims.n_audio_state != dims.n_text_state or dims.n_audio_head != dims.n_text_head:
        raise WhisperImportError("encoder and decoder of different widths: not a Whisper model this toolkit builds")
    cfg = Config()
    cfg.features.kind, cfg.features.num_mel_bins, cfg.features.pad_to_seconds = "whisper", dims.n_mels, pad_to_seconds
    m = cfg.model
    m.input_dim, m.d_model, m.heads = dims.n_mels, dims.n_audio_state, dims.n_audio_head
    m.encoder_layers, m.decoder_layers, m.ffn_dim = dims.n_audio_layer, dims.n_text_layer, 4 * dims.n_audio_state
    m.frontend, m.subsampling, m.activation, m.positions = "whisper", 2, "gelu", "whisper"
    m.max_source_positions, m.max_target_positions = dims.n_audio_ctx, dims.n_text_ctx
    m.tie_embeddings, m.ctc, m.ctc_weight = True, ctc, 0.3 if ctc else 0.0
    m.dropout, m.attention_dropout = 0.0, 0.0
    for key, value in tokenizer.model_options().items():
        setattr(m, key, value)
    # two 30-s windows decoded at once: 1.26 GB peak on a 333-s file, 3.47 GB with 16 (bench/whisper_memory.py)
    cfg.decode = DecodeConfig(mode="beam", beam=5, ctc_weight=0.0, batch_size=WHISPER_BATCH)
    return cfg


def package_weights(ckpt: WhisperCheckpoint, start: list[int], eot: int, model_state: dict) -> dict[str, torch.Tensor]:
    """OpenAI-named weights → the toolkit's state dict (`model_state`: the target model's, for the tensors Whisper
    lacks: CMVN as identity, the output bias as zeros, a fresh CTC head)."""
    w, out = ckpt.weights, {}
    layer_names = {"attn_ln": "norm1", "mlp_ln": "norm2", "mlp.0": "ffn.net.0", "mlp.2": "ffn.net.3",
                   "attn.query": "self_attn.q", "attn.key": "self_attn.k", "attn.value": "self_attn.v",
                   "attn.out": "self_attn.out"}
    decoder_names = {**layer_names, "cross_attn_ln": "norm2", "mlp_ln": "norm3", "cross_attn.query": "src_attn.q",
                     "cross_attn.key": "src_attn.k", "cross_attn.value": "src_attn.v", "cross_attn.out": "src_attn.out"}
    for name, tensor in w.items():
        side, rest = name.split(".", 1)
        if rest.startswith("blocks."):
            _, i, module = rest.split(".", 2)
            module, param = module.rsplit(".", 1)
            names = layer_names if side == "encoder" else decoder_names
            if module not in names:
                raise WhisperImportError(f"unexpected Whisper weight {name}")
            out[f"{side}.layers.{i}.{names[module]}.{param}"] = tensor
        elif name in ("encoder.conv1.weight", "encoder.conv1.bias", "encoder.conv2.weight", "encoder.conv2.bias"):
            out[name.replace("encoder.", "encoder.subsampling.")] = tensor
        elif name == "encoder.positional_embedding":
            out["encoder.pos.table"] = tensor
        elif name == "decoder.positional_embedding":
            out["decoder.pos.table"] = tensor
        elif name.startswith("encoder.ln_post."):
            out[name.replace("ln_post", "norm")] = tensor
        elif name.startswith("decoder.ln."):
            out[name.replace("decoder.ln", "decoder.norm")] = tensor
        elif name == "decoder.token_embedding.weight":
            rows = torch.zeros(tensor.size(0) + NUM_SPECIAL, tensor.size(1))
            rows[NUM_SPECIAL:] = tensor
            rows[SOS], rows[EOS] = tensor[start[-1]], tensor[eot]
            out["decoder.embed.weight"] = rows
        else:
            raise WhisperImportError(f"unexpected Whisper weight {name}")
    for name, tensor in model_state.items():  # the key biases Whisper leaves out, and what it has no part in
        if name not in out:
            if name.endswith(".k.bias") or name == "decoder.output.bias":
                out[name] = torch.zeros_like(tensor)
            elif name.startswith(("ctc.", "cmvn_")):
                out[name] = tensor.clone()
            elif name == "decoder.output.weight":
                out[name] = out["decoder.embed.weight"]
            else:
                raise WhisperImportError(f"the Whisper checkpoint has no weight for {name}")
    for name, tensor in out.items():
        if name not in model_state or model_state[name].shape != tensor.shape:
            raise WhisperImportError(f"{name}: shape {tuple(tensor.shape)} does not fit the model "
                                     f"{tuple(model_state[name].shape) if name in model_state else '(no such weight)'}")
    # a tensor that float16 holds exactly (Whisper's checkpoints are float16) is stored so: half the file, the
    # same model (loading casts it back to the model's float32)
    stored: dict[int, torch.Tensor] = {}  # by identity: the tied embedding and output stay one tensor

    def smaller(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in stored:
            stored[id(t)] = t.half() if t.is_floating_point() and torch.equal(t.half().float(), t) else t
        return stored[id(t)]

    return {name: smaller(t) for name, t in out.items()}


def import_whisper(source: str | os.PathLike, out: str | os.PathLike, tokenizer_json: str | os.PathLike | None = None,
                   language: str = "en", pad_to_seconds: float = 30.0, ctc: bool = False,
                   tokenizer_dir: str | os.PathLike | None = None) -> dict:
    """Read the Whisper checkpoint at `source` and write a model package to `out`. → a summary for the user.

    tokenizer_json: a Hugging Face ``tokenizer.json`` (needed for OpenAI ``.pt`` files, which carry none).
    pad_to_seconds: features padded to Whisper's 30-s window (0: as long as the audio, faster on short files).
    ctc: add a randomly initialised CTC head (train it with `asr train` for joint CTC/attention decoding).
    tokenizer_dir: also write the tokenizer there, for `asr train --tokenizer`.
    """
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.package import save_package

    ckpt = read_whisper(source)
    text = Path(tokenizer_json).read_bytes() if tokenizer_json is not None else ckpt.tokenizer_json
    if text is None:
        raise WhisperImportError(f"{source}: carries no tokenizer; pass a Whisper tokenizer.json with --tokenizer")
    tokenizer = WhisperTokenizer(text, ckpt.dims.n_vocab)
    start = start_sequence(tokenizer, ckpt.dims, language)
    suppress = ckpt.suppress_ids if ckpt.suppress_ids is not None else non_speech_ids(tokenizer)
    tokenizer.prompt = [i + NUM_SPECIAL for i in start[:-1]]
    tokenizer.suppress = sorted({BLANK, UNK, SOS, MASK} | {i + NUM_SPECIAL for i in suppress if i >= 0})
    cfg = package_config(ckpt.dims, tokenizer, pad_to_seconds, ctc)
    cfg.model.alignment_heads = [[int(layer), int(head)] for layer, head in ckpt.alignment_heads or []]
    torch.manual_seed(0)  # the CTC head, when asked for, starts from the same weights every time
    model = ASRModel(cfg.model)
    weights = package_weights(ckpt, start, tokenizer.eot, model.state_dict())
    model.load_state_dict(weights)  # proves the weights fit before anything is written
    info = {"source": str(source), "imported": "whisper", "language": language if ckpt.dims.multilingual else "en"}
    save_package(out, cfg, tokenizer, weights, info=info)
    if tokenizer_dir is not None:
        tokenizer.save(tokenizer_dir)
    return {"parameters": model.count_parameters(), "dims": ckpt.dims, "multilingual": ckpt.dims.multilingual}
