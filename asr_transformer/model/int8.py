"""int8 Linear layers for CPU inference: a package loaded with `--precision int8`.

Each weight row (one output feature) is stored as int8 with its own scale, W ≈ s_w · Q_w; each input row (one
frame or token) is quantized on the fly the same way, x ≈ s_x · Q_x, and the layer computes
y = s_x · s_w · (Q_x Q_wᵀ) + b with PyTorch's int8 matrix product (`torch._int_mm`, int32 accumulation). Scales per
row keep a loud frame or one large weight row from costing the others their precision.
"""

from __future__ import annotations

import torch
from torch import nn

LEVELS = 127  # symmetric int8: -127 … 127


def _quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float → (N, K) int8 and (N, 1) float32 scales with x ≈ scale · q."""
    scale = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / LEVELS
    return torch.round(x / scale).to(torch.int8), scale


class Int8Linear(nn.Module):
    """An nn.Linear's product in int8: weight (out, in) int8 with scales (out,), bias float32."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight, scale = _quantize_rows(linear.weight.detach().float())
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", weight)  # (out, in) int8
        self.register_buffer("weight_scale", scale.squeeze(1))  # (out,)
        bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias)  # (out,) or None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) → (..., out) in x's dtype."""
        rows = x.reshape(-1, self.in_features).float()
        if rows.size(0) == 0:
            return x.new_zeros(*x.shape[:-1], self.out_features)
        q, scale = _quantize_rows(rows)
        y = torch._int_mm(q, self.weight.t()).float() * (scale * self.weight_scale)  # (N, out)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def quantize_linear_layers(module: nn.Module) -> None:
    """Replace every nn.Linear inside `module` by an Int8Linear, in place."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8Linear(child))
        else:
            quantize_linear_layers(child)
