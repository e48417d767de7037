"""Start a run from another model's weights (fine-tuning; ESPnet's --init_param, WeNet's --checkpoint).

`train.init_from` names a model package (`asr average`'s model.pt); `train.init_modules` the parameter-name
prefixes taken from it, e.g. ``[encoder]`` to reuse an encoder trained with another vocabulary. Every tensor
under a listed prefix must exist in both models with the same shape, or the run stops with an error naming it;
nothing is skipped silently. The global CMVN statistics stay the new run's, computed on its own training data.
"""

from __future__ import annotations

import torch

from asr_transformer.checkpoint_io import CheckpointError
from asr_transformer.errors import UserError
from asr_transformer.model.lora import is_lora_tensor
from asr_transformer.package import read_package

CMVN_BUFFERS = ("cmvn_mean", "cmvn_istd")


class PretrainedError(UserError, ValueError):
    """A pretrained model that does not fit the model being trained."""


def _under(name: str, prefixes: list[str]) -> bool:
    return not prefixes or any(name == p or name.startswith(p + ".") for p in prefixes)


def load_pretrained(model: torch.nn.Module, path: str, modules: list[str]) -> list[str]:
    """Copy the tensors under `modules` (all when empty) from the package at `path` into `model`.

    → the names copied. Raises PretrainedError (naming the file and tensor) on a missing tensor, a shape
    mismatch or a prefix that matches nothing.
    """
    try:
        weights = read_package(path)["weights"]
    except CheckpointError as e:
        raise PretrainedError(f"train.init_from: {e}") from None
    own = model.state_dict()
    names = [n for n in own if n not in CMVN_BUFFERS and not is_lora_tensor(n) and _under(n, modules)]
    for prefix in modules:
        if not any(_under(n, [prefix]) for n in names):
            raise PretrainedError(f"train.init_modules: {prefix!r} names no parameter of this model "
                                  f"(its modules: {sorted({n.split('.')[0] for n in own} - set(CMVN_BUFFERS))})")
    for name in names:
        if name not in weights:
            raise PretrainedError(f"{path}: has no {name} (a model of another shape; list the modules to take "
                                  f"in train.init_modules)")
        if weights[name].shape != own[name].shape:
            raise PretrainedError(f"{path}: {name} is {tuple(weights[name].shape)}, this model's is "
                                  f"{tuple(own[name].shape)} (another vocabulary or size; list the modules to take "
                                  f"in train.init_modules, e.g. [encoder])")
    with torch.no_grad():
        for name in names:
            own[name].copy_(weights[name])
    return names
