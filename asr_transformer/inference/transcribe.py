"""Transcribe audio files of any length: stream → voice-activity segments → batched decoding → text,
segments and timestamps (the writers' result dict), in bounded memory.

Read top to bottom:

1. `data/audio_stream.py: AudioStream` opens the source once (a path, the bytes of a file, or an array already at
   16 kHz) and reads it in blocks of a few seconds, mono, resampled to 16 kHz as the whole file would be.
2. `inference/segmenter.py: Segmenter` cuts the stream at silences into speech segments of at most
   `max_segment` seconds (its docstring gives the rule).
3. A model without a CTC head (an imported Whisper) reads consecutive segments merged into windows of up to 30 s
   (`WindowMerger`; the window of its features, or `options.max_window`), as it was trained: a lone segment
   would lose its sentence.
   `transcribe` batches the segments (``options.batch_size`` at a time) through a `Recognizer`
   (recognizer.py), keeping at most one batch of segment audio (plus the segmenter's buffer of
   ≤ max_segment + one block) in memory, so a 30-minute file needs no more memory than a 30-second one.
   With `word_timestamps`, each segment's hypothesis is also aligned to its CTC log-probs (decode/align.py)
   to time its words. A file in which the detector finds no speech although it is not silent (a frame above
   −70 dBFS) is decoded whole, in consecutive pieces of `max_segment` (`pieces`), with a `NoSpeechWarning`:
   the detector never silently turns sound into an empty transcript.
4. `progress`, a callback of `transcribe`, hears how far a long file is (`asr transcribe` draws a bar with it).

This is a library module: errors are `AudioError`s (a UserError naming the source), warnings `NoSpeechWarning`s;
the command line (cli/transcribe.py) turns them into its one-line messages.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Iterator

import numpy as np

from asr_transformer.data.audio import SAMPLE_RATE
from asr_transformer.data.audio_stream import AudioSource, AudioStream
from asr_transformer.inference import reread
from asr_transformer.inference.energy_vad import SILENT_DB
from asr_transformer.malloc import release_free_memory
from asr_transformer.inference.segmenter import MAX_SEGMENT, Segment, VadOptions, pieces


ProgressCallback = Callable[[float, "float | None", int], None]  # (seconds done, total seconds or None, segments)

MIN_DECODE = int(0.1 * SAMPLE_RATE)  # segments shorter than this are zero-padded for the encoder
WHISPER_WINDOW = 30.0  # seconds: the window an attention-only model (Whisper) reads segments merged into


class NoSpeechWarning(UserWarning):
    """The voice detector found no speech in audio that is not silent, so all of it was decoded, in pieces."""

    def __init__(self, source: str, detail: str):
        super().__init__(f"{source}: {detail}")
        self.source, self.detail = source, detail


class EmptySegmentWarning(UserWarning):
    """Stretches the voice detector took for speech gave no text: words may be missing there (or it was noise)."""

    def __init__(self, source: str, spans: list[tuple[float, float]]):
        shown = ", ".join(f"{a:.1f}–{b:.1f} s" for a, b in spans[:5]) + (", …" if len(spans) > 5 else "")
        self.source, self.spans = source, spans
        self.detail = (f"{len(spans)} stretch{'es' if len(spans) > 1 else ''} of sound the voice detector took for "
                       f"speech gave no text ({shown}): listen there for missing words")
        super().__init__(f"{source}: {self.detail}")


class WindowMerger:
    """Consecutive segments joined into windows of at most `window` seconds (first speech to last), for models
    that read a whole window at once (Whisper: 30 s): each segment alone would lose the sentence around it. The
    silence between two segments is written as zeros; where their context audio overlaps, the later one's is kept.
    A window starts where the one before it ended (the file's start for the first), the silence before its first
    segment written as zeros where it fits, so a file shorter than the window is read as decoding it whole reads it.
    `push` a segment → the windows it closes; `finish` → the last one."""

    def __init__(self, window: float):
        self.window, self.open, self.heard = window, None, 0.0  # heard: where the last window's audio ended

    def push(self, segment: Segment) -> list[Segment]:
        if self.open is None:
            self.open = self._lead_in(segment)
            return []
        if _audio_end(segment) - self.open.audio_start <= self.window:  # its audio, context included, fits
            self.open = _joined(self.open, segment)
            return []
        closed = self.finish()
        self.open = self._lead_in(segment)
        return closed

    def finish(self) -> list[Segment]:
        closed, self.open = self.open, None
        if closed is None:
            return []
        self.heard = _audio_end(closed)
        return [closed]

    def _lead_in(self, segment: Segment) -> Segment:
        """`segment` with zeros before it back to where the last window ended, when the window still holds it."""
        lead = round((segment.audio_start - self.heard) * SAMPLE_RATE)
        if lead <= 0 or _audio_end(segment) - self.heard > self.window:
            return segment
        return Segment(segment.start, segment.end, np.concatenate([np.zeros(lead, np.float32), segment.audio]),
                       self.heard, segment.gaps)


class SegmentStream:
    """The segments `transcribe` decodes from one source, in order: the voice detector's (the recognizer's
    options' `VadOptions`; for a model without a CTC head merged into windows of at most `options.max_window`:
    `WindowMerger`), or with `vad` none all of the audio in `pieces` (of a window, or of `max_segment`). Where the energy detector finds no speech in audio that is not silent, all of it is decoded in
    `pieces`, with a NoSpeechWarning; Silero's detector is trusted: nothing is decoded, and the warning says so.
    Iterate once; then `duration` is the source's length in seconds. `between_blocks(seconds read)` is called
    after each block of the source."""

    def __init__(self, recognizer, source: AudioSource | AudioStream, max_segment: float = MAX_SEGMENT,
                 between_blocks: Callable[[float], None] | None = None):
        self.source, self.max_segment, self.between_blocks = source, max_segment, between_blocks
        self.vad = VadOptions.of(recognizer.options)
        cfg, most = recognizer.config, recognizer.options.max_window
        self.window = None if cfg.model.ctc else min(window_seconds(cfg), most or float("inf"))
        self.duration = 0.0

    def __iter__(self) -> Iterator[Segment]:
        if isinstance(self.source, AudioStream):
            yield from self._segments(self.source)
            return
        with AudioStream(self.source) as audio:  # opened once, read again only for `pieces`
            yield from self._segments(audio)

    def _segments(self, audio: AudioStream) -> Iterator[Segment]:
        if self.vad.kind == "none":
            yield from self._pieces(audio)
            return
        segmenter = self.vad.segmenter(self.max_segment)
        merger = WindowMerger(self.window) if self.window else None

        def windows(segments: list[Segment]) -> list[Segment]:  # what the model reads: segments or windows of them
            return [w for s in segments for w in merger.push(s)] if merger else segments

        found = False
        for block in audio.blocks():
            for segment in windows(segmenter.push(block)):
                found = True
                yield segment
            if self.between_blocks is not None:
                self.between_blocks(segmenter.position)
        for segment in windows(segmenter.finish()) + (merger.finish() if merger else []):
            found = True
            yield segment
        self.duration = segmenter.samples / SAMPLE_RATE
        if found or segmenter.loudest <= SILENT_DB:
            return
        heard = (f"{self.duration:.1f} s of audio that is not silent (loudest frame: {segmenter.loudest:.0f} dBFS)")
        if self.vad.kind == "silero":  # a neural detector that hears no speech: trust it
            warnings.warn(NoSpeechWarning(audio.name, f"the voice detector (Silero) found no speech in {heard}; "
                                                      "nothing decoded (--vad none decodes all of it)"), stacklevel=5)
            return
        warnings.warn(NoSpeechWarning(audio.name, (
            f"the voice detector found no speech in {heard}; decoded all of it, in pieces of {self.max_segment:g} s")),
            stacklevel=5)
        yield from pieces(audio, self.max_segment)

    def _pieces(self, audio: AudioStream) -> Iterator[Segment]:
        """All of `audio` in consecutive pieces of a window (a model without a CTC head) or of `max_segment`."""
        seconds = 0
        for piece in pieces(audio, self.window or self.max_segment):
            seconds = piece.end
            yield piece
            if self.between_blocks is not None:
                self.between_blocks(seconds)
        self.duration = seconds


def window_seconds(cfg) -> float:
    """The longest audio an attention-only model reads at once: what its encoder's position table holds (Whisper's:
    30 s), else WHISPER_WINDOW."""
    if cfg.model.positions == "whisper":
        return cfg.model.max_source_positions * cfg.model.subsampling * cfg.features.frame_shift_ms / 1000
    return WHISPER_WINDOW


def _audio_end(segment: Segment) -> float:
    return segment.audio_start + segment.audio.size / SAMPLE_RATE


def _joined(a: Segment, b: Segment) -> Segment:
    """One segment from `a` to `b`: a's audio up to b's, silence (zeros) between them, which is a gap."""
    cut = round((b.audio_start - a.audio_start) * SAMPLE_RATE)
    head = a.audio[:cut] if cut <= len(a.audio) else np.concatenate([a.audio, np.zeros(cut - len(a.audio), np.float32)])
    gaps = a.gaps + (((a.end, b.start),) if b.start > a.end else ()) + b.gaps
    return Segment(a.start, b.end, np.concatenate([head, b.audio]), a.audio_start, gaps)


# --------------------------------------------------------------------------------------- decoding


def _decode_batch(recognizer, segments: list[Segment], speaker=None, word_timestamps: bool = False,
                  reread: bool = True) -> list[dict | None]:
    """Each segment's result dict, None where its text is empty. `speaker`: a CMVNAccumulator of the file's
    features so far, for a model.speaker_cmn model (else None). `word_timestamps`: also align each hypothesis to
    its CTC log-probs and give each segment its "words". A model timed by its attention (Whisper) reading windows
    of several of Silero's segments has its words timed anyway, and the speech a window skipped is decoded again,
    alone, and put in (`reread`; inference/reread.py)."""
    attention = not recognizer.config.model.ctc and hasattr(recognizer, "decode_waves_with_attention")
    rereading = reread and attention and any(s.gaps for s in segments) and _rereads(recognizer)
    timed = word_timestamps or rereading
    waves = [s.audio if s.audio.size >= MIN_DECODE else np.pad(s.audio, (0, MIN_DECODE - s.audio.size))
             for s in segments]
    if timed and attention:
        hyps, log_probs = recognizer.decode_waves_with_attention(waves, speaker)  # (alignment matrix, token probs)
    elif timed:
        hyps, log_probs = recognizer.decode_waves_with_ctc(waves, speaker)
    else:
        hyps, log_probs = recognizer.decode_waves(waves, speaker), [None] * len(waves)
    out: list[dict | None] = []
    for s, best, lp in zip(segments, hyps, log_probs):
        text = " ".join(recognizer.text(best.tokens).split())
        if not text:
            out.append(None)
            continue
        score = float(best.score)
        out.append({"start": round(s.start, 3), "end": round(s.end, 3), "text": text,
                    "score": score if math.isfinite(score) else None})
        if "temperature" in best.parts:  # sampled: the temperature fallback's try
            out[-1]["temperature"] = best.parts["temperature"]
        if "no_speech_prob" in best.parts:  # Whisper's silence check, or a no-speech head's (decode/fallback.py)
            out[-1]["no_speech_prob"] = round(best.parts["no_speech_prob"], 4)
        if "ctc_confidence" in best.parts:  # a CTC head's silence check (decode/fallback.py)
            out[-1]["ctc_confidence"] = round(best.parts["ctc_confidence"], 4)
        if timed:
            out[-1]["words"] = _words(recognizer, s, best.tokens, text, lp)
    release_free_memory()  # what this batch freed: a long file's peak stays about one batch's
    if rereading:
        out = _with_skipped_speech(recognizer, segments, out, speaker)
    if not word_timestamps:
        out = [r if r is None else {k: v for k, v in r.items() if k != "words"} for r in out]
    return out


def _rereads(recognizer) -> bool:
    """Whether the recognizer's voice detector is one whose skipped speech is read again (reread.DETECTORS)."""
    return VadOptions.of(recognizer.options).kind in reread.DETECTORS


def _with_skipped_speech(recognizer, windows: list[Segment], results: list[dict | None], speaker) -> list[dict | None]:
    """`results` of `windows` with the speech each window with text skipped decoded alone and put in where it
    lies (inference/reread.py)."""
    pad, size = recognizer.options.speech_pad, recognizer.options.batch_size
    stretches = [(k, reread.cut(window, start, end, pad)) for k, (window, result) in enumerate(zip(windows, results))
                 if result is not None and window.gaps for start, end in reread.skipped(window, result["words"])]
    found: dict[int, list[tuple[float, dict]]] = {}
    for b in range(0, len(stretches), size):
        batch = stretches[b:b + size]
        for (k, stretch), result in zip(batch, _decode_batch(recognizer, [s for _, s in batch], speaker, True,
                                                             reread=False)):
            if result is not None:
                found.setdefault(k, []).append((stretch.start, result))
    return [reread.spliced(r, found[k]) if k in found else r for k, r in enumerate(results)]


def _decode_conditioned(recognizer, batch: list[Segment], speaker, word_timestamps: bool,
                        before: list[str]) -> list[dict | None]:
    """`_decode_batch` of one window with the texts `before` it (after the options' initial prompt) as its prompt,
    as whisper's condition_on_previous_text; `before` gets its text, or is emptied after a window sampled hotter
    than 0.5 (whisper's reset: a prompt that led there would lead there again)."""
    prompt = " ".join([recognizer.options.initial_prompt, *before]).strip()
    with recognizer.prompted(prompt):  # the decoder keeps the last tokens that fit (WhisperTokenizer.start_ids)
        out = _decode_batch(recognizer, batch, speaker, word_timestamps)
    result = out[0]
    if result is not None and result.get("temperature", 0.0) > 0.5:
        before.clear()
    elif result is not None:
        before.append(result["text"])
    return out


def _words(recognizer, segment: Segment, tokens: list[int], text: str, alignment) -> list[dict]:
    """The words of a segment's `text`, timed by aligning its `tokens` to its CTC log-probs (T', V), or without a
    CTC head by the decoder's attention: `alignment` = (alignment matrix, token probabilities)."""
    from asr_transformer.decode.align import FrameClock, word_timestamps
    from asr_transformer.decode.attention_align import attention_word_timestamps

    clock = FrameClock.of(recognizer.config.features, recognizer.config.model.subsampling)
    where = dict(clock=clock, offset=segment.audio_start, bounds=(segment.start, segment.end))
    if isinstance(alignment, tuple):
        words = attention_word_timestamps(*alignment, tokens, recognizer.tokenizer.word_pieces(tokens), text.split(),
                                          **where)
    else:
        words = word_timestamps(alignment, tokens, recognizer.tokenizer.pieces(tokens), text.split(), **where)
    return out_of_gaps(words, segment.gaps)


def out_of_gaps(words: list[dict], gaps: tuple[tuple[float, float], ...]) -> list[dict]:
    """`words` (dicts with "start" and "end", in order) with each word that starts inside a gap (a stretch the voice
    detector found no speech in) moved out of it, to the nearer of its edges: a window's attention times the last
    words before a pause late, 1-2 s into it, and the first word after one early (docs/experiments/kathleen.md), so
    a word in the gap's first half is put back at its start and one in its second half begins at its end. A word
    that runs into a gap ends where the gap starts; the order of the words is kept."""
    for gap_start, gap_end in gaps:
        for word in words:
            if gap_start < word["start"] < gap_end and word["start"] - gap_start > gap_end - word["start"]:
                word["start"], word["end"] = round(gap_end, 3), max(word["end"], round(gap_end, 3))
            elif gap_start < word["start"] < gap_end:
                word["start"] = word["end"] = round(gap_start, 3)
            elif word["start"] <= gap_start < word["end"]:
                word["end"] = round(gap_start, 3)
    for before, after in zip(words, words[1:]):  # a word moved back never starts before the one it followed
        after["start"] = max(after["start"], before["start"])
        after["end"] = max(after["end"], after["start"])
    return words


def transcribe(recognizer, audio_source: AudioSource, max_segment: float = MAX_SEGMENT,
               progress: ProgressCallback | None = None, speaker=None, word_timestamps: bool = False) -> dict:
    """Transcribe one audio file of any length.

    Args:
        recognizer: a `Recognizer`, or an `ExportedRecognizer` (its options: mode, beam, LMs;
            `options.batch_size` segments at a time).
        audio_source: a path, the bytes of an audio file, or a 1-D float32 array at 16 kHz.
        max_segment: longest segment in seconds (see the module docstring for how audio is split).
        progress: called as progress(seconds_done, total_seconds_or_None, segments_decoded) after each batch.
        speaker: for a model.speaker_cmn model, a `CMVNAccumulator` of the speaker's features so far, which
            this call updates (to carry one speaker's mean across files); default: a fresh one, so the file is one
            speaker. Each batch is normalized by the mean of the speaker's segments decoded so far, its own
            included (a lone file of one segment: that segment's own mean).
        word_timestamps: time each word too (decode/align.py): the hypothesis is aligned to the segment's
            CTC log-probs (Viterbi; the encoder runs a second time for them), so the words are exactly those of
            the segment's text. Where it cannot be aligned (more tokens than the frames allow), its words share
            the segment evenly, with probability None.
    Returns:
        {"text": all segment texts joined by spaces, "segments": [{"start", "end", "text", "score"}],
         "duration": seconds}; times in seconds relative to the file, score = the hypothesis' log-prob
        score (None when not finite). Segments whose decoded text is empty are left out, with one
        EmptySegmentWarning that lists them. Audio in which the energy detector finds no speech although it is not
        silent is all decoded, in `pieces`, with a NoSpeechWarning (`SegmentStream`). With
        `word_timestamps` each segment also has "words": [{"word", "start", "end", "probability"}] (whisper's
        layout; probability: the mean CTC posterior of the word's tokens on their frames).
    Raises:
        AudioError naming the source when it cannot be read.
    """
    cfg = recognizer.config
    # whisper's condition_on_previous_text: each window's prompt is the text before it, so one window at a time
    conditioned = recognizer.options.condition_on_previous_text and getattr(recognizer, "reads_prompt", False)
    batch_size = 1 if conditioned else recognizer.options.batch_size
    results: list[dict] = []
    decoded = 0
    if not cfg.model.speaker_cmn:
        speaker = None
    elif speaker is None:  # Kaldi's online CMN: the mean over the speaker's speech decoded so far
        from asr_transformer.data.features import CMVNAccumulator
        speaker = CMVNAccumulator(cfg.features.num_mel_bins)

    def decode(batch: list[Segment]) -> None:
        nonlocal decoded
        for segment, result in zip(batch, _decode_conditioned(recognizer, batch, speaker, word_timestamps, before)
                                   if conditioned else _decode_batch(recognizer, batch, speaker, word_timestamps)):
            if result is None:
                empty.append((segment.start, segment.end))
            else:
                results.append(result)
        decoded += len(batch)
        if progress is not None:
            progress(batch[-1].end, total, decoded)

    def between_blocks(position: float) -> None:
        if not pending and progress is not None:
            progress(position, total, decoded)

    pending: list[Segment] = []
    empty: list[tuple[float, float]] = []  # (start, end) of segments that gave no text
    before: list[str] = []  # conditioned: the texts the next window reads as its prompt
    with AudioStream(audio_source) as audio:  # the file is opened once
        total = audio.duration
        segments = SegmentStream(recognizer, audio, max_segment, between_blocks)
        for segment in segments:
            pending.append(segment)
            if len(pending) >= batch_size:
                decode(pending)
                pending = []
    if pending:
        decode(pending)
    if empty:
        warnings.warn(EmptySegmentWarning(audio.name, empty), stacklevel=2)
    duration = segments.duration
    if progress is not None:
        progress(duration, total if total is not None else duration, decoded)
    return _result(results, duration)


def _result(segments: list[dict], duration: float) -> dict:
    """A file's transcript: its segments' texts joined, the segments, its length."""
    return {"text": " ".join(s["text"] for s in segments), "segments": segments, "duration": duration}


def transcribe_many(recognizer, sources: list[AudioSource], word_timestamps: bool = False,
                    max_segment: float = MAX_SEGMENT) -> list[dict]:
    """Several files at once (a server's concurrent requests): their segments decoded together in batches of
    `options.batch_size`, similar lengths side by side, then given back to their files → one `transcribe` result
    per source, the same words as transcribing each alone. Each file's audio is held whole, so keep them short; a
    model.speaker_cmn model transcribes each file alone (its speaker is the file)."""
    if recognizer.config.model.speaker_cmn:
        return [transcribe(recognizer, s, max_segment, word_timestamps=word_timestamps) for s in sources]
    streams = [SegmentStream(recognizer, s, max_segment) for s in sources]
    owned = [(i, segment) for i, stream in enumerate(streams) for segment in stream]
    order = sorted(range(len(owned)), key=lambda k: owned[k][1].audio.size)
    size = recognizer.options.batch_size
    decoded: list[dict | None] = [None] * len(owned)
    for b in range(0, len(order), size):
        batch = order[b:b + size]
        for k, result in zip(batch, _decode_batch(recognizer, [owned[k][1] for k in batch], None, word_timestamps)):
            decoded[k] = result
    results = [[] for _ in sources]
    for (i, _), result in zip(owned, decoded):
        if result is not None:
            results[i].append(result)
    return [_result(rs, stream.duration) for rs, stream in zip(results, streams)]
