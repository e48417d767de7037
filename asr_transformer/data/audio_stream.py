"""Audio of any length read as a stream: files, a file's bytes, arrays and pipes, opened once and read in blocks
of a few seconds, mixed to mono and resampled to 16 kHz. What `transcribe` and `streaming` read (data/audio.py
reads whole utterances for training and decoding manifests).

Blocks are resampled with enough context on both sides (a multiple of the resampling period) that the result
equals resampling the whole file at once; nothing longer than one block is ever held. The checks are
data/audio.py's: a truncated WAV, NaN or samples far out of range raise AudioError naming the source.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Union

import numpy as np
import soundfile as sf

from asr_transformer.data.audio import (SAMPLE_RATE, TRUNCATION_SLACK, AudioError, block_reach, check_complete,
                                        check_held, check_range, checked_samples, resample, sinc_taps)

BLOCK_SECONDS = 5.0  # audio read (and resampled) at once
SAMPLE_BYTES = {"PCM_U8": 1, "PCM_S8": 1, "ULAW": 1, "ALAW": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4,
                "DOUBLE": 8}
UNKNOWN_LENGTH_BYTES = 0x7F000000  # a streamed WAV header this long (or longer) was written before its length was known


@dataclass
class PipeSource:
    """Audio arriving on a pipe as it is recorded (`asr transcribe --stream -`): a WAV stream, or with `raw_rate`
    headerless signed 16-bit little-endian mono PCM at that sample rate. Read once, front to back."""

    file: BinaryIO  # e.g. sys.stdin.buffer
    raw_rate: int = 0
    name: str = "<stdin>"


AudioSource = Union[str, os.PathLike, bytes, bytearray, np.ndarray, PipeSource]


def source_name(source: AudioSource) -> str:
    """How messages name `source`: its path, <bytes>, <array> or the pipe's name."""
    if isinstance(source, PipeSource):
        return source.name
    if isinstance(source, (bytes, bytearray)):
        return "<bytes>"
    if isinstance(source, np.ndarray):
        return "<array>"
    return str(source)


class AudioStream:
    """One audio source, opened once: `duration` (seconds, from the header; None where it does not say, as for a
    pipe), then `blocks()`: its samples as mono float32 16 kHz blocks of about `block_seconds`, from the start
    each time it is called (a pipe: once). A context manager; AudioError naming the source for audio that cannot
    be read."""

    def __init__(self, source: AudioSource, block_seconds: float = BLOCK_SECONDS):
        self.source, self.name, self.block_seconds = source, source_name(source), block_seconds
        self.file, self._handle, self.frames_read = None, None, 0
        if isinstance(source, np.ndarray):
            self.samples = checked_samples(source, self.name)  # float, channels averaged, finite, in range
            self.duration = len(self.samples) / SAMPLE_RATE
            return
        self.file = self._open()
        if not isinstance(source, PipeSource):  # a stream's header cannot know its length
            try:
                check_complete(self._handle, self.name, self.file.frames, self.file.samplerate)
            except AudioError:
                self.close()
                raise
        self.duration = self.file.frames / self.file.samplerate if self.file.frames > 0 else None

    def _open(self) -> sf.SoundFile:
        source, name = self.source, self.name
        if isinstance(source, PipeSource):
            try:
                if source.raw_rate:
                    return sf.SoundFile(source.file.fileno(), closefd=False, format="RAW", subtype="PCM_16",
                                        endian="LITTLE", samplerate=source.raw_rate, channels=1)
                return sf.SoundFile(source.file.fileno(), closefd=False)
            except Exception as e:
                raise AudioError(name, "unreadable", f"cannot decode the audio stream ({e}); for headerless 16-bit "
                                 "PCM give its sample rate") from None
        if isinstance(source, (bytes, bytearray)):
            if not source:
                raise AudioError(name, "empty", "no audio data (0 bytes)")
            self._handle = io.BytesIO(source)
        else:
            path = Path(source)
            if not path.exists():
                raise AudioError(name, "unreadable", "file not found")
            if path.is_dir():
                raise AudioError(name, "unreadable", "is a directory, not an audio file")
            try:
                self._handle = open(path, "rb")
            except OSError as e:
                raise AudioError(name, "unreadable", e.strerror or str(e)) from None
        try:
            return sf.SoundFile(self._handle)
        except Exception as e:  # soundfile raises several types for unknown or damaged formats
            self.close()
            raise AudioError(name, "unreadable", f"cannot decode audio ({e})") from None

    def blocks(self) -> Iterator[np.ndarray]:
        """The samples from the start, as consecutive (n,) float32 16 kHz blocks; AudioError when they hold
        none, NaN/inf or samples far out of -1..1."""
        if self.file is None:
            n = max(1, int(self.block_seconds * SAMPLE_RATE))
            for i in range(0, len(self.samples), n):
                yield self.samples[i:i + n]
            return
        if self.frames_read and self.file.seekable():  # read again: from the start (a first read never seeks,
            try:                                         # which would let a FLAC decoder skip past damage)
                self.file.seek(0)
            except Exception as e:  # a damaged file's decoder may fail on the way back
                raise AudioError(self.name, "unreadable", f"cannot decode audio ({e})") from None
        self.frames_read = 0
        rate = self.file.samplerate
        if rate == SAMPLE_RATE:
            block = self._read(int(self.block_seconds * rate))
            if block.size == 0:
                raise AudioError(self.name, "empty", "audio has no samples")
            while block.size:
                yield block
                block = self._read(int(self.block_seconds * rate))
            self._check_whole()
            return
        g = math.gcd(rate, SAMPLE_RATE)
        up, down = SAMPLE_RATE // g, rate // g
        ctx = resampling_context(rate)
        size = down * max(1, math.ceil(max(self.block_seconds * rate, ctx) / down))  # ≥ ctx, a multiple of down
        left = np.zeros(ctx, np.float32)
        cur = self._read(size)
        if cur.size == 0:
            raise AudioError(self.name, "empty", "audio has no samples")
        while cur.size:
            nxt = self._read(size)
            right = nxt[:ctx]
            if right.size < ctx:  # end of the file: zeros, as resampling the whole signal pads
                right = np.concatenate([right, np.zeros(ctx - right.size, np.float32)])
            out = resample(np.concatenate([left, cur, right]), rate, SAMPLE_RATE)
            start = ctx * up // down
            yield np.ascontiguousarray(out[start:start + math.ceil(cur.size * up / down)], dtype=np.float32)
            left = np.concatenate([left, cur])[-ctx:]
            cur = nxt
        self._check_whole()

    def _read(self, frames: int) -> np.ndarray:
        try:
            data = self.file.read(frames=frames, dtype="float32", always_2d=True)
        except Exception as e:
            raise AudioError(self.name, "unreadable", f"cannot decode audio ({e})") from None
        self.frames_read += data.shape[0]
        mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
        if not np.isfinite(mono).all():
            raise AudioError(self.name, "nonfinite", "audio contains NaN or infinite samples")
        check_range(mono, self.name)
        return np.ascontiguousarray(mono, dtype=np.float32)

    def _check_whole(self) -> None:
        """At the end: AudioError (truncated) when the audio ended well before its header said, as
        data/audio.py: load_audio refuses it. An MP3's length is an estimate; a pipe's WAV header promises a length
        only when it was written knowing it (not a recorder's placeholder of 2 GB or more)."""
        f = self.file
        if not isinstance(self.source, PipeSource):
            if f.format != "MP3" and f.frames > 0:
                check_held(self.name, f.frames, self.frames_read, f.samplerate)
            return
        if self.source.raw_rate or f.format not in ("WAV", "WAVEX"):
            return
        if not 0 < f.frames * f.channels * SAMPLE_BYTES.get(f.subtype, 2) < UNKNOWN_LENGTH_BYTES:
            return
        if f.frames - self.frames_read > TRUNCATION_SLACK * f.samplerate:
            raise AudioError(self.name, "truncated", f"truncated: the stream ended at "
                             f"{self.frames_read / f.samplerate:.2f} s, its header says {f.frames / f.samplerate:.2f} s")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self._handle is not None:
            self._handle.close()

    def __enter__(self) -> "AudioStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def resampling_context(rate: int) -> int:
    """Input samples of context on each side of a block so that resampling it from `rate` to 16 kHz equals
    resampling the whole signal: the filter's reach (data/audio.py: torchaudio's kernel width, or the sinc's half
    length), rounded up to a multiple of the period rate/gcd plus one period, so blocks meet on output groups."""
    down = rate // math.gcd(rate, SAMPLE_RATE)
    reach = block_reach(rate, SAMPLE_RATE)
    reach = sinc_taps(rate, SAMPLE_RATE) // 2 + 1 if reach is None else reach
    return down * (math.ceil(reach / down) + 1)


def stream_audio(source: AudioSource, block_seconds: float = BLOCK_SECONDS) -> Iterator[np.ndarray]:
    """`source` (a path, a file's bytes, a float array at 16 kHz ((n,) or (n, channels)) or a PipeSource) as
    consecutive mono float32 16 kHz blocks of about `block_seconds`: `AudioStream(source).blocks()`."""
    with AudioStream(source, block_seconds) as audio:
        yield from audio.blocks()
