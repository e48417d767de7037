"""The one-file model package: a complete recognizer.

It holds the config (model shape, features, and the decoding defaults chosen on dev), the tokenizer (for
phone units, its pronunciation lexicon), the weights (CMVN inside), the n-gram LMs the decoding defaults use
(gzip-compressed ARPA text), and what it was trained on and validated with. `asr average` writes one;
`asr package` sets its decoding defaults and LMs. Read with ``weights_only=True``, so loading never unpickles
arbitrary objects.

Integrity. The SHA-256 footer (checkpoint_io.py) catches accidental damage: a truncated copy, flipped bits.
Loading also checks that every weight has the shape the config's model builds, so a config edited out of step
with its weights is refused. Neither stops a deliberate edit made with care (weights zeroed, CTC rows permuted,
a different number of heads, the footer recomputed): only a signature does. With $ASR_PACKAGE_KEY set, every
package written is signed (HMAC-SHA256 of its contents under that key) and every package read must carry a
valid signature; unsigned or mis-signed ones are refused. Unset (or empty), packages are neither signed nor
checked, as before.
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path

import torch

from asr_transformer.checkpoint_io import CheckpointError, SignatureError, load_checkpoint, save_checkpoint
from asr_transformer.config import (CTC_MODES, Config, DecodeConfig, check_modes, fit_decoding, from_dict, to_dict,
                                    validate)
from asr_transformer.data.tokenizer import Tokenizer, tokenizer_from_bytes
from asr_transformer.data.whisper_tokenizer import decoder_start
from asr_transformer.decode.hotwords import context_graph
from asr_transformer.fileio import read_json

FORMAT = "asr-model"
DATA_SUMMARY = "data.json"  # written into an experiment folder by the trainer: the data it trains on
LM_KINDS = ("lm", "word_lm")  # a token n-gram LM (`asr lm`) and a word n-gram LM (`asr lm --words`)
KEY_VARIABLE = "ASR_PACKAGE_KEY"  # the signing key (module docstring)


def package_key() -> bytes | None:
    """The signing key from $ASR_PACKAGE_KEY (its UTF-8 bytes), or None when it is unset or empty."""
    value = os.environ.get(KEY_VARIABLE, "")
    return value.encode("utf-8") if value else None


def save_package(path: str | os.PathLike, cfg: Config, tokenizer: Tokenizer, weights: dict, info: dict | None = None,
                 lms: dict | None = None) -> None:
    """Write config + tokenizer (model bytes as a uint8 tensor) + weights [+ LMs] into one file, atomically.

    lms: {"lm" | "word_lm": {"arpa_gz": uint8 tensor (`decode.ngram.pack_arpa`), "name": the ARPA file's name,
    "order": n, "ngrams": [count per order]}}. Decoding defaults the model cannot run are fitted to it
    (`config.fit_decoding`: attention beam search without a CTC head)."""
    fit_decoding(cfg)
    save_checkpoint(path, {
        "config": to_dict(cfg),
        "tokenizer_model": torch.frombuffer(bytearray(tokenizer.model_bytes), dtype=torch.uint8),
        "tokenizer_meta": tokenizer.meta(),
        "weights": tied(weights, cfg),
        "info": info or {},
        "lms": lms or {},
    }, format=FORMAT, key=package_key())


TIED = ("decoder.embed.weight", "decoder.output.weight")  # one matrix with model.tie_embeddings


def tied(weights: dict, cfg: Config) -> dict:
    """`weights` with a tied output projection as the very tensor of the embedding, so that it is stored once
    (an averaged or merged state dict holds two equal copies: Whisper tiny's 80 MB twice)."""
    embed, output = TIED
    if not cfg.model.tie_embeddings or embed not in weights or output not in weights:
        return weights
    if weights[output] is weights[embed] or not torch.equal(weights[output], weights[embed]):
        return weights
    return {**weights, output: weights[embed]}


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
INT8 = "int8"  # int8 matrix products in the Linear layers (CPU): `quantize_int8`


def read_package(path: str | os.PathLike, unsigned_ok: bool = False) -> dict:
    """The verified contents of a model package (config, tokenizer, weights, info, lms); CheckpointError otherwise.

    With $ASR_PACKAGE_KEY set its signature must be valid (an unsigned package passes only with `unsigned_ok`)."""
    try:
        return load_checkpoint(path, format=FORMAT, key=package_key(), unsigned_ok=unsigned_ok)
    except SignatureError as e:
        if e.unsigned:
            raise SignatureError(f"{e} ({KEY_VARIABLE} is set: only packages signed with that key load); if you "
                                 f"trust it, sign it: `asr package {path} --out {path} --sign`", True) from None
        raise SignatureError(f"{e} than {KEY_VARIABLE}'s; do not use it", False) from None
    except CheckpointError as e:
        raise CheckpointError(f"{e}. Expected a model package written by `asr average`.") from None


def stored_tokenizer(state: dict) -> Tokenizer:
    """The tokenizer a package holds (`read_package`'s contents)."""
    return tokenizer_from_bytes(state["tokenizer_model"].numpy().tobytes(), state["tokenizer_meta"])


def load_package(path: str | os.PathLike, device: str | torch.device = "cpu", precision: str = "fp32",
                 state: dict | None = None):
    """→ (model in eval mode on `device`, tokenizer, config). Damaged or foreign files raise a clear error.

    precision: fp32 | bf16 | fp16 (fp16 on CUDA only): the encoder's (`ASRModel.set_encoder_dtype`); int8: every
    encoder and decoder Linear layer quantized (CPU only, `quantize_int8`); auto (`check_precision`).
    state: what `read_package(path)` returned, when the caller has read it already.
    """
    from asr_transformer.model.asr import ASRModel

    precision = check_precision(precision, device)
    state = state if state is not None else read_package(path)
    cfg = from_dict(state["config"], f"{path}:config")
    fit_decoding(cfg)  # a package written before the defaults were fitted to the model
    tokenizer = stored_tokenizer(state)
    try:
        model = ASRModel(cfg.model)
    except ValueError as e:
        raise CheckpointError(f"{path}: its config describes no model ({e})") from None
    check_weights(path, model.state_dict(), state["weights"])
    model.load_state_dict(state["weights"])
    model.to(device).eval()
    if precision == INT8:
        quantize_int8(model)
    elif precision != "fp32":
        model.set_encoder_dtype(PRECISIONS[precision])
    return model, tokenizer, cfg


def check_weights(path, expected: dict, weights: dict) -> None:
    """CheckpointError naming the package and the first weight whose name or shape differs from `expected` (the
    state dict of the model its config builds): a package whose config and weights disagree."""
    for name, tensor in expected.items():
        if name not in weights:
            raise CheckpointError(f"{path}: no weight {name}, which the model its config describes has: config and "
                                  f"weights disagree (the package was edited or damaged)")
        if weights[name].shape != tensor.shape:
            raise CheckpointError(f"{path}: {name} is {tuple(weights[name].shape)} in the weights, "
                                  f"{tuple(tensor.shape)} in the model its config describes: config and weights "
                                  f"disagree (the package was edited or damaged)")
    for name in weights:
        if name not in expected:
            raise CheckpointError(f"{path}: weight {name} has no place in the model its config describes: config and "
                                  f"weights disagree (the package was edited or damaged)")


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """int8, in place, of the encoder's and decoder's Linear layers (weights int8 per output row, activations
    quantized per row on the fly: `model.int8`; the CTC head, convolutions and embeddings stay float32)."""
    from asr_transformer.model.int8 import quantize_linear_layers

    quantize_linear_layers(model.encoder)
    quantize_linear_layers(model.decoder)
    return model


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """"auto" → the precision this hardware runs fastest: bf16 on CPUs with AMX and on CUDA GPUs with bf16,
    fp16 on older GPUs, otherwise fp32. Without AMX a CPU's bf16 matrix products are slower than fp32 ones
    (`bench/train_speed.py`), even with AVX512-BF16. Other names pass through."""
    if precision != "auto":
        return precision
    kind = torch.device(device).type
    if kind == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    return "bf16" if kind == "cpu" and amx() else "fp32"


def check_precision(precision: str, device: str | torch.device) -> str:
    """The precision to run (`auto` resolved by `resolve_precision`); ValueError naming the choices when
    `precision` cannot run on `device`."""
    if precision not in ("auto", INT8, *PRECISIONS):
        raise ValueError(f"precision '{precision}': choose from auto, {', '.join(PRECISIONS)}, {INT8}")
    if precision == "fp16" and torch.device(device).type != "cuda":
        raise ValueError("precision fp16 needs a CUDA device; on a CPU use bf16 (fast where the CPU has "
                         "AMX) or fp32")
    if precision == INT8 and torch.device(device).type != "cpu":
        raise ValueError("precision int8 runs on the CPU only; on a GPU use bf16 or fp16")
    return resolve_precision(precision, device)


def set_decoding(path: str | os.PathLike, out: str | os.PathLike, options: dict | None = None,
                 lms: dict | None = None, results: dict | None = None, sign: bool = False,
                 fp16_weights: bool = False) -> None:
    """Copy the package `path` to `out` (may be the same file) with new decoding defaults, LMs and results.

    options: DecodeConfig fields to change. lms: {"lm" | "word_lm": an ARPA file to store, or None to remove
    it}; kinds not named are kept. results: {name (e.g. "dev", "test"): a decode result folder holding
    `result.json` (`asr score`) and `rtf.json` (`asr decode`)}, recorded as validated results. sign: accept `path`
    unsigned (its owner vouches for it) and write `out` signed; needs $ASR_PACKAGE_KEY. fp16_weights: store the
    floating-point weights as float16 (half the size, loaded back as float32; each weight rounded to 11 bits).
    """
    from asr_transformer.decode.ngram import pack_arpa
    from asr_transformer.decode.ngram_binary import cache_lm, convert_arpa

    if sign and package_key() is None:
        raise ValueError(f"--sign: set {KEY_VARIABLE} to the key to sign with")
    state = read_package(path, unsigned_ok=sign)
    cfg = from_dict(state["config"], f"{path}:config")
    known = {f.name for f in fields(DecodeConfig)}
    for key, value in (options or {}).items():
        if key not in known:
            raise ValueError(f"unknown decoding option '{key}' (known: {', '.join(sorted(known))})")
        setattr(cfg.decode, key, value)
    if not cfg.model.ctc and (options or {}).get("mode") in CTC_MODES:
        raise ValueError(f"mode {options['mode']} needs a CTC head, which this model has not: use beam or greedy")
    check_modes(cfg.decode.mode, cfg.model)
    validate(cfg, "the decoding options")
    stored = dict(state.get("lms") or {})
    tokenizer = stored_tokenizer(state)
    context_graph(tokenizer, cfg.decode.hotwords, cfg.decode.hotword_score)  # every phrase spelled (HotwordError)
    if cfg.decode.language or cfg.decode.initial_prompt:  # what the decoder reads first: Whisper's alone
        decoder_start(tokenizer, cfg.decode.language, cfg.decode.initial_prompt, cfg.model.max_target_positions)
    for kind, arpa in (lms or {}).items():
        if kind not in LM_KINDS:
            raise ValueError(f"unknown LM kind '{kind}' (known: {', '.join(LM_KINDS)})")
        if arpa is None:
            stored.pop(kind, None)
            continue
        packed = pack_arpa(arpa)
        pieces = tokenizer.pieces(range(tokenizer.vocab_size)) if kind == "lm" else None
        lm = convert_arpa(arpa, pieces, where=str(arpa))  # checks it reads (fast: decode/ngram_binary.py), and counts it
        cache_lm(packed, pieces, lm)  # a large LM: its binary form cached, for this package's first decode
        stored[kind] = {"arpa_gz": torch.frombuffer(bytearray(packed), dtype=torch.uint8), "name": Path(arpa).name,
                        "order": lm.order, "ngrams": lm.ngram_counts()}
    info = dict(state.get("info") or {})
    validated = dict(info.get("results") or {})
    for name, folder in (results or {}).items():
        folder = Path(folder)
        try:
            result, rtf = read_json(folder / "result.json"), read_json(folder / "rtf.json")
        except OSError as e:
            raise ValueError(f"--result {name}={folder}: needs result.json (`asr score`) and rtf.json "
                             f"(`asr decode`) there ({e.strerror})") from None
        validated[name] = {"wer": result["wer"], "cer": result["cer"], "utterances": rtf.get("utterances"),
                           "mode": rtf.get("mode"), "options": rtf.get("options"), "lm": rtf.get("lm"),
                           "word_lm": rtf.get("word_lm"), "rtf": rtf.get("rtf"), "threads": rtf.get("threads")}
    info["results"] = validated
    weights = state["weights"]
    if fp16_weights:
        weights = {k: v.half() if v.is_floating_point() else v for k, v in weights.items()}
    save_package(out, cfg, tokenizer, weights, info, stored)


def _epoch_checkpoints(exp: Path) -> list[Path]:
    paths = list((exp / "checkpoints").glob("epoch_*.pt"))
    return sorted(paths, key=lambda p: int(re.search(r"epoch_(\d+)", p.name).group(1)))


def average_checkpoints(exp: str | os.PathLike, out: str | os.PathLike, best: int = 5, by: str = "valid_loss",
                        last: int = 0) -> list[Path]:
    """Average the parameters of the `best` checkpoints by metric `by` (or the `last` N epochs) into a package."""
    exp = Path(exp)
    candidates = []
    for path in _epoch_checkpoints(exp):
        try:
            state = load_checkpoint(path, format="asr-epoch")
        except CheckpointError as e:
            print(f"warning: skipping {e}")
            continue
        candidates.append((path, state))
    if not candidates:
        raise CheckpointError(f"{exp}/checkpoints: no usable epoch checkpoints")
    if last > 0:
        chosen = candidates[-last:]
    else:
        if by not in candidates[0][1]["metrics"]:
            raise ValueError(f"metric '{by}' not recorded; known: {', '.join(candidates[0][1]['metrics'])}")
        higher_better = by in ("valid_acc",)
        chosen = sorted(candidates, key=lambda c: c[1]["metrics"][by], reverse=higher_better)[:best]
    averaged: dict[str, torch.Tensor] = {}
    for _, state in chosen:
        for name, value in state["weights"].items():
            if value.is_floating_point():
                averaged[name] = averaged.get(name, 0) + value.double() / len(chosen)
            else:
                averaged[name] = value  # integer buffers are not averaged
    reference = chosen[0][1]["weights"]
    averaged = {k: v.to(reference[k].dtype) for k, v in averaged.items()}
    cfg = from_dict(chosen[0][1]["config"])
    tokenizer = stored_tokenizer(chosen[0][1])
    info = {"averaged": [p.name for p, _ in chosen], "by": "last" if last > 0 else by,
            "metrics": [s["metrics"] for _, s in chosen]}
    if (exp / DATA_SUMMARY).exists():
        info["trained_on"] = read_json(exp / DATA_SUMMARY)
    save_package(out, cfg, tokenizer, averaged, info)
    return [p for p, _ in chosen]
