"""How many CPU threads torch and onnxruntime use: the one rule of every command and of the Python API.

    torch.set_num_threads(cpu_threads(0))   # OMP_NUM_THREADS when set, else every core

No torch here: the exported runtime (onnxruntime, no PyTorch) uses it too.
"""

from __future__ import annotations

import os

from asr_transformer.errors import UserError


class ThreadsError(UserError, ValueError):
    """A thread count that cannot be used; the message says what to use."""


def cpu_threads(threads: int) -> int:
    """Threads for torch on the CPU: `threads` when positive; 0 → OMP_NUM_THREADS when it is set to a number (its
    first level, as OpenMP reads "4,2"), else every core. ThreadsError for a negative number."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ThreadsError(f"threads {threads}: use a positive number, or 0 for OMP_NUM_THREADS (when set) or "
                           "every core")
    if threads:
        return threads
    omp = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(omp) if omp.isdigit() and int(omp) > 0 else os.cpu_count() or 1
