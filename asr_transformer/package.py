"""The one-file model package: config, tokenizer, CMVN (inside the weights) and weights.

Written by `asr average` (and by the trainer for the last epoch); read by decode and transcribe
with ``weights_only=True``, so loading never unpickles arbitrary objects.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from asr_transformer.config import Config, from_dict, to_dict
from asr_transformer.data.tokenizer import Tokenizer, tokenizer_from_bytes
from asr_transformer.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

FORMAT = "asr-model"


def save_package(path: str | os.PathLike, cfg: Config, tokenizer: Tokenizer, weights: dict, info: dict | None = None) -> None:
    """Write config + tokenizer (model bytes as a uint8 tensor) + weights into one file, atomically."""
    save_checkpoint(path, {
        "config": to_dict(cfg),
        "tokenizer_model": torch.frombuffer(bytearray(tokenizer.model_bytes), dtype=torch.uint8),
        "tokenizer_meta": tokenizer.meta(),
        "weights": weights,
        "info": info or {},
    }, format=FORMAT)


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def read_package(path: str | os.PathLike) -> dict:
    """The verified contents of a model package (config, tokenizer, weights, info); CheckpointError otherwise."""
    try:
        return load_checkpoint(path, format=FORMAT)
    except CheckpointError as e:
        raise CheckpointError(f"{e}. Expected a model package written by `asr average`.") from None


def load_package(path: str | os.PathLike, device: str | torch.device = "cpu", precision: str = "fp32"):
    """→ (model in eval mode on `device`, tokenizer, config). Damaged or foreign files raise a clear error.

    precision: the encoder's inference precision, fp32 | bf16 | fp16 (fp16 on CUDA only) | auto
    (`check_precision`); see `ASRModel.set_encoder_dtype`.
    """
    from asr_transformer.model.asr import ASRModel

    precision = check_precision(precision, device)
    state = read_package(path)
    cfg = from_dict(state["config"], f"{path}:config")
    tokenizer = tokenizer_from_bytes(state["tokenizer_model"].numpy().tobytes(), state["tokenizer_meta"])
    model = ASRModel(cfg.model)
    model.load_state_dict(state["weights"])
    model.to(device).eval()
    if precision != "fp32":
        model.set_encoder_dtype(PRECISIONS[precision])
    return model, tokenizer, cfg


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """"auto" → the precision this hardware runs fastest: bf16 on CPUs with AMX and on CUDA GPUs with bf16,
    fp16 on older GPUs, otherwise fp32. Without AMX a CPU's bf16 matrix products are slower than fp32 ones
    (here: 152 against 330 GFLOP/s, `bench/train_speed.py`), even with AVX512-BF16. Other names pass through."""
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
    if precision != "auto" and precision not in PRECISIONS:
        raise ValueError(f"precision '{precision}': choose from auto, {', '.join(PRECISIONS)}")
    if precision == "fp16" and torch.device(device).type != "cuda":
        raise ValueError("precision fp16 needs a CUDA device; on a CPU use bf16 (fast where the CPU has "
                         "AMX) or fp32")
    return resolve_precision(precision, device)


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
    tokenizer = tokenizer_from_bytes(chosen[0][1]["tokenizer_model"].numpy().tobytes(), chosen[0][1]["tokenizer_meta"])
    info = {"averaged": [p.name for p, _ in chosen], "by": "last" if last > 0 else by,
            "metrics": [s["metrics"] for _, s in chosen]}
    save_package(out, cfg, tokenizer, averaged, info)
    return [p for p, _ in chosen]
