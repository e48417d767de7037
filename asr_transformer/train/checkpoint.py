"""Checkpoints: written atomically, verified on load, never unpickling arbitrary objects.

A checkpoint is a torch file holding only tensors, numbers, strings, lists and dicts, with a
format name and a version, followed by a one-line footer with the SHA-256 of that payload, so a
file truncated or damaged on disk is detected and not loaded. Payload and checksum are one file,
written by one atomic rename: a kill at any moment leaves either the old file or the new one.
(Files of the first version kept the checksum in a sidecar ``.sha256``; those still load.)
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import torch

from asr_transformer.fileio import atomic_open
from asr_transformer.errors import UserError

FORMAT = "asr-checkpoint"
VERSION = 1
FOOTER = b"\nasr-sha256:"  # + 64 hex digits + b"\n"
FOOTER_LEN = len(FOOTER) + 65


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that is missing, truncated, damaged or of another format."""


def save_checkpoint(path: str | os.PathLike, state: dict, format: str = FORMAT) -> None:
    """Serialize `state` and write it with its checksum footer, atomically."""
    buffer = io.BytesIO()
    torch.save({"format": format, "version": VERSION, **state}, buffer)
    payload = buffer.getvalue()
    path = Path(path)
    with atomic_open(path, "wb") as f:
        f.write(payload + FOOTER + hashlib.sha256(payload).hexdigest().encode() + b"\n")
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.exists():  # left by a first-version file of the same name
        sidecar.unlink()


def load_checkpoint(path: str | os.PathLike, format: str = FORMAT, map_location="cpu") -> dict:
    """Load and verify; raises CheckpointError with the file name when anything is wrong."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: file not found")
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder, not a file")
    payload = path.read_bytes()
    sidecar = path.with_name(path.name + ".sha256")
    footer = payload[-FOOTER_LEN:]
    if footer.startswith(FOOTER):
        payload, expected = payload[:-FOOTER_LEN], footer[len(FOOTER):].strip().decode("ascii", "replace")
    elif sidecar.exists():
        expected = sidecar.read_text().strip()
    else:
        raise CheckpointError(f"{path}: no checksum footer: the file is truncated or damaged")
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
