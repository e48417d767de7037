"""Audio in: any file soundfile reads, returned as mono float32 at 16 kHz.

Conversion happens once, here. Corrupt, empty, silent and NaN-carrying audio raise AudioError
naming the file, so a corpus reader can skip and count instead of failing silently.
"""

from __future__ import annotations

import io
import math
import os

import numpy as np
import soundfile as sf

from asr_transformer.errors import UserError

SAMPLE_RATE = 16000


class AudioError(UserError, ValueError):
    """Audio that cannot be used; `kind` is one of unreadable, empty, silent, nonfinite."""

    def __init__(self, source: str, kind: str, detail: str):
        super().__init__(f"{source}: {detail}")
        self.source = source
        self.kind = kind


def audio_info(path: str | os.PathLike) -> tuple[float, int]:
    """(duration in seconds, sample rate) from the header, without reading samples."""
    try:
        info = sf.info(str(path))
    except Exception as e:  # soundfile raises several types for bad headers
        raise AudioError(str(path), "unreadable", f"cannot read audio header ({e})") from None
    if info.frames <= 0:
        raise AudioError(str(path), "empty", "audio file has no samples")
    return info.frames / info.samplerate, info.samplerate


def resample(samples: np.ndarray, orig_rate: int, new_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling of a 1-D float32 array with torchaudio."""
    if orig_rate == new_rate:
        return samples
    import torch
    import torchaudio.functional as AF

    g = math.gcd(orig_rate, new_rate)
    out = AF.resample(torch.from_numpy(samples), orig_rate // g, new_rate // g)
    return out.numpy()


def load_utterance(utt, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The samples of a manifest utterance (`audio`, and for segments `offset` + `duration`)."""
    segment = utt.offset is not None
    return load_audio(utt.audio, offset=utt.offset or 0.0, duration=utt.duration if segment else None,
                      sample_rate=sample_rate, allow_silent=True)


def load_audio(
    source: str | os.PathLike | bytes,
    offset: float = 0.0,
    duration: float | None = None,
    sample_rate: int = SAMPLE_RATE,
    allow_silent: bool = False,
) -> np.ndarray:
    """Read `source` (a path, or the bytes of a file) → (samples,) mono float32 at `sample_rate`.

    `offset`/`duration` (seconds) select a segment without reading the rest of the file.
    """
    name = "<bytes>" if isinstance(source, (bytes, bytearray)) else str(source)
    handle = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else str(source)
    try:
        with sf.SoundFile(handle) as f:
            rate = f.samplerate
            start = int(round(offset * rate))
            if start:
                f.seek(min(start, f.frames))
            count = -1 if duration is None else int(round(duration * rate))
            data = f.read(frames=count, dtype="float32", always_2d=True)
    except AudioError:
        raise
    except Exception as e:
        raise AudioError(name, "unreadable", f"cannot decode audio ({e})") from None
    if data.shape[0] == 0:
        raise AudioError(name, "empty", "audio has no samples" + (f" at offset {offset}s" if offset else ""))
    samples = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if not np.isfinite(samples).all():
        raise AudioError(name, "nonfinite", "audio contains NaN or infinite samples")
    if not allow_silent and not np.any(samples):
        raise AudioError(name, "silent", "audio is all zeros (silent)")
    samples = resample(np.ascontiguousarray(samples, dtype=np.float32), rate, sample_rate)
    return samples.astype(np.float32, copy=False)
