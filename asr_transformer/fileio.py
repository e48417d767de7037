"""Atomic writes: every file another stage reads is written to a temp file and renamed."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, IO


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file beside `path`; on success fsync and rename it over `path`.

    A crash or exception leaves any previous `path` untouched and removes the temp file. The file gets the
    permissions an ordinary `open` would give it (0666 less the umask), not the temp file's private 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(fd, 0o666 & ~current_umask())
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj) -> None:
    """Write `obj` as indented JSON, atomically."""
    with atomic_open(path) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def read_json(path: str | os.PathLike):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1-MB blocks, so that a large file is never held whole."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
