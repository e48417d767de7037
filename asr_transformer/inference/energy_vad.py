"""The energy voice detector: each 10-ms frame of a stream called speech or not by its level (no model, no extra).

A frame's energy in dB is that of the frame less its mean (a DC offset is no sound, and would otherwise raise the
noise floor above the speech). A frame is speech when its energy is above ``max(peak − 40 dB, noise + 10 dB,
−70 dBFS)``. `peak` is a running maximum (decaying 1 dB/s, updated with each block before its frames are
classified, so a block looks ahead at itself); `noise` a running noise floor (the 10th percentile of each
block's frame energies, allowed to rise by 0.2 dB/s). In a block with dynamics (10th to 90th percentile ≥ 6 dB,
i.e. it holds speech) the noise term is capped at peak − 15 dB, so speech that starts without any leading silence
is not taken for noise; a stationary block (steady noise, hum) stays silence.

`segmenter.Segmenter` turns the frames into segments; `silero_vad.SileroDetector` is the neural alternative.
"""

from __future__ import annotations

import math

import numpy as np

from asr_transformer.data.audio import SAMPLE_RATE

SILENT_DB = -70.0  # dBFS: no frame louder than this, and a stream is silence


def frame_db(frames: np.ndarray) -> np.ndarray:
    """(n, frame) samples → (n,) energy in dB of each frame less its mean."""
    x = frames.astype(np.float64)
    x -= x.mean(axis=1, keepdims=True)
    return (10.0 * np.log10(np.mean(x * x, axis=1) + 1e-12)).astype(np.float32)


class EnergyDetector:
    """Frames of 10 ms classified by their level, with the running state of one stream (module docstring)."""

    frame = SAMPLE_RATE // 100  # samples

    def __init__(self, dynamic_range_db: float = 40.0, noise_margin_db: float = 10.0, floor_db: float = SILENT_DB,
                 peak_decay_db: float = 1.0, noise_rise_db: float = 0.2, min_snr_db: float = 15.0,
                 stationary_db: float = 6.0):
        self.dynamic_range_db, self.noise_margin_db, self.floor_db = dynamic_range_db, noise_margin_db, floor_db
        self.peak_decay_db, self.noise_rise_db = peak_decay_db, noise_rise_db
        self.min_snr_db, self.stationary_db = min_snr_db, stationary_db
        self.peak = -math.inf
        self.noise = math.inf

    def classify(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next (n, frame) samples of the stream → ((n,) energy dB, (n,) speech flags)."""
        db = frame_db(frames)
        dt = db.size * self.frame / SAMPLE_RATE
        self.peak = max(self.peak - self.peak_decay_db * dt, float(db.max()))
        low, high = (float(v) for v in np.percentile(db, [10, 90]))
        self.noise = low if not math.isfinite(self.noise) else min(self.noise + self.noise_rise_db * dt, low)
        noise_threshold = self.noise + self.noise_margin_db
        if high - low >= self.stationary_db:  # the block has dynamics, so it holds speech: its quiet
            noise_threshold = min(noise_threshold, self.peak - self.min_snr_db)  # part may be speech too
        threshold = max(self.peak - self.dynamic_range_db, noise_threshold, self.floor_db)
        return db, db > threshold
