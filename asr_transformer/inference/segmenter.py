"""Voice-activity segments: a stream of audio cut into speech segments, in bounded memory.

`Segmenter` splits a stream of 16 kHz audio at silences. A voice detector calls each frame speech or not: Silero's
neural one (`silero_vad.py`, 32-ms frames; the default where its wheel is installed) or the energy one
(`energy_vad.py`, 10-ms frames); `VadOptions` chooses and tunes it (`asr transcribe --vad`). A silence of at
least `min_silence` (0.3 s) ends a segment.

A segment is the speech between silences: its reported start/end are the first and last speech
frames; the audio decoded is that plus up to `pad` (0.2 s) of context on each side (never reaching
back before the previous segment's end). A stretch with no such silence is cut, *without overlap*,
at the lowest-energy frame within the last 2 s before `max_segment` is reached (so no word is
decoded twice and no seam has to be merged; a cut lands in the quietest spot, usually a short pause
between words). Segments with less than `min_speech` (0.25 s) of speech (clicks, bells) are dropped; silence is never
decoded. The segments of a file and of the same audio streamed in blocks of any size are the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from asr_transformer.config import DecodeConfig
from asr_transformer.data.audio import SAMPLE_RATE
from asr_transformer.data.audio_stream import AudioSource, AudioStream, stream_audio
from asr_transformer.inference.energy_vad import EnergyDetector

MAX_SEGMENT = 20.0  # seconds: the longest segment decoded at once, unless a caller asks for another


@dataclass(frozen=True)
class VadOptions:
    """The voice detector that cuts audio into segments, and its knobs (faster-whisper's, in seconds); a
    recognizer's come from its decoding options (`DecodeConfig`: vad, vad_threshold, min_speech, min_silence,
    speech_pad), checked there.

    detector: silero (neural; the `vad` extra), energy (levels), none (no detector: the audio in consecutive pieces
    of the longest segment, non-speech included), or auto (silero where installed, else energy). threshold: the
    speech probability that starts speech (silero). min_speech: less speech than this is no segment (a click).
    min_silence: a pause this long ends a segment. pad: context kept on each side of a segment's speech."""

    detector: str = DecodeConfig.vad  # the defaults are the decoding options' (config.py declares them)
    threshold: float = DecodeConfig.vad_threshold
    min_speech: float = DecodeConfig.min_speech
    min_silence: float = DecodeConfig.min_silence
    pad: float = DecodeConfig.speech_pad

    @classmethod
    def of(cls, options) -> "VadOptions":
        """A recognizer's decoding options (a DecodeConfig) → its VadOptions."""
        return cls(options.vad, options.vad_threshold, options.min_speech, options.min_silence, options.speech_pad)

    @property
    def kind(self) -> str:
        """The detector that runs: auto resolved to silero or energy."""
        if self.detector != "auto":
            return self.detector
        from asr_transformer.inference import silero_vad

        return "silero" if silero_vad.available() else "energy"

    def new_detector(self):
        """A fresh detector for one stream (`SileroDetector` or `EnergyDetector`: `frame`, `classify`); None for
        `none`."""
        if self.kind == "none":
            return None
        if self.kind == "silero":
            from asr_transformer.inference.silero_vad import SileroDetector

            return SileroDetector(self.threshold)
        return EnergyDetector()

    def segmenter(self, max_segment: float = MAX_SEGMENT) -> "Segmenter":
        """A Segmenter for one stream with this detector (not for `none`, which has no segmenter)."""
        if self.kind == "none":
            raise ValueError("vad none has no segmenter: the audio is read in pieces")
        return Segmenter(max_segment, self.new_detector(), min_silence=self.min_silence, pad=self.pad,
                         min_speech=self.min_speech)


@dataclass
class Segment:
    """A stretch of speech: `start`/`end` in seconds (the speech itself, relative to the file) and the
    16 kHz `audio` to decode, which starts at `audio_start` seconds (it may include a little context). `gaps`:
    the stretches inside it that the detector found no speech in, (start, end) in seconds, where segments were
    joined into one window (`transcribe.WindowMerger`)."""

    start: float
    end: float
    audio: np.ndarray
    audio_start: float
    gaps: tuple[tuple[float, float], ...] = ()


def check_vad(options) -> None:
    """ValueError where decoding options (a DecodeConfig) ask for Silero's detector and it is not installed."""
    from asr_transformer.inference import silero_vad

    if options.vad == "silero" and not silero_vad.available():
        raise ValueError(f"vad silero: {silero_vad.NOT_INSTALLED}")


class Segmenter:
    """Splits a stream into segments of at most `max_segment` seconds with a voice detector (`EnergyDetector` by
    default; see the module docstring for the rule). Feed blocks with `push`, then call `finish`; each returns the
    segments completed so far, in order. Memory: at most max_segment + one block of audio.
    """

    def __init__(self, max_segment: float = MAX_SEGMENT, detector=None, min_silence: float = VadOptions.min_silence,
                 pad: float = VadOptions.pad, min_speech: float = VadOptions.min_speech, cut_search: float = 2.0):
        if not max_segment >= 0.5:
            raise ValueError(f"max_segment must be at least 0.5 s, got {max_segment}")
        self.detector = detector if detector is not None else EnergyDetector()
        self.frame = self.detector.frame  # samples per frame
        fps = SAMPLE_RATE / self.frame  # frames per second
        self.max_frames = int(round(max_segment * fps))
        self.min_silence = max(1, int(round(min_silence * fps)))
        self.pad = int(round(pad * fps))
        self.min_speech = max(1, int(round(min_speech * fps)))
        self.cut_search = max(1, min(int(round(cut_search * fps)), self.max_frames // 2))
        self.loudest = -math.inf  # the loudest frame so far (dB): above SILENT_DB, the audio is not silent
        self.samples = 0  # samples pushed so far
        self.audio = np.zeros(0, np.float32)  # samples [audio0, self.samples)
        self.audio0 = 0
        self.db = np.zeros(0, np.float32)  # frame energies [frame0, frame0 + len)
        self.speech = np.zeros(0, bool)
        self.frame0 = 0
        self.cursor = 0  # first frame not yet given to a segment (absolute)
        self.prev_end = 0  # end frame of the previous segment: left context stops there
        self.done = False

    # -- public -----------------------------------------------------------------------------------

    @property
    def position(self) -> float:
        """Seconds of audio fully segmented so far."""
        return self.cursor * self.frame / SAMPLE_RATE

    def push(self, block: np.ndarray) -> list[Segment]:
        if self.done:
            raise RuntimeError("Segmenter.push after finish")
        block = np.asarray(block, dtype=np.float32)
        if block.size == 0:
            return []
        self.audio = np.concatenate([self.audio, block])
        self.samples += block.size
        self._add_frames(self.samples // self.frame)
        return self._emit(final=False)

    def finish(self) -> list[Segment]:
        """Flush the rest of the stream (a last partial frame counts, zero-padded)."""
        if self.done:
            return []
        self._add_frames(math.ceil(self.samples / self.frame))
        self.done = True
        return self._emit(final=True)

    # -- internals --------------------------------------------------------------------------------

    def _add_frames(self, total_frames: int) -> None:
        have = self.frame0 + self.db.size
        if total_frames <= have:
            return
        F = self.frame
        lo, hi = have * F - self.audio0, total_frames * F - self.audio0
        x = self.audio[lo:hi]
        if x.size < hi - lo:
            x = np.concatenate([x, np.zeros(hi - lo - x.size, np.float32)])
        db, speech = self.detector.classify(x.reshape(-1, F))
        self.loudest = max(self.loudest, float(db.max()))
        self.db = np.concatenate([self.db, db])
        self.speech = np.concatenate([self.speech, speech])

    def _segment(self, s: int, e: int, forced: bool, total: int) -> Segment | None:
        """Speech frames [s, e) (absolute) → a Segment with context; None when it holds too little speech."""
        a = max(s - self.pad, self.prev_end, self.frame0)
        self.prev_end = e
        if int(self.speech[s - self.frame0:e - self.frame0].sum()) < self.min_speech:
            return None
        b = e if forced else min(e + self.pad, total)
        F = self.frame
        audio = self.audio[a * F - self.audio0:min(b * F, self.samples) - self.audio0].copy()
        return Segment(start=s * F / SAMPLE_RATE, end=min(e * F, self.samples) / SAMPLE_RATE,
                       audio=audio, audio_start=a * F / SAMPLE_RATE)

    def _cut(self, s: int) -> int:
        """No silence within max_segment after speech start s: the quietest frame of the last `cut_search`."""
        lo = s + self.max_frames - self.cut_search
        window = self.db[lo - self.frame0:s + self.max_frames - self.frame0]
        return max(lo + int(np.argmin(window)), s + 1)

    def _emit(self, final: bool) -> list[Segment]:
        out: list[Segment] = []
        total = self.frame0 + self.db.size
        m = self.min_silence
        while True:
            hits = np.flatnonzero(self.speech[self.cursor - self.frame0:])
            if hits.size == 0:  # nothing but silence after the cursor
                self.cursor = total
                break
            s = self.cursor + int(hits[0])
            # the first silence run of ≥ m frames after s, from window sums of the silence indicator
            sil = ~self.speech[s - self.frame0:]
            full = np.zeros(0, np.int64)
            if sil.size >= m:
                csum = np.concatenate([[0], np.cumsum(sil)])
                full = np.flatnonzero(csum[m:] - csum[:-m] == m)
            if full.size and full[0] <= self.max_frames:  # speech [s, s + full[0]) then silence
                e = s + int(full[0])
                seg, self.cursor = self._segment(s, e, forced=False, total=total), e
            elif final:
                e = s + int(np.flatnonzero(~sil)[-1]) + 1  # after the last speech frame
                if e - s <= self.max_frames:
                    seg, self.cursor = self._segment(s, e, forced=False, total=total), total
                else:
                    c = self._cut(s)
                    seg, self.cursor = self._segment(s, c, forced=True, total=total), c
            elif sil.size >= self.max_frames + m:  # seen enough: no silence run starts within max_segment
                c = self._cut(s)
                seg, self.cursor = self._segment(s, c, forced=True, total=total), c
            else:  # a silence may still come: wait for more audio
                self.cursor = s
                break
            if seg is not None:
                out.append(seg)
        self._trim()
        return out

    def _trim(self) -> None:
        """Drop frames and samples no future segment can use (`pad` frames of left context are kept)."""
        keep = max(self.frame0, self.prev_end, self.cursor - self.pad)
        if keep > self.frame0:
            self.db = self.db[keep - self.frame0:]
            self.speech = self.speech[keep - self.frame0:]
            self.frame0 = keep
        sample0 = min(keep * self.frame, self.samples)
        if sample0 > self.audio0:
            self.audio = self.audio[sample0 - self.audio0:].copy()
            self.audio0 = sample0


def iter_segments(source: AudioSource, max_segment: float = MAX_SEGMENT,
                  vad: VadOptions = VadOptions("energy")) -> Iterator[Segment]:
    """Stream `source` and yield its speech segments (see `Segmenter`; the energy detector unless `vad` says
    otherwise), in order."""
    seg = vad.segmenter(max_segment)
    for block in stream_audio(source):
        yield from seg.push(block)
    yield from seg.finish()


def pieces(audio: AudioStream, max_segment: float = MAX_SEGMENT) -> Iterator[Segment]:
    """All of `audio`, from its start, as consecutive segments of `max_segment` seconds (the last one shorter),
    without looking for speech: what `transcribe` decodes when the detector finds none."""
    size = max(1, int(round(max_segment * SAMPLE_RATE)))
    buffer, start = np.zeros(0, np.float32), 0
    for block in audio.blocks():
        buffer = np.concatenate([buffer, block])
        while buffer.size >= size:
            yield _piece(buffer[:size], start)
            buffer, start = buffer[size:], start + size
    if buffer.size:
        yield _piece(buffer, start)


def _piece(audio: np.ndarray, start: int) -> Segment:
    """The samples `audio`, which start at sample `start` of the file, as a Segment."""
    return Segment(start=start / SAMPLE_RATE, end=(start + audio.size) / SAMPLE_RATE, audio=audio.copy(),
                   audio_start=start / SAMPLE_RATE)
