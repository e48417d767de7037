"""glibc malloc settings that make torch on the CPU faster: freed memory is kept and reused, on huge pages.

torch takes CPU tensors from malloc. By default glibc serves large blocks with fresh `mmap` regions and
unmaps them on free, so every training step page-faults its activations into existence again (the kernel
zeroes each 4 KiB page) — memory-bound work that also suffers most when the machine is busy. With
`TUNABLES` malloc never maps per block (`mmap_max=0`), keeps what is freed (`trim_threshold`) for the
next step, and asks for transparent huge pages (`hugetlb=1`). The price is a higher peak memory (what is
freed stays with the process). `bench/train_speed.py` measures the gain: run it with and without
`ASR_MALLOC_TUNING=0`.

glibc reads its tunables once, at process start, so `apply()` re-executes the command (same process id,
same arguments) with them set. `ASR_MALLOC_TUNING=0` turns this off; a GLIBC_TUNABLES that already sets
any malloc tunable is left as the user wrote it. Other C libraries (macOS, musl) are left alone.
"""

from __future__ import annotations

import os
import sys

TUNABLES = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"
OPT_OUT = "ASR_MALLOC_TUNING"


def tuned_environment(environ: dict[str, str], libc: str | None) -> dict[str, str] | None:
    """The environment to re-execute with, or None when nothing should change.

    Args:
        environ: the current environment; libc: `os.confstr("CS_GNU_LIBC_VERSION")` (e.g. "glibc 2.36").
    """
    if not (libc or "").startswith("glibc") or environ.get(OPT_OUT, "1") == "0":
        return None
    current = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in current:  # ours already (after the re-exec), or the user's own choice
        return None
    return {**environ, "GLIBC_TUNABLES": f"{current}:{TUNABLES}" if current else TUNABLES}


def _libc() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None


def active() -> bool:
    """Whether this process runs with `TUNABLES` (the benches record it)."""
    return TUNABLES in os.environ.get("GLIBC_TUNABLES", "")


def apply() -> None:
    """Re-execute this process with `TUNABLES` set, once; returns when they are set or not applicable.

    Call it first thing in a command's entry point, before torch is imported (it does not return when it
    re-executes)."""
    env = tuned_environment(dict(os.environ), _libc())
    if env is None or not sys.orig_argv:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


def release_free_memory() -> None:
    """Give the memory malloc holds free back to the system (glibc's `malloc_trim`); nothing elsewhere.

    With `TUNABLES`, what is freed stays with the process for the next step; a long transcription frees and
    allocates blocks of many sizes, and the pieces it keeps add up. Called between batches, this keeps the peak
    at about one batch's memory, at the cost of page faults that are small beside a batch's decoding."""
    if not (_libc() or "").startswith("glibc"):
        return
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
