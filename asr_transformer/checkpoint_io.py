"""Checkpoint files: written atomically, verified on load, never unpickling arbitrary objects.

The file format of both training checkpoints (train/trainer.py) and model packages (package.py), below both
in the import order (tests/test_imports.py).

A checkpoint is a torch file holding only tensors, numbers, strings, lists and dicts, with a
format name and a version, followed by a one-line footer with the SHA-256 of that payload, so a
file truncated or damaged on disk is detected and not loaded. Payload and checksum are one file,
written by one atomic rename: a kill at any moment leaves either the old file or the new one.
(Files of the first version kept the checksum in a sidecar ``.sha256``; those still load.)

The checksum guards against accidents (a truncated copy, a damaged disk), not against a deliberate edit:
anyone can change the payload and recompute it. For that a file can be signed: with a `key`, an HMAC-SHA256
of the payload under that key sits between the payload and the checksum footer, and a load given the key
refuses a file whose signature is missing or does not match (SignatureError). Only who holds the key can
make a valid signature. A load without a key ignores the signature. (Model packages use this with the key
in $ASR_PACKAGE_KEY: package.py.)
"""

from __future__ import annotations

import hashlib
import hmac
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
SIGNATURE = b"\nasr-hmac-sha256:"  # + 64 hex digits, between the payload and the footer of a signed file
SIGNATURE_LEN = len(SIGNATURE) + 64


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that is missing, truncated, damaged or of another format."""


class SignatureError(CheckpointError):
    """A file that a load given a key refuses: `unsigned`, or signed with another key or edited since."""

    def __init__(self, message: str, unsigned: bool):
        super().__init__(message)
        self.unsigned = unsigned


def save_checkpoint(path: str | os.PathLike, state: dict, format: str = FORMAT, key: bytes | None = None) -> None:
    """Serialize `state` and write it [signed with `key`] with its checksum footer, atomically."""
    buffer = io.BytesIO()
    torch.save({"format": format, "version": VERSION, **state}, buffer)
    body = buffer.getvalue()
    if key is not None:
        body += SIGNATURE + _signature(body, key)
    path = Path(path)
    with atomic_open(path, "wb") as f:
        f.write(body + FOOTER + hashlib.sha256(body).hexdigest().encode() + b"\n")
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.exists():  # left by a first-version file of the same name
        sidecar.unlink()


def load_checkpoint(path: str | os.PathLike, format: str = FORMAT, map_location="cpu", key: bytes | None = None,
                    unsigned_ok: bool = False) -> dict:
    """Load and verify; raises CheckpointError with the file name when anything is wrong.

    key: the file must be signed with it (SignatureError otherwise), or unsigned when `unsigned_ok`.
    """
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
    payload, signature = _split_signature(payload)
    if key is not None:
        _verify(path, payload, signature, key, unsigned_ok)
    state = _unpickle(path, payload, map_location)
    if not isinstance(state, dict) or state.get("format") != format:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path}: expected a {format} file, found {found!r}")
    if state.get("version", 0) > VERSION:
        raise CheckpointError(f"{path}: written by a newer asr-transformer (version {state['version']})")
    return state


def _unpickle(path: Path, payload: bytes, map_location="cpu"):
    try:
        return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}: {e})") from None


def file_format(path: str | os.PathLike) -> str | None:
    """The format a checkpoint file of this toolkit holds ("asr-model", "asr-epoch", …); None for any other file
    (a damaged one included)."""
    try:
        payload = Path(path).read_bytes()
    except OSError:
        return None
    footer = payload[-FOOTER_LEN:]
    if not payload.startswith(b"PK") or not footer.startswith(FOOTER):  # not torch.save's zip with our footer
        return None
    try:
        state = _unpickle(Path(path), _split_signature(payload[:-FOOTER_LEN])[0])
    except CheckpointError:
        return None
    return state.get("format") if isinstance(state, dict) else None


def refuse_to_replace(path: str | os.PathLike, format: str, force: bool, what: str) -> None:
    """CheckpointError when `path` exists and is not a `format` file (`what`, e.g. "a model package"), unless
    `force`: a command replaces only files of the kind it writes."""
    path = Path(path)
    if force or not path.exists():
        return
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder; give a file name for {what}")
    found = file_format(path)
    if found != format:
        kind = f"an {found} file" if found else "not a file of this toolkit"
        raise CheckpointError(f"{path}: exists and is {kind}, not {what}: give another name, or --force to "
                              f"replace it")


def footer_digest(path: str | os.PathLike) -> str | None:
    """The SHA-256 its checksum footer records (the file's content, named without reading it); None without one."""
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - FOOTER_LEN))
        footer = f.read()
    return footer[len(FOOTER):].strip().decode("ascii", "replace") if footer.startswith(FOOTER) else None


def is_signed(path: str | os.PathLike) -> bool:
    """Whether the file carries a signature (checked or not)."""
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - FOOTER_LEN - SIGNATURE_LEN))
        return f.read().startswith(SIGNATURE)


def _signature(payload: bytes, key: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).hexdigest().encode()


def _split_signature(body: bytes) -> tuple[bytes, bytes | None]:
    """→ (payload, its signature's hex digits or None when unsigned)."""
    tail = body[-SIGNATURE_LEN:]
    if len(body) > SIGNATURE_LEN and tail.startswith(SIGNATURE):
        return body[:-SIGNATURE_LEN], tail[len(SIGNATURE):]
    return body, None


def _verify(path: Path, payload: bytes, signature: bytes | None, key: bytes, unsigned_ok: bool) -> None:
    if signature is None:
        if unsigned_ok:
            return
        raise SignatureError(f"{path}: not signed, and a signed file is required", unsigned=True)
    if not hmac.compare_digest(signature, _signature(payload, key)):
        raise SignatureError(f"{path}: signature mismatch: the file was changed after it was signed, or signed with "
                             f"another key", unsigned=False)


def remove_checkpoint(path: str | os.PathLike) -> None:
    path = Path(path)
    for p in (path, path.with_name(path.name + ".sha256")):
        if p.exists():
            p.unlink()
