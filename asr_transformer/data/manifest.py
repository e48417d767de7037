"""JSONL manifests: one utterance per line.

The first line is a header ``{"format": "asr-manifest", "version": 1}``; every other line is
an utterance record::

    {"id": "spk1-utt3", "audio": "/abs/path.wav", "duration": 2.31, "text": "hello world",
     "speaker": "spk1", "offset": 0.0}

``offset`` (seconds into ``audio``) is present only for segments of longer files; ``duration``
is then the segment's length. Reading validates every record and names file, line and field of
the first bad one; `read_manifest(path, errors=[])` collects every bad line instead, and
`check_manifest` also reads each utterance's audio header (what `asr decode` checks before decoding).

NeMo's manifests are read too: a line with ``audio_filepath``, ``duration`` and ``text`` (optional
``offset``, ``speaker`` or ``spk``, ``id``) is taken as the record of those fields. A relative
``audio_filepath`` is taken relative to the manifest's folder when the file is there (as NeMo
does), else as written. A line without ``id`` gets one from its file name (``talk`` for
``/x/talk.wav``, ``talk-0012500`` for its segment at offset 12.5 s), made unique with ``-2``, ``-3``
... when two files or segments would share it. ``write_manifest(..., fmt="nemo")`` writes NeMo's
lines (with ``id``, which NeMo ignores) and no header.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from asr_transformer.fileio import atomic_open
from asr_transformer.errors import UserError

FORMAT = "asr-manifest"
VERSION = 1
FORMATS = ("jsonl", "nemo")  # what write_manifest writes: this toolkit's manifests, NeMo's
UNKNOWN_SPEAKER = "unknown"  # an utterance without a speaker label


class ManifestError(UserError, ValueError):
    """A manifest line that cannot be used; the message names file, line and field."""


class ManifestVersionError(ManifestError):
    """A manifest written by a newer toolkit: none of its lines can be trusted."""


@dataclass
class Utterance:
    id: str
    audio: str
    duration: float
    text: str
    speaker: str = UNKNOWN_SPEAKER
    offset: float | None = None

    def to_json(self) -> dict:
        record = asdict(self)
        if self.offset is None:
            del record["offset"]
        return record

    def to_nemo(self) -> dict:
        """NeMo's manifest record (offset only for segments, speaker only when known), with the id."""
        record: dict = {"audio_filepath": self.audio, "duration": self.duration, "text": self.text}
        if self.offset is not None:
            record["offset"] = self.offset
        if self.speaker != UNKNOWN_SPEAKER:
            record["speaker"] = self.speaker
        record["id"] = self.id
        return record


_REQUIRED = {"id": str, "audio": str, "duration": (int, float), "text": str}
_OPTIONAL = {"speaker": str, "offset": (int, float)}


def _parse(record: object, where: str) -> Utterance:
    if not isinstance(record, dict):
        raise ManifestError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for field, kind in _REQUIRED.items():
        if field not in record:
            raise ManifestError(f"{where}: missing field '{field}'")
        if not isinstance(record[field], kind) or isinstance(record[field], bool):
            raise ManifestError(f"{where}: field '{field}' has type {type(record[field]).__name__}")
    for field, kind in _OPTIONAL.items():
        if field in record and record[field] is not None and not isinstance(record[field], kind):
            raise ManifestError(f"{where}: field '{field}' has type {type(record[field]).__name__}")
    if not record["id"]:
        raise ManifestError(f"{where}: field 'id' is empty")
    if not 0 < record["duration"] < math.inf:
        raise ManifestError(f"{where}: field 'duration' must be a number > 0, got {record['duration']}")
    if record.get("offset") is not None and record["offset"] < 0:
        raise ManifestError(f"{where}: field 'offset' must be >= 0, got {record['offset']}")
    return Utterance(
        id=record["id"],
        audio=record["audio"],
        duration=float(record["duration"]),
        text=record["text"],
        speaker=record.get("speaker") or UNKNOWN_SPEAKER,
        offset=None if record.get("offset") is None else float(record["offset"]),
    )


def _from_nemo(record: dict, where: str, folder: Path) -> dict:
    """A NeMo manifest record as this toolkit's record (without an id when it has none)."""
    audio = record["audio_filepath"]
    if not isinstance(audio, str) or not audio:
        raise ManifestError(f"{where}: field 'audio_filepath' must be a non-empty string")
    if not os.path.isabs(audio) and (folder / audio).is_file():
        audio = os.path.normpath(os.path.abspath(folder / audio))
    speaker = record.get("speaker", record.get("spk"))
    if speaker is not None and (not isinstance(speaker, (str, int)) or isinstance(speaker, bool)):
        raise ManifestError(f"{where}: field 'speaker' has type {type(speaker).__name__}")
    ours = {"audio": audio, "speaker": None if speaker is None else str(speaker)}
    ours.update({k: record[k] for k in ("id", "duration", "text", "offset") if k in record})
    if isinstance(ours.get("id"), int) and not isinstance(ours["id"], bool):
        ours["id"] = str(ours["id"])
    return ours


def _id_from_file(record: dict, seen: dict[str, int]) -> str:
    """An id for a record without one: its file's name, with the offset in ms for a segment; unique."""
    base = re.sub(r"\s+", "_", Path(record["audio"]).stem) or "utt"
    offset = record.get("offset")
    if isinstance(offset, (int, float)) and offset > 0:
        base = f"{base}-{round(offset * 1000):07d}"
    candidate, n = base, 1
    while candidate in seen:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def read_manifest(path: str | os.PathLike, errors: list[str] | None = None) -> list[Utterance]:
    """Read and validate a manifest; raise ManifestError naming file, line and field.

    With `errors` (a list), a bad line does not stop the reading: its message is appended there, the line is
    left out, and the good lines are returned. A missing file or a newer format version still raises.
    """
    path = Path(path)
    if not path.exists():
        raise ManifestError(f"{path}: manifest not found")
    utterances: list[Utterance] = []
    seen: dict[str, int] = {}
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                utt = _read_line(raw, f"{path}:{lineno}", path.parent, seen)
            except ManifestVersionError:
                raise
            except ManifestError as e:
                if errors is None:
                    raise
                errors.append(str(e))
                continue
            if utt is not None:
                seen[utt.id] = lineno
                utterances.append(utt)
    return utterances


def _read_line(raw: bytes, where: str, folder: Path, seen: dict[str, int]) -> Utterance | None:
    """One line of a manifest → its Utterance, or None for a blank line or the header; ManifestError if bad."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{where}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                            f"convert the manifest to UTF-8") from None
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{where}: not valid JSON ({e.msg})") from None
    if isinstance(record, dict) and record.get("format") == FORMAT:
        if record.get("version", 0) > VERSION:
            raise ManifestVersionError(
                f"{where}: manifest version {record.get('version')} is newer than this "
                f"toolkit reads ({VERSION}); upgrade asr-transformer"
            )
        return None
    if isinstance(record, dict) and "audio_filepath" in record and "audio" not in record:
        record = _from_nemo(record, where, folder)
        if "id" not in record:
            record["id"] = _id_from_file(record, seen)
    utt = _parse(record, where)
    if utt.id in seen:
        raise ManifestError(f"{where}: field 'id': duplicate id '{utt.id}' (first on line {seen[utt.id]})")
    return utt


def check_manifest(path: str | os.PathLike) -> tuple[list[Utterance], list[dict]]:
    """Every line of a manifest parsed and every utterance's audio header read (no samples): → (the usable
    utterances, one record per unusable line: {"id", "audio", "error"}, id and audio None for a line that does
    not parse, error a line naming the manifest's line or the utterance, and what is wrong)."""
    from asr_transformer.data.audio import AudioError, audio_info

    errors: list[str] = []
    utterances = read_manifest(path, errors)
    bad = [{"id": None, "audio": None, "error": e} for e in errors]
    headers: dict[str, float | AudioError] = {}  # each file's duration or error, read once
    good = []
    for utt in utterances:
        if utt.audio not in headers:
            try:
                headers[utt.audio] = audio_info(utt.audio)[0]
            except AudioError as e:
                headers[utt.audio] = e
        problem = _audio_problem(utt, headers[utt.audio])
        if problem:
            bad.append({"id": utt.id, "audio": utt.audio, "error": f"{path}: utterance '{utt.id}': {problem}"})
        else:
            good.append(utt)
    return good, bad


def _audio_problem(utt: Utterance, header) -> str:
    """What makes `utt`'s audio unusable, given its file's duration (or AudioError); "" when nothing does."""
    if not Path(utt.audio).is_file():
        return f"{utt.audio}: audio file not found"
    if not isinstance(header, float):
        return str(header)
    if utt.offset is not None and utt.offset >= header:
        return f"{utt.audio}: offset {utt.offset:g} s is past the end of the audio ({header:.2f} s)"
    return ""


def write_manifest(path: str | os.PathLike, utterances: Iterable[Utterance], fmt: str = "jsonl") -> int:
    """Write utterances atomically, as this toolkit's manifest (fmt "jsonl") or NeMo's ("nemo") (Lhotse's cuts:
    `lhotse_cuts.write_cuts`); returns how many were written."""
    if fmt not in FORMATS:
        raise ManifestError(f"{path}: unknown manifest format '{fmt}'; choose from {', '.join(FORMATS)}")
    n = 0
    with atomic_open(path) as f:
        if fmt == "jsonl":
            f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")
        for utt in utterances:
            record = utt.to_json() if fmt == "jsonl" else utt.to_nemo()
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n


def combine_manifests(inputs: list[str | os.PathLike], out: str | os.PathLike, fmt: str = "jsonl") -> int:
    """Concatenate manifests into `out` (atomically, in format `fmt`: see `write_manifest`), as Kaldi's
    combine_data.sh: e.g. a corpus plus synthetic speech for training; one input converts it. Returns the count."""
    return write_manifest(out, read_manifests(inputs), fmt)


def read_manifests(inputs: list[str | os.PathLike]) -> list[Utterance]:
    """The utterances of several manifests, in order; an utterance id found twice is an error naming both files."""
    seen: dict[str, str] = {}
    combined: list[Utterance] = []
    for path in inputs:
        for utt in read_manifest(path):
            if utt.id in seen:
                raise ManifestError(f"{path}: utterance '{utt.id}' is also in {seen[utt.id]}")
            seen[utt.id] = str(path)
            combined.append(utt)
    return combined


def total_hours(utterances: Iterable[Utterance]) -> float:
    return sum(u.duration for u in utterances) / 3600.0
