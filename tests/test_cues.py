"""Subtitle cues (inference/cues.py): timed words grouped into cues that hold their lines, in order, never
crossing a segment, breaking at sentence ends and pauses."""

import pytest

from asr_transformer.inference.cues import Cue, CueOptions, cues, wrap


def _segment(words: list[tuple[str, float, float]]) -> dict:
    return {"start": words[0][1], "end": words[-1][2], "text": " ".join(w for w, _, _ in words),
            "words": [{"word": w, "start": a, "end": b, "probability": 0.9} for w, a, b in words]}


SPOKEN = "and so my fellow americans ask not what your country can do for you ask what you can do".split()
RESULT = {"segments": [_segment([(w, 0.3 * i, 0.3 * i + 0.25) for i, w in enumerate(SPOKEN)]),
                       _segment([("again", 30.0, 30.4), ("later", 30.5, 30.9)])]}


@pytest.mark.parametrize("width, count", [(42, 2), (20, 1), (12, 3), (3, 1)])
def test_cues_hold_their_lines_and_keep_every_word_in_order(width, count):
    out = cues(RESULT, CueOptions(max_line_width=width, max_line_count=count))
    assert " ".join(" ".join(c.lines) for c in out).split() == SPOKEN + ["again", "later"]
    for cue in out:
        assert len(cue.lines) <= count
        assert all(len(line) <= width or " " not in line for line in cue.lines)  # a long word alone may pass
    assert all(a.end <= b.start for a, b in zip(out, out[1:]))
    second = [c for c in out if c.start >= 30.0]  # the second segment's cues: none reaches into the first
    assert " ".join(" ".join(c.lines) for c in second) == "again later"
    assert second[0].start == 30.0 and second[-1].end == 30.9
    # greedy: a cue ends only where its next word would not fit
    for a, b in zip(out, out[1:]):
        if b.start < 30.0:
            assert len(wrap(list(" ".join(a.lines).split()) + [b.lines[0].split()[0]], width)) > count


def test_the_default_cue_is_two_lines_of_42_characters():
    (first, second, last) = cues(RESULT)
    assert first.lines == ("and so my fellow americans ask not what", "your country can do for you ask what you")
    assert (first.start, first.end) == (0.0, 0.3 * 16 + 0.25)
    assert second.lines == ("can do",) and last == Cue(30.0, 30.9, ("again later",)) and last.lines == ("again later",)


def test_a_cue_ends_at_a_sentence_end_a_pause_or_its_word_limit():
    result = {"segments": [_segment([("Ask", 0.0, 0.3), ("not!", 0.4, 0.6), ("What", 0.7, 0.9), ("your", 1.0, 1.2),
                                     ("country", 2.5, 2.9), ("can", 3.0, 3.2)])]}
    assert [c.lines for c in cues(result)] == [("Ask not!",), ("What your",), ("country can",)]
    assert [c.lines for c in cues(result, CueOptions(max_words_per_cue=1))] == [
        (w,) for w in ("Ask", "not!", "What", "your", "country", "can")]
    assert [c.lines for c in cues(result, CueOptions(max_gap=5.0))] == [("Ask not!",), ("What your country can",)]


def test_a_segment_without_word_times_is_one_cue_in_lines():
    result = {"segments": [{"start": 1.0, "end": 9.0, "text": " ".join(SPOKEN)}]}
    (cue,) = cues(result, CueOptions(max_line_width=30))
    assert (cue.start, cue.end) == (1.0, 9.0)
    assert " ".join(cue.lines).split() == SPOKEN and all(len(line) <= 30 for line in cue.lines)


@pytest.mark.parametrize("field, value", [("max_line_width", 0), ("max_line_count", -1), ("max_words_per_cue", 0),
                                          ("max_line_width", 2.5), ("max_gap", -1.0)])
def test_bad_cue_options_name_themselves(field, value):
    with pytest.raises(ValueError, match=field):
        CueOptions(**{field: value})
