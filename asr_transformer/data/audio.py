"""Audio in: any file soundfile reads, returned as mono float32 at 16 kHz.

Conversion happens once, here. Corrupt, empty, truncated, silent, NaN-carrying and out-of-range audio raise
AudioError naming the file, so a corpus reader can skip and count instead of failing silently:

- truncated: a WAV whose header declares more than the file holds (libsndfile would read the part that is
  there without a word) is refused, not read in part, so that a corpus never trains on half an utterance;
  10 ms of slack allows for writers that count a few header bytes into the data size.
- range: float samples are expected in -1..1. A peak above `MAX_PEAK` (40 dB over full scale) means another
  scale (e.g. int16 values stored as float), whose features would be shifted by tens of dB or overflow; such
  a file is refused rather than rescaled, since any rescaling would be a guess at what was meant.

Resampling (`resample`) is band-limited at every rate in memory that does not grow with the rates' gcd:
torchaudio's polyphase filter for ratios whose reduced form is small (all the usual rates), a Kaiser-windowed
sinc evaluated at each output's exact position for the others (22,051 Hz, 7,919 Hz, ...).
"""

from __future__ import annotations

import io
import math
import os
from typing import BinaryIO

import numpy as np
import soundfile as sf

from asr_transformer.errors import UserError

SAMPLE_RATE = 16000
# File name endings treated as audio when a folder is read (corpora, augment.sounds); a file soundfile then cannot
# read is reported by whoever reads it.
AUDIO_EXTENSIONS = {
    ".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".sph", ".nist",
    ".aif", ".aiff", ".au", ".snd", ".caf", ".w64", ".rf64",
}
MAX_PEAK = 100.0  # |sample| above this (float formats) is refused as out of range
MAX_CHANNELS = 8  # an array handed over with more columns than this is not (samples, channels)
TRUNCATION_SLACK = 0.01  # seconds a WAV may hold less than its header says
PLAIN_WAV_FORMATS = (1, 3, 6, 7, 0xFFFE)  # PCM, float, A-law, µ-law, extensible: one block align per frame

# Resampling. Reduced ratios up to RATIONAL_LIMIT use torchaudio, whose kernel has new/g × (orig/g + 2·width)
# taps (≤ about 1000 × 1013 float64, 8 MB); above it that kernel grows to gigabytes (22,051 → 16,000 Hz: 16,000
# phases × 22,069 taps), so those ratios use the windowed sinc below, whose table and chunks are bounded.
RATIONAL_LIMIT = 1000
SINC_ZEROS = 32  # zero crossings of the sinc on each side
KAISER_BETA = 10.0  # window shape: stopband ≥ 100 dB from 0.53 × the lower rate
ROLLOFF = 0.95  # cutoff as a fraction of the lower Nyquist: ≤ 0.1 dB loss up to 0.44 × the lower rate
PHASES = 1024  # kernel table resolution per input sample (fewer when downsampling), linearly interpolated
CHUNK_ELEMENTS = 1 << 18  # outputs × taps computed at once (a few MB)


class AudioError(UserError, ValueError):
    """Audio that cannot be used; `kind` is one of unreadable, empty, truncated, silent, nonfinite, range."""

    def __init__(self, source: str, kind: str, detail: str):
        super().__init__(f"{source}: {detail}")
        self.source = source
        self.kind = kind


def audio_info(source: str | os.PathLike | bytes) -> tuple[float, int]:
    """(duration in seconds, sample rate) of a file (a path, or its bytes) from its header, without reading
    samples."""
    name = "<bytes>" if isinstance(source, (bytes, bytearray)) else str(source)
    try:
        info = sf.info(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else name)
    except Exception as e:  # soundfile raises several types for bad headers
        raise AudioError(name, "unreadable", f"cannot read audio header ({e})") from None
    if info.frames <= 0:
        raise AudioError(name, "empty", "audio file has no samples")
    check_complete(source, name, info.frames, info.samplerate)
    return info.frames / info.samplerate, info.samplerate


# ------------------------------------------------------------------------------------- checks


def wav_declared_frames(source: str | os.PathLike | bytes | BinaryIO) -> int | None:
    """Frames the header of a WAV (RIFF or RF64) declares: its data chunk's size / block align. `source`: a path,
    a file's bytes, or an open binary file (read from its start and left where it was).

    None for other formats, for WAVs of compressed samples (ADPCM, GSM: a block holds many frames) and for WAVs
    written as a stream, whose header leaves the size unknown (0 or 0xFFFFFFFF).
    """
    if hasattr(source, "read"):
        position = source.seek(0, io.SEEK_CUR)
        try:
            source.seek(0)
            return _declared_frames(source)
        finally:
            source.seek(position)
    with (io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb")) as f:
        return _declared_frames(f)


def _declared_frames(f: BinaryIO) -> int | None:
    """The frames a WAV header read from `f` declares (see wav_declared_frames)."""
    head = f.read(12)
    if head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
        return None
    block_align = long_size = None
    for _ in range(64):  # the chunks before the data: fmt, ds64, LIST, fact, ...
        chunk = f.read(8)
        if len(chunk) < 8:
            return None
        kind, size = chunk[:4], int.from_bytes(chunk[4:], "little")
        if kind == b"data":
            if size == 0xFFFFFFFF and long_size:
                size = long_size
            return size // block_align if block_align and size not in (0, 0xFFFFFFFF) else None
        body = f.read(min(size, 64)) if kind in (b"fmt ", b"ds64") else b""
        if kind == b"fmt " and len(body) >= 14 and int.from_bytes(body[:2], "little") in PLAIN_WAV_FORMATS:
            block_align = int.from_bytes(body[12:14], "little")
        elif kind == b"ds64" and len(body) >= 16:
            long_size = int.from_bytes(body[8:16], "little")
        f.seek(size - len(body) + (size & 1), 1)  # chunks are padded to an even size
    return None


def check_complete(source: str | os.PathLike | bytes | BinaryIO, name: str, frames: int, rate: int) -> None:
    """Raise AudioError (truncated) when a WAV holds `frames` but its header declares more (`source`: as
    wav_declared_frames takes it)."""
    try:
        declared = wav_declared_frames(source)
    except OSError:
        return  # unreadable here: soundfile has read it, and will say so if it cannot
    if declared is not None:
        check_held(name, declared, frames, rate)


def check_held(name: str, declared: int, held: int, rate: int) -> None:
    """Raise AudioError (truncated) when a file holds `held` frames, more than TRUNCATION_SLACK short of the
    `declared` ones."""
    if declared - held > TRUNCATION_SLACK * rate:
        raise AudioError(name, "truncated", f"truncated: header says {declared / rate:.2f} s, "
                                            f"file holds {held / rate:.2f} s")


def check_range(samples: np.ndarray, name: str) -> None:
    """Raise AudioError (range) when finite samples peak above MAX_PEAK: not audio in -1..1."""
    peak = float(max(samples.max(initial=0.0), -samples.min(initial=0.0)))  # no |samples| copy
    if peak > MAX_PEAK:
        raise AudioError(name, "range", f"samples out of range (peak {peak:.3g}); expected -1..1")


def checked_samples(samples, name: str) -> np.ndarray:
    """Samples a caller hands over (an array, not a file) → mono float32, passing the checks a file passes: a
    numpy array of floats, (n,) or (n, channels) with up to MAX_CHANNELS channels (averaged, as a file's are),
    not empty, finite, within -1..1 (`check_range`). AudioError naming `name` (e.g. "array 2") otherwise."""
    if not isinstance(samples, np.ndarray):
        raise AudioError(name, "unreadable", f"expected a numpy array of 16 kHz samples, got {type(samples).__name__}")
    if not np.issubdtype(samples.dtype, np.floating):
        raise AudioError(name, "unreadable", f"expected float samples in -1..1, got {samples.dtype} (int16 audio: "
                                             "divide by 32768)")
    if samples.ndim == 2 and 1 <= samples.shape[1] <= MAX_CHANNELS:
        samples = samples.mean(axis=1, dtype=np.float32)
    elif samples.ndim != 1:
        raise AudioError(name, "unreadable", f"expected samples (n,) or (n, channels ≤ {MAX_CHANNELS}), got shape "
                                             f"{samples.shape}")
    if samples.size == 0:
        raise AudioError(name, "empty", "audio has no samples")
    if not np.isfinite(samples).all():
        raise AudioError(name, "nonfinite", "audio contains NaN or infinite samples")
    check_range(samples, name)
    return np.ascontiguousarray(samples, dtype=np.float32)


# ------------------------------------------------------------------------------------- resampling


def resample(samples: np.ndarray, orig_rate: int, new_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling: (n,) float32 → (ceil(n · new_rate / orig_rate),) float32.

    Output k lies at input position k · orig_rate / new_rate, samples beyond the ends count as zeros (so a
    block cut at a multiple of orig/gcd input samples resamples as the whole signal does). Ratios whose reduced
    form has both terms ≤ RATIONAL_LIMIT use torchaudio's polyphase filter (its defaults: Hann-windowed sinc,
    6 zero crossings, rolloff 0.99); the others `sinc_resample`, in memory bounded whatever the rates.
    """
    if orig_rate == new_rate:
        return samples
    if block_reach(orig_rate, new_rate) is None:
        return sinc_resample(samples, orig_rate, new_rate)
    import torch
    import torchaudio.functional as AF

    g = math.gcd(orig_rate, new_rate)
    out = AF.resample(torch.from_numpy(samples), orig_rate // g, new_rate // g)
    return out.numpy()


def block_reach(orig_rate: int, new_rate: int) -> int | None:
    """For a ratio that `resample` hands to torchaudio: how many input samples beyond its own block of
    orig/gcd samples a block of new/gcd outputs reads (torchaudio's kernel `width`); None for the other ratios."""
    g = math.gcd(orig_rate, new_rate)
    down, up = orig_rate // g, new_rate // g
    if max(down, up) > RATIONAL_LIMIT:
        return None
    return math.ceil(6 * down / (0.99 * min(down, up)))


def sinc_taps(orig_rate: int, new_rate: int) -> int:
    """Input samples each output of `sinc_resample` reads: SINC_ZEROS zero crossings of the sinc each side,
    2 · ceil(SINC_ZEROS / scale) with scale = ROLLOFF · min(orig, new) / orig (68 upsampling, 94 from 22,051 Hz)."""
    return 2 * math.ceil(SINC_ZEROS * orig_rate / (ROLLOFF * min(orig_rate, new_rate)))


def _sinc_table(scale: float, taps: int, phases: int) -> np.ndarray:
    """Kernel h(p / phases − j) for p = 0..phases, j = −taps/2 + 1..taps/2 → (phases + 1, taps) float32; each
    row sums to 1 (a constant stays constant). h(τ) = scale · sinc(scale · τ) · Kaiser(τ / reach)."""
    half = taps // 2
    tau = np.arange(phases + 1)[:, None] / phases - np.arange(-half + 1, half + 1)[None, :]
    reach = SINC_ZEROS / scale
    u = np.minimum(np.abs(tau) / reach, 1.0)
    window = np.i0(KAISER_BETA * np.sqrt(1.0 - u * u)) / np.i0(KAISER_BETA) * (np.abs(tau) < reach)
    kernel = scale * np.sinc(scale * tau) * window
    return (kernel / kernel.sum(axis=1, keepdims=True)).astype(np.float32)


def sinc_resample(samples: np.ndarray, orig_rate: int, new_rate: int) -> np.ndarray:
    """Resample with a Kaiser-windowed sinc at any ratio: (n,) float32 → (ceil(n · new / orig),) float32.

    Output k is Σ_j x[j] · h(t_k − j) at t_k = k · orig / new (exact in integers), h cut off at ROLLOFF × the
    lower Nyquist. h comes from a table of PHASES · scale phases per input sample, interpolated linearly between
    phases, as libsamplerate does: about 2 · PHASES · SINC_ZEROS entries (256 KB) whatever the rates. Outputs
    are computed CHUNK_ELEMENTS // taps at a time, so memory beyond the input and output is a few MB.
    """
    scale = ROLLOFF * min(orig_rate, new_rate) / orig_rate
    taps = sinc_taps(orig_rate, new_rate)
    phases = max(2, math.ceil(PHASES * scale))
    table = _sinc_table(scale, taps, phases)
    zeros = np.zeros(taps // 2, np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(np.concatenate([zeros, samples, zeros]), taps)
    out = np.empty(-(-len(samples) * new_rate // orig_rate), np.float32)
    step = max(1, CHUNK_ELEMENTS // taps)
    for start in range(0, len(out), step):
        k = np.arange(start, min(start + step, len(out)), dtype=np.int64)
        base, rem = np.divmod(k * orig_rate, new_rate)  # t_k = base + rem / new
        phase = rem * (phases / new_rate)
        p = phase.astype(np.int64)
        frac = (phase - p).astype(np.float32)
        inputs = windows[base + 1]  # x[base − taps/2 + 1 .. base + taps/2]
        lo = np.einsum("ct,ct->c", table[p], inputs)
        hi = np.einsum("ct,ct->c", table[p + 1], inputs)
        out[start:start + len(k)] = lo + frac * (hi - lo)
    return out


# ------------------------------------------------------------------------------------- reading


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
            rate, frames, estimated = f.samplerate, f.frames, f.format == "MP3"  # an MP3's length is estimated
            start = min(int(round(offset * rate)), frames)
            if start:
                f.seek(start)
            expected = frames - start if duration is None else min(int(round(duration * rate)), frames - start)
            count = -1 if duration is None and f.seekable() else expected  # GSM 6.10 cannot seek to find "all"
            data = f.read(frames=count, dtype="float32", always_2d=True)
    except Exception as e:
        raise AudioError(name, "unreadable", f"cannot decode audio ({e})") from None
    if expected - data.shape[0] > TRUNCATION_SLACK * rate and not estimated:  # the decoder found less than promised
        raise AudioError(name, "truncated", f"truncated: header says {frames / rate:.2f} s, "
                                            f"file holds {(start + data.shape[0]) / rate:.2f} s")
    check_complete(source, name, frames, rate)
    if data.shape[0] == 0:
        raise AudioError(name, "empty", "audio has no samples" + (f" at offset {offset}s" if offset else ""))
    if not np.isfinite(data).all():
        raise AudioError(name, "nonfinite", "audio contains NaN or infinite samples")
    check_range(data, name)
    samples = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if not allow_silent and not np.any(samples):
        raise AudioError(name, "silent", "audio is all zeros (silent)")
    samples = resample(np.ascontiguousarray(samples, dtype=np.float32), rate, sample_rate)
    return samples.astype(np.float32, copy=False)
