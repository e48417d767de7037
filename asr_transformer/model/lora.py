"""LoRA: fine-tuning a pretrained model by a low-rank update of its Linear layers, the rest left as it was.

A layer y = W x + b becomes y = W x + b + s · B A x with A (r, in) and B (out, r) trained and W, b frozen; B starts
at zero, so training starts from the pretrained model exactly, and s = alpha / r. With r ≪ in, out the update is
a few per cent of the weights, which is how an hour of one voice adapts a model without overwriting what it knew.
The adapted layer keeps the names of the Linear it replaces (`weight`, `bias`) beside `lora_a`, `lora_b`, so a
pretrained package loads into it unchanged; `merged_state_dict` folds each update back into W, so checkpoints and
packages hold a plain model that decodes and exports without this module.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LoRALinear(nn.Linear):
    """nn.Linear plus a trainable rank-`rank` update scaled by `alpha / rank`; `weight` and `bias` frozen."""

    def __init__(self, in_features: int, out_features: int, bias: bool, rank: int, alpha: float):
        super().__init__(in_features, out_features, bias=bias)
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, in_features).uniform_(-1, 1) / math.sqrt(in_features))
        self.lora_b = nn.Parameter(torch.zeros(out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) → (..., out)."""
        return super().forward(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale

    def merged_weight(self) -> torch.Tensor:
        """W + s · B A: the plain Linear's weight (out, in)."""
        return self.weight + (self.lora_b @ self.lora_a) * self.scale


def add_lora(model: nn.Module, targets: list[str], rank: int, alpha: float) -> list[str]:
    """Replace every nn.Linear whose name contains one of `targets` (e.g. "attn", "ffn") by a LoRALinear holding
    the same weights; freeze every other parameter. → the names replaced (ValueError when none)."""
    chosen = [name for name, module in model.named_modules()
              if type(module) is nn.Linear and any(t in name for t in targets)]
    if not chosen:
        raise ValueError(f"train.lora_modules {targets} names no Linear layer of this model")
    for param in model.parameters():
        param.requires_grad_(False)
    for name in chosen:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, attr)
        new = LoRALinear(old.in_features, old.out_features, old.bias is not None, rank, alpha)
        new.to(device=old.weight.device, dtype=old.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(old.weight)
            if old.bias is not None:
                new.bias.copy_(old.bias)
        setattr(parent, attr, new)
    return chosen


def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model.state_dict()` with each LoRA update folded into its weight and the `lora_*` tensors left out: the
    state dict of the same model without LoRA."""
    state = model.state_dict()
    for name, module in model.named_modules():
        if isinstance(module, LoRALinear):
            with torch.no_grad():
                state[f"{name}.weight"] = module.merged_weight().detach().clone()
            del state[f"{name}.lora_a"], state[f"{name}.lora_b"]
    return state


def is_lora_tensor(name: str) -> bool:
    return name.endswith((".lora_a", ".lora_b"))
