"""Paths as the bench JSONs name them: relative to the repository when inside it, so no machine's folders appear."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def in_repository(path) -> str:
    """`path` relative to the repository root when it is inside it, else its file name."""
    full = Path(path).resolve()
    return full.relative_to(ROOT).as_posix() if full.is_relative_to(ROOT) else full.name
