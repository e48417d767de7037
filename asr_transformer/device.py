"""Where and in what precision torch runs: the one device picker and autocast helper of training and decoding.

    dev = pick_device("auto")             # this process's CUDA device (cuda:N) if there is one, else the CPU
    with autocast(dev, "bf16"):           # the forward pass in bfloat16 (fp32: autocast off)
        ...

Which precision is fastest on the hardware, and whether a package can run in one (int8), is decided in
package.py (`resolve_precision`, `check_precision`). Errors are `DeviceError`s: they name the value and say
what to use instead; the command line adds the option's name.
"""

from __future__ import annotations

import contextlib
import os

import torch

from asr_transformer.errors import UserError

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # precision → autocast dtype


class DeviceError(UserError, ValueError):
    """A device or precision that cannot run here. `what` is "device" or "precision", `value` what was asked
    for, `reason` what is wrong and what to use instead."""

    def __init__(self, what: str, value: str, reason: str):
        super().__init__(f"{what} {value}: {reason}")
        self.what, self.value, self.reason = what, value, reason


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """"auto" → this process's CUDA device if there is one, else the CPU; "cpu", "cuda" or "cuda:N" → that
    device, checked to exist here (DeviceError otherwise). A CUDA device always comes back with its index
    (`cuda_device`), as `torch.cuda.set_device` and DistributedDataParallel need it."""
    if isinstance(device, torch.device):
        return cuda_device() if device.type == "cuda" and device.index is None else device
    if device == "auto":
        return cuda_device() if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise DeviceError("device", device, "not a device; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError("device", device, "CUDA is not available here; use cpu")
    if dev.type == "cuda" and dev.index is None:
        return cuda_device()
    if dev.type == "cuda" and dev.index >= torch.cuda.device_count():
        raise DeviceError("device", device, f"only {torch.cuda.device_count()} CUDA device(s) here")
    return dev


def cuda_device() -> torch.device:
    """This process's CUDA device with its index: the local rank's under torchrun (LOCAL_RANK), else the current
    one (cuda:0 unless a program chose another)."""
    local_rank = os.environ.get("LOCAL_RANK")
    index = int(local_rank) if local_rank is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise DeviceError("device", f"cuda:{index}", f"LOCAL_RANK={index}, but only {torch.cuda.device_count()} "
                                                     "CUDA device(s) here")
    return torch.device("cuda", index)


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The dtype autocast computes in for `precision` (fp32 | bf16 | fp16) on `device`: None for fp32 (autocast
    off). DeviceError for fp16 off CUDA and for any other name."""
    if precision not in AUTOCAST_DTYPES:
        raise DeviceError("precision", precision, f"use {', '.join(AUTOCAST_DTYPES)}")
    if precision == "fp16" and torch.device(device).type != "cuda":
        raise DeviceError("precision", precision, "needs CUDA; use bf16 on CPUs")
    return AUTOCAST_DTYPES[precision]


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """torch.autocast for `precision` on `device` (`autocast_dtype`); fp32 turns autocast off."""
    dtype = autocast_dtype(device, precision)
    if dtype is None:
        return torch.autocast(torch.device(device).type, enabled=False)
    return torch.autocast(torch.device(device).type, dtype=dtype)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so that wall-clock timings measure it; nothing on a CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
