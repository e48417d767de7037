"""Learning-rate schedule: linear warmup to a peak, then inverse square-root decay (Noam)."""

from __future__ import annotations

import math


def warmup_inverse_sqrt(step: int, peak_lr: float, warmup: int) -> float:
    """lr at optimizer step `step` (1-based): peak · min(step / warmup, sqrt(warmup / step)).

    This is the Noam schedule of "Attention is all you need" with its scale expressed as the peak.
    """
    step = max(step, 1)
    warmup = max(warmup, 1)
    return peak_lr * min(step / warmup, math.sqrt(warmup / step))


def warmup_steps(configured: int, warmup_epochs: float, steps_per_epoch: int) -> int:
    """Configured steps, or `warmup_epochs` worth of steps when 0 (warmup scales with the data)."""
    return configured if configured > 0 else max(1, round(warmup_epochs * steps_per_epoch))
