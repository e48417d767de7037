"""Transcript writers: txt, json, srt, vtt, tsv, as Whisper writes them.

A result is ``{"text": str, "segments": [{"start": s, "end": s, "text": str, "score"?: float, "words"?: [...]}],
"language"?: str}`` with times in seconds. Segments with word timestamps (`asr transcribe --word-timestamps`)
carry ``"words": [{"word", "start", "end", "probability"}]``: json keeps them inside each segment (Whisper's
layout); srt, vtt and tsv then cut each segment into cues of a few words (`cues.py`: two lines of at most 42
characters unless `CueOptions` say otherwise; Whisper's `--max_line_width` and `--max_words_per_line`); txt is
the same either way.

A decoded manifest (`asr decode`) is written by `write_decoding`, into folders `check_writable` checked before the
decoding (decode_inputs.py checks the manifest and applies the policy for utterances that cannot be decoded).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from asr_transformer.errors import UserError
from asr_transformer.fileio import atomic_open
from asr_transformer.inference.cues import CueOptions, cues

FORMATS = ("txt", "json", "srt", "vtt", "tsv")


def format_timestamp(seconds: float, decimal_marker: str = ".") -> str:
    """``HH:MM:SS.mmm`` (hours always shown, and may exceed 99); e.g. 3725.5 -> 01:02:05.500."""
    if seconds < 0:
        raise ValueError(f"timestamp must be non-negative, got {seconds}")
    ms = round(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def _cue_text(text: str) -> str:
    """One line of subtitle text: no line breaks (a blank line ends a cue) and no '-->'."""
    return " ".join(text.split()).replace("-->", "->")


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_txt(result: dict) -> str:
    """One line per segment (the whole text when there are no segments)."""
    segments = result.get("segments") or []
    texts = [s["text"] for s in segments] if segments else [result.get("text", "")]
    lines = [" ".join(t.split()) for t in texts]
    return "\n".join(lines) + "\n"


def _json_word(word: dict) -> dict:
    p = word.get("probability")
    return {"word": word["word"], "start": round(float(word["start"]), 3), "end": round(float(word["end"]), 3),
            "probability": None if p is None else round(float(p), 4)}


def to_json(result: dict) -> str:
    """Text, language and segments (id, start, end, text, score, and words where timed) as indented JSON."""
    out: dict = {"text": result.get("text", "")}
    if result.get("language") is not None:
        out["language"] = result["language"]
    out["segments"] = []
    for i, s in enumerate(result.get("segments") or []):
        seg = {"id": i, "start": round(float(s["start"]), 3), "end": round(float(s["end"]), 3), "text": s["text"]}
        if s.get("score") is not None:
            seg["score"] = float(s["score"])
        if "words" in s:
            seg["words"] = [_json_word(w) for w in s["words"]]
        out["segments"].append(seg)
    return json.dumps(out, ensure_ascii=False, indent=2) + "\n"


def to_srt(result: dict, cue_options: CueOptions = CueOptions()) -> str:
    """SubRip: 1-based index, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, the cue's lines, blank line; a cue per segment
    (cut into cues of a few words where its words are timed)."""
    blocks = []
    for i, cue in enumerate(cues(result, cue_options), start=1):
        text = "\n".join(_cue_text(line) for line in cue.lines)
        blocks.append(f"{i}\n{format_timestamp(cue.start, ',')} --> {format_timestamp(cue.end, ',')}\n{text}\n\n")
    return "".join(blocks)


def to_vtt(result: dict, cue_options: CueOptions = CueOptions()) -> str:
    """WebVTT: ``WEBVTT`` header, then ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` cues (text escaped); cues as `to_srt`."""
    blocks = ["WEBVTT\n\n"]
    for cue in cues(result, cue_options):
        text = "\n".join(_vtt_escape(_cue_text(line)) for line in cue.lines)
        blocks.append(f"{format_timestamp(cue.start)} --> {format_timestamp(cue.end)}\n{text}\n\n")
    return "".join(blocks)


def to_tsv(result: dict, cue_options: CueOptions = CueOptions()) -> str:
    """``start<TAB>end<TAB>text`` with times in integer milliseconds, as Whisper writes; a row per cue (`to_srt`)."""
    lines = ["start\tend\ttext"]
    for cue in cues(result, cue_options):
        text = " ".join(" ".join(cue.lines).split())  # tabs and newlines would break the columns
        lines.append(f"{round(cue.start * 1000)}\t{round(cue.end * 1000)}\t{text}")
    return "\n".join(lines) + "\n"


WRITERS: dict[str, Callable[[dict], str]] = {
    "txt": to_txt,
    "json": to_json,
    "srt": to_srt,
    "vtt": to_vtt,
    "tsv": to_tsv,
}


SUBTITLES = ("srt", "vtt", "tsv")  # the formats written as cues


def format_result(result: dict, fmt: str, cue_options: CueOptions = CueOptions()) -> str:
    """The transcript `result` as a string in format `fmt` (one of `FORMATS`); subtitles cut by `cue_options`."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown output format {fmt!r}; choose from {', '.join(FORMATS)} or 'all'")
    return WRITERS[fmt](result, cue_options) if fmt in SUBTITLES else WRITERS[fmt](result)


def write_result(
    result: dict, out_dir: str | os.PathLike, basename: str, formats: list[str] | str = "all",
    cue_options: CueOptions = CueOptions(),
) -> list[Path]:
    """Write ``<out_dir>/<basename>.<fmt>`` for each format (or "all"), atomically; return the paths."""
    if isinstance(formats, str):
        formats = list(FORMATS) if formats == "all" else [formats]
    texts = {fmt: format_result(result, fmt, cue_options) for fmt in formats}  # validate all before writing
    paths = []
    for fmt, text in texts.items():
        path = Path(out_dir) / f"{basename}.{fmt}"
        with atomic_open(path) as f:
            f.write(text)
        paths.append(path)
    return paths


def write_hypotheses(folder: str | os.PathLike, utts, nbests: list, text: Callable[[list[int]], str]) -> None:
    """A decoded manifest's results: `hyp.jsonl` ({"id", "text", "ref", "tokens", "score"}, and "nbest" where an
    utterance has several hypotheses) in manifest order, and a Kaldi `text` file (`<id> <hyp>`, sorted by id),
    atomically. nbests: per utterance its hypotheses (`decode.Hypothesis`), best first; text: tokens → text."""
    records = []
    for u, hyps in zip(utts, nbests):
        rec = {"id": u.id, "text": text(hyps[0].tokens), "ref": u.text, "tokens": hyps[0].tokens, "score": hyps[0].score}
        if len(hyps) > 1:
            rec["nbest"] = [{"text": text(h.tokens), "tokens": h.tokens, "score": h.score} for h in hyps]
        records.append(rec)
    folder = Path(folder)
    with atomic_open(folder / "hyp.jsonl") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    with atomic_open(folder / "text") as f:
        for rec in sorted(records, key=lambda r: r["id"]):
            f.write(f"{rec['id']} {rec['text']}".rstrip() + "\n")


def write_decoding(folder: str | os.PathLike, utts, nbests: list, text: Callable[[list[int]], str],
                   seconds: dict, about: dict, normalizer=None, score: bool = True) -> dict:
    """All a decoding of a manifest in one mode writes into `folder`: `write_hypotheses`, `rtf.json` (utterances,
    audio, decoding and feature seconds and their real-time factors, then `about`: what decided the hypotheses)
    and, with `score`, the scoring reports (whose summary table is printed), by the tokenizer's normalizer and by
    Whisper's English normalizer (`result_whisper.json`: words, not spelling).

    seconds: {"audio", "decode", "features"}. → {"dir", "rtf", "decode_seconds", "audio_seconds",
    ["wer", "cer", "wer_whisper", "cer_whisper"]}.
    """
    from asr_transformer.fileio import write_json

    audio, decode, features = (seconds[k] for k in ("audio", "decode", "features"))
    rtf = decode / max(audio, 1e-9)
    write_hypotheses(folder, utts, nbests, text)
    write_json(Path(folder) / "rtf.json", {
        "mode": about.get("mode"), "utterances": len(utts), "audio_seconds": round(audio, 3),
        "decode_seconds": round(decode, 6), "rtf": rtf, "feature_seconds": round(features, 6),
        "feature_rtf": features / max(audio, 1e-9), **about})
    summary = {"dir": str(folder), "rtf": rtf, "decode_seconds": decode, "audio_seconds": audio}
    if score:
        from asr_transformer.scoring import score_decoding, whisper_line

        report, whisper = score_decoding(folder, normalizer)
        summary.update(wer=report.wer, cer=report.cer, wer_whisper=whisper.wer, cer_whisper=whisper.cer)
        print(report.summary_table(title=f"{about.get('mode')}  {folder}"))
        print(whisper_line(whisper))
    return summary


# ------------------------------------------------------------------------------ the inputs of a decoding

class OutputError(UserError):
    """An output folder that cannot be written; the message names it and says what to do."""


def check_writable(folder: str | os.PathLike) -> None:
    """Raise OutputError unless `folder` is, or can be made, a folder this process can write in. Creates nothing:
    the nearest existing folder on its path is tried with a temp file that vanishes at once."""
    folder = Path(folder).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"{folder}: cannot write there: {existing} is a file, not a folder; "
                          f"choose another output folder")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise OutputError(f"{folder}: cannot write there ({existing}: {e.strerror}); "
                          f"choose a folder you can write to") from None
