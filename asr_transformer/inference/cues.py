"""Subtitle cues from a transcript: timed words grouped into cues of at most a few lines, as subtitles are read.

A segment without word times is one cue (its text wrapped into lines of `max_line_width`). A segment with word
times (`asr transcribe --word-timestamps`, or any subtitle output of a model that reads 30-s windows) is cut
into cues of consecutive words. A cue never crosses a segment, and a new one starts before a word when

- the cue's words, wrapped at `max_line_width` characters, would need more than `max_line_count` lines;
- the cue already holds `max_words_per_cue` words (1: a cue per word);
- the word before it ends a sentence (`.`, `?`, `!`), or a pause of more than `max_gap` seconds comes before it.

A cue runs from its first word's start to its last word's end. Defaults follow common subtitle practice: two
lines of at most 42 characters.
"""

from __future__ import annotations

from dataclasses import dataclass

SENTENCE_ENDS = (".", "?", "!", "…")


@dataclass(frozen=True)
class CueOptions:
    """How long a cue may get (see the module docstring). max_words_per_cue None: no limit but the lines."""

    max_line_width: int = 42
    max_line_count: int = 2
    max_words_per_cue: int | None = None
    max_gap: float = 1.0

    def __post_init__(self):
        for name in ("max_line_width", "max_line_count", "max_words_per_cue"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number ≥ 1, got {value!r}")
        if not self.max_gap >= 0:
            raise ValueError(f"max_gap must be ≥ 0 seconds, got {self.max_gap!r}")


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    lines: tuple[str, ...]


def wrap(words: list[str], width: int) -> list[str]:
    """`words` in lines of at most `width` characters (a longer word alone on its line)."""
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def cues(result: dict, options: CueOptions = CueOptions()) -> list[Cue]:
    """The cues of a transcript (the writers' result dict), in order."""
    out: list[Cue] = []
    for segment in result.get("segments") or []:
        words = [w for w in segment.get("words") or [] if w["word"].strip()]
        if not words:
            out.append(Cue(segment["start"], segment["end"],
                           tuple(wrap(segment["text"].split(), options.max_line_width))))
            continue
        group: list[dict] = []
        for word in words:
            if group and _starts_a_cue(group, word, options):
                out.append(_cue(group, options))
                group = []
            group.append(word)
        out.append(_cue(group, options))
    return out


def _starts_a_cue(group: list[dict], word: dict, options: CueOptions) -> bool:
    last = group[-1]
    if options.max_words_per_cue is not None and len(group) >= options.max_words_per_cue:
        return True
    if last["word"].strip().endswith(SENTENCE_ENDS) or word["start"] - last["end"] > options.max_gap:
        return True
    texts = [w["word"].strip() for w in group + [word]]
    return len(wrap(texts, options.max_line_width)) > options.max_line_count


def _cue(group: list[dict], options: CueOptions) -> Cue:
    lines = wrap([w["word"].strip() for w in group], options.max_line_width)
    return Cue(group[0]["start"], max(group[-1]["end"], group[0]["start"]), tuple(lines))


def needs_word_times(recognizer) -> bool:
    """Whether subtitles from `recognizer` need its words timed to be cut into cues: a model without a CTC head
    (Whisper) reads 30-s windows, each one segment, too long for a cue. False where it cannot time them (an ONNX
    export), which then gives a cue per window."""
    return not recognizer.config.model.ctc and hasattr(recognizer, "decode_waves_with_attention")
