"""Checkpoints: written atomically, verified on load, never unpickling arbitrary objects.

A checkpoint is a torch file holding only tensors, numbers, strings, lists and dicts, with a
format name, a version, and a SHA-256 of its payload stored in a sidecar ``.sha256`` file, so a
file truncated or damaged on disk is detected and not loaded.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import torch

from asr_transformer.fileio import atomic_open

FORMAT = "asr-checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, truncated, damaged or of another format."""


def save_checkpoint(path: str | os.PathLike, state: dict, format: str = FORMAT) -> None:
    """Serialize `state` and write it plus its checksum atomically (checksum last)."""
    buffer = io.BytesIO()
    torch.save({"format": format, "version": VERSION, **state}, buffer)
    payload = buffer.getvalue()
    path = Path(path)
    with atomic_open(path, "wb") as f:
        f.write(payload)
    with atomic_open(path.with_name(path.name + ".sha256")) as f:
        f.write(hashlib.sha256(payload).hexdigest() + "\n")


def load_checkpoint(path: str | os.PathLike, format: str = FORMAT, map_location="cpu") -> dict:
    """Load and verify; raises CheckpointError with the file name when anything is wrong."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: file not found")
    payload = path.read_bytes()
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.exists():
        expected = sidecar.read_text().strip()
        if hashlib.sha256(payload).hexdigest() != expected:
            raise CheckpointError(f"{path}: checksum mismatch: the file is truncated or damaged")
    try:
        state = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or state.get("format") != format:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path}: expected a {format} file, found {found!r}")
    if state.get("version", 0) > VERSION:
        raise CheckpointError(f"{path}: written by a newer asr-transformer (version {state['version']})")
    return state


def remove_checkpoint(path: str | os.PathLike) -> None:
    path = Path(path)
    for p in (path, path.with_name(path.name + ".sha256")):
        if p.exists():
            p.unlink()
