import json
import re

import pytest

from asr_transformer.inference.cues import CueOptions
from asr_transformer.inference.writers import FORMATS, format_result, format_timestamp, write_result

RESULT = {
    "text": "Hello, world! Tom & Jerry <3 --> the end",
    "language": "en",
    "segments": [
        {"start": 0.0, "end": 1.5, "text": " Hello, world!", "score": -0.25},
        {"start": 61.0404, "end": 62.9996, "text": "Tom & Jerry <3", "score": -1.5},
        {"start": 3725.5, "end": 3727.001, "text": "--> the\nend"},  # over an hour; no score
    ],
}

TIME = r"(\d{2,}):(\d{2}):(\d{2})[,.](\d{3})"


def _seconds(h, m, s, ms) -> float:
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def parse_cues(text: str, marker: str) -> list[tuple[float, float, str]]:
    """A small SRT/VTT reader: blank-line separated blocks, a timing line, then text lines."""
    cues = []
    for block in text.strip("\n").split("\n\n"):
        lines = block.split("\n")
        timing = next(i for i, line in enumerate(lines) if "-->" in line)
        m = re.fullmatch(TIME.replace("[,.]", re.escape(marker)) + " --> " + TIME.replace("[,.]", re.escape(marker)),
                         lines[timing])
        assert m, lines[timing]
        g = m.groups()
        cues.append((_seconds(*g[:4]), _seconds(*g[4:]), "\n".join(lines[timing + 1:])))
    return cues


@pytest.mark.parametrize(
    "seconds, expected",
    [(0, "00:00:00.000"), (1.5, "00:00:01.500"), (59.9996, "00:01:00.000"),
     (3725.5, "01:02:05.500"), (360000.001, "100:00:00.001")],
)
def test_format_timestamp(seconds, expected):
    assert format_timestamp(seconds) == expected
    assert format_timestamp(seconds, ",") == expected.replace(".", ",")


def test_negative_timestamp_rejected():
    with pytest.raises(ValueError):
        format_timestamp(-0.1)


def test_srt_parses_back():
    text = format_result(RESULT, "srt")
    blocks = text.strip("\n").split("\n\n")
    assert [b.split("\n")[0] for b in blocks] == ["1", "2", "3"]  # 1-based indices
    cues = parse_cues(text, ",")
    assert [(round(a * 1000), round(b * 1000)) for a, b, _ in cues] == [
        (0, 1500), (61040, 63000), (3725500, 3727001)]
    assert [t for _, _, t in cues] == ["Hello, world!", "Tom & Jerry <3", "-> the end"]
    assert "01:02:05,500 --> 01:02:07,001" in text


def test_vtt_parses_back():
    text = format_result(RESULT, "vtt")
    assert text.startswith("WEBVTT\n\n")
    cues = parse_cues(text[len("WEBVTT\n\n"):], ".")
    assert [(round(a * 1000), round(b * 1000)) for a, b, _ in cues] == [
        (0, 1500), (61040, 63000), (3725500, 3727001)]
    assert [t for _, _, t in cues] == ["Hello, world!", "Tom &amp; Jerry &lt;3", "-&gt; the end"]


def test_tsv_milliseconds():
    lines = format_result(RESULT, "tsv").splitlines()
    assert lines[0] == "start\tend\ttext"
    rows = [line.split("\t") for line in lines[1:]]
    assert rows == [["0", "1500", "Hello, world!"], ["61040", "63000", "Tom & Jerry <3"],
                    ["3725500", "3727001", "--> the end"]]


def test_json_loads():
    d = json.loads(format_result(RESULT, "json"))
    assert d["text"] == RESULT["text"] and d["language"] == "en"
    assert [s["id"] for s in d["segments"]] == [0, 1, 2]
    assert d["segments"][1] == {"id": 1, "start": 61.04, "end": 63.0, "text": "Tom & Jerry <3", "score": -1.5}
    assert "score" not in d["segments"][2]


def test_txt_one_line_per_segment():
    assert format_result(RESULT, "txt") == "Hello, world!\nTom & Jerry <3\n--> the end\n"
    assert format_result({"text": " just text ", "segments": []}, "txt") == "just text\n"


def test_write_result_all_formats(tmp_path):
    paths = write_result(RESULT, tmp_path / "out", "talk", "all")
    assert [p.name for p in paths] == [f"talk.{f}" for f in FORMATS]
    for p, fmt in zip(paths, FORMATS):
        assert p.read_text(encoding="utf-8") == format_result(RESULT, fmt)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)


def test_write_result_some_formats_and_unknown(tmp_path):
    assert [p.name for p in write_result(RESULT, tmp_path, "a", ["srt", "txt"])] == ["a.srt", "a.txt"]
    assert [p.name for p in write_result(RESULT, tmp_path, "b", "vtt")] == ["b.vtt"]
    with pytest.raises(ValueError, match="unknown output format 'doc'"):
        write_result(RESULT, tmp_path, "c", ["txt", "doc"])
    assert not (tmp_path / "c.txt").exists()  # nothing written when a format is wrong


def test_non_ascii_text_written_as_utf8(tmp_path):
    result = {"text": "café ♪ 東京", "segments": [{"start": 0, "end": 2, "text": "café ♪ 東京"}]}
    (path,) = write_result(result, tmp_path, "x", ["srt"])
    assert parse_cues(path.read_text(encoding="utf-8"), ",") == [(0.0, 2.0, "café ♪ 東京")]
    assert json.loads(format_result(result, "json"))["text"] == "café ♪ 東京"


WORDS = {
    "text": "Hello world Tom",
    "segments": [
        {"start": 0.0, "end": 1.5, "text": "Hello world", "score": -0.25,
         "words": [{"word": "Hello", "start": 0.1, "end": 0.6, "probability": 0.91234},
                   {"word": "world", "start": 0.8, "end": 1.4, "probability": None}]},
        {"start": 61.0, "end": 62.0, "text": "Tom", "words": [{"word": "Tom", "start": 61.2, "end": 61.7,
                                                               "probability": 0.5}]},
    ],
}


def test_word_timestamps_cut_segments_into_cues_and_rows():
    """Timed words: cues of a few words each (here each segment fits one cue), or one per word when asked."""
    for options, spans in ((CueOptions(), [(100, 1400, "Hello world"), (61200, 61700, "Tom")]),
                           (CueOptions(max_words_per_cue=1),
                            [(100, 600, "Hello"), (800, 1400, "world"), (61200, 61700, "Tom")])):
        srt = format_result(WORDS, "srt", options)
        assert [b.split("\n")[0] for b in srt.strip("\n").split("\n\n")] == [str(i + 1) for i in range(len(spans))]
        assert [(round(a * 1000), round(b * 1000), t) for a, b, t in parse_cues(srt, ",")] == spans
        vtt = format_result(WORDS, "vtt", options)
        assert [(round(a * 1000), round(b * 1000), t)
                for a, b, t in parse_cues(vtt[len("WEBVTT\n\n"):], ".")] == spans
        rows = [line.split("\t") for line in format_result(WORDS, "tsv", options).splitlines()]
        assert rows == [["start", "end", "text"], *[[str(a), str(b), t] for a, b, t in spans]]
    assert format_result(WORDS, "txt") == "Hello world\nTom\n"  # txt: a line per segment either way


def test_a_cue_of_two_lines_is_written_on_two_lines():
    words = [{"word": w, "start": i * 0.5, "end": i * 0.5 + 0.4} for i, w in enumerate("one two three four".split())]
    result = {"text": "one two three four", "segments": [{"start": 0.0, "end": 2.0, "text": "one two three four",
                                                          "words": words}]}
    options = CueOptions(max_line_width=8)
    assert parse_cues(format_result(result, "srt", options), ",") == [(0.0, 1.4, "one two\nthree"), (1.5, 1.9, "four")]
    assert format_result(result, "tsv", options).splitlines()[1:] == ["0\t1400\tone two three", "1500\t1900\tfour"]


def test_json_keeps_the_words_inside_each_segment():
    d = json.loads(format_result(WORDS, "json"))
    assert d["segments"][0]["words"] == [{"word": "Hello", "start": 0.1, "end": 0.6, "probability": 0.9123},
                                         {"word": "world", "start": 0.8, "end": 1.4, "probability": None}]
    assert d["segments"][1]["words"] == [{"word": "Tom", "start": 61.2, "end": 61.7, "probability": 0.5}]
    assert "words" not in json.loads(format_result(RESULT, "json"))["segments"][0]
