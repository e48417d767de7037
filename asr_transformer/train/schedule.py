"""Learning-rate schedules: linear warmup to a peak, then inverse square-root decay (Noam, the default) or a
cosine decay to zero at the last planned step (for runs whose length is fixed in advance)."""

from __future__ import annotations

import math


def warmup_inverse_sqrt(step: int, peak_lr: float, warmup: int) -> float:
    """lr at optimizer step `step` (1-based): peak · min(step / warmup, sqrt(warmup / step)).

    This is the Noam schedule of "Attention is all you need" with its scale expressed as the peak.
    """
    step = max(step, 1)
    warmup = max(warmup, 1)
    return peak_lr * min(step / warmup, math.sqrt(warmup / step))


def warmup_cosine(step: int, peak_lr: float, warmup: int, total: int) -> float:
    """lr at optimizer step `step` (1-based): linear warmup to `peak_lr`, then half a cosine down to 0 at step
    `total` (and 0 after it)."""
    step, warmup = max(step, 1), max(warmup, 1)
    if step <= warmup:
        return peak_lr * step / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def learning_rate(schedule: str, step: int, peak_lr: float, warmup: int, total: int) -> float:
    """lr at optimizer step `step` for `schedule` ("noam" or "cosine")."""
    if schedule == "noam":
        return warmup_inverse_sqrt(step, peak_lr, warmup)
    if schedule == "cosine":
        return warmup_cosine(step, peak_lr, warmup, total)
    raise ValueError(f"train.schedule={schedule!r}: use noam or cosine")


def epochs_that_fit(done: int, max_epochs: int, elapsed: float, budget: float, epoch_seconds: float) -> int:
    """How many epochs to plan for when training may take `budget` seconds (0 = no limit): the `done` epochs
    so far and as many more as fit in what is left at `epoch_seconds` each (the last may run over by up to a
    fifth of an epoch), between `done` and `max_epochs`."""
    if budget <= 0:
        return max_epochs
    more = math.floor((budget - elapsed) / max(epoch_seconds, 1e-9) + 0.2)
    return max(done, min(max_epochs, done + more))


def warmup_steps(configured: int, warmup_epochs: float, steps_per_epoch: int) -> int:
    """Configured steps, or `warmup_epochs` worth of steps when 0 (warmup scales with the data)."""
    return configured if configured > 0 else max(1, round(warmup_epochs * steps_per_epoch))
