"""A stream's speech by Silero's detector, for live recognition's endpoints (`streaming.StreamingRecognizer`).

A streaming model's CTC head decides where an utterance ends (WeNet's rules: blank for a while after speech); on
noise, music or a tone it may keep writing, so an utterance never ends and its final is words that nobody said.
`VoiceGate` runs a voice detector over the same samples as they arrive and answers two questions about a stretch
of the stream (in samples from its start): did it hold speech, and how long has it been quiet at its end. Only
frames that end inside the stretch count, so the answers depend on the audio alone, never on how it was cut into
blocks: a stream gives the same finals whatever its block sizes.
"""

from __future__ import annotations

import numpy as np


class VoiceGate:
    """A voice detector's speech flags over one stream (`push` samples as they come, `finish` at its end).

    detector: a fresh `SileroDetector` or `EnergyDetector` (`frame` samples a frame, `classify`)."""

    def __init__(self, detector):
        self.detector, self.frame = detector, detector.frame
        self._pending = np.zeros(0, np.float32)  # samples of a frame not yet complete
        self._flags = np.zeros(0, bool)  # per frame from frame `_first` on: speech or not
        self._first = 0  # frames before it are forgotten (`forget`)

    def push(self, samples: np.ndarray) -> None:
        """The stream's next 16 kHz samples, (n,) float32."""
        x = np.concatenate([self._pending, samples.astype(np.float32, copy=False)])
        n = x.size // self.frame
        if n:
            _, speech = self.detector.classify(x[:n * self.frame].reshape(n, self.frame))
            self._flags = np.concatenate([self._flags, speech])
        self._pending = x[n * self.frame:]

    def finish(self) -> None:
        """The end of the stream: a last partial frame counts, zero-padded."""
        if self._pending.size:
            self.push(np.zeros(self.frame - self._pending.size, np.float32))

    def forget(self, before: int) -> None:
        """Drop the flags of frames before sample `before`'s frame: no later question starts before it (a stream's
        next utterance), so a stream of hours keeps only its current utterance's flags."""
        drop = min(before // self.frame - self._first, self._flags.size)
        if drop > 0:
            self._flags, self._first = self._flags[drop:], self._first + drop

    def _frames(self, start: int, end: int) -> np.ndarray:
        """Flags of the frames that end inside samples (start, end] and start at or after `start`'s frame."""
        if start // self.frame < self._first:
            raise ValueError(f"sample {start}: its frame was forgotten")
        first = start // self.frame - self._first
        last = min(end // self.frame - self._first, self._flags.size)
        return self._flags[first:last] if last > first else self._flags[:0]

    def heard(self, start: int, end: int) -> bool:
        """Whether samples [start, end) of the stream held speech."""
        return bool(self._frames(start, end).any())

    def quiet(self, start: int, end: int) -> float:
        """Seconds of no speech at the end of samples [start, end) (all of it when it held none)."""
        flags = self._frames(start, end)
        voiced = np.flatnonzero(flags)
        frames = flags.size - (int(voiced[-1]) + 1 if voiced.size else 0)
        return frames * self.frame / 16000
