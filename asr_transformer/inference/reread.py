"""Speech a Whisper window skipped, read again.

A window holds several of the voice detector's segments, and a Whisper model reading it can leave one out: it
writes the sentences around it and none of its words (docs/experiments/kathleen.md: the long recordings' deleted
words). The decoder's cross-attention times every word it wrote (decode/attention_align.py), so a stretch of the
window's speech with no word timed in it, holding a part of at least MIN_SKIPPED seconds without a pause, was
skipped: it is cut out of the window, decoded alone, and its words are put in where it lies. Shorter stretches are
left as they are: bursts of noise the detector took for speech are that short (0.3-0.7 s on the Kathleen recipe's
long recordings, several in a row inside one noise), and give no words rightly. A model package does this in
`transcribe` with Silero's detector (DETECTORS); an export (ONNX, no attention weights to time words by) reads
its windows as they are.
"""

from __future__ import annotations

from asr_transformer.data.audio import SAMPLE_RATE
from asr_transformer.inference.segmenter import Segment

MIN_SKIPPED = 1.0  # seconds of speech without a pause and without a word timed in it: decoded again, alone
# the voice detectors whose segments are read again: the energy detector's are often noise (its stretches with no
# word are mostly the noises between the speech), which a Whisper model read alone writes words for
DETECTORS = ("silero",)


def speech_parts(window: Segment) -> list[tuple[float, float]]:
    """The stretches of speech between a window's gaps, (start, end) in seconds, in order."""
    parts, start = [], window.start
    for gap_start, gap_end in window.gaps:
        parts.append((start, gap_start))
        start = gap_end
    return parts + [(start, window.end)]


def skipped(window: Segment, words: list[dict]) -> list[tuple[float, float]]:
    """Runs of consecutive speech parts of `window` in which none of `words` (dicts with "start", "end") lies,
    where one part at least is MIN_SKIPPED seconds long → (start, end) of each run."""
    runs: list[list[tuple[float, float]]] = [[]]
    for start, end in speech_parts(window):
        if any(w["end"] > start and w["start"] < end for w in words):
            runs.append([])
        else:
            runs[-1].append((start, end))
    return [(run[0][0], run[-1][1]) for run in runs if run and max(b - a for a, b in run) >= MIN_SKIPPED]


def cut(window: Segment, start: float, end: float, pad: float) -> Segment:
    """The stretch `start`–`end` of `window` as a segment of its own, with up to `pad` seconds of the window's
    audio either side, and the window's gaps inside it."""
    audio_start = max(window.audio_start, start - pad)
    first = round((audio_start - window.audio_start) * SAMPLE_RATE)
    last = round((end + pad - window.audio_start) * SAMPLE_RATE)
    gaps = tuple(g for g in window.gaps if start <= g[0] and g[1] <= end)
    return Segment(start, end, window.audio[first:last], audio_start, gaps)


def spliced(result: dict, stretches: list[tuple[float, dict]]) -> dict:
    """A window's result (its "text" and timed "words", one per word of the text) with the results of its skipped
    stretches, (start, result) each in order, put in where they lie: the words of each go before the first of the
    window's words that starts after it, and the text is the words joined."""
    words = list(result["words"])
    for start, extra in reversed(stretches):
        at = next((i for i, w in enumerate(words) if w["start"] >= start), len(words))
        words[at:at] = extra["words"]
    return {**result, "text": " ".join(w["word"] for w in words), "words": words}
