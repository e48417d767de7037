"""JSONL manifests: one utterance per line.

The first line is a header ``{"format": "asr-manifest", "version": 1}``; every other line is
an utterance record::

    {"id": "spk1-utt3", "audio": "/abs/path.wav", "duration": 2.31, "text": "hello world",
     "speaker": "spk1", "offset": 0.0}

``offset`` (seconds into ``audio``) is present only for segments of longer files; ``duration``
is then the segment's length. Reading validates every record and names file, line and field of
the first bad one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from asr_transformer.fileio import atomic_open

FORMAT = "asr-manifest"
VERSION = 1
UNKNOWN_SPEAKER = "unknown"  # an utterance without a speaker label


class ManifestError(ValueError):
    """A manifest line that cannot be used; the message names file, line and field."""


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
    if not record["duration"] > 0:
        raise ManifestError(f"{where}: field 'duration' must be > 0, got {record['duration']}")
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


def read_manifest(path: str | os.PathLike) -> list[Utterance]:
    """Read and validate a manifest; raise ManifestError naming file, line and field."""
    path = Path(path)
    if not path.exists():
        raise ManifestError(f"{path}: manifest not found")
    utterances: list[Utterance] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ManifestError(f"{where}: not valid JSON ({e.msg})") from None
            if isinstance(record, dict) and record.get("format") == FORMAT:
                if record.get("version", 0) > VERSION:
                    raise ManifestError(
                        f"{where}: manifest version {record.get('version')} is newer than this "
                        f"toolkit reads ({VERSION}); upgrade asr-transformer"
                    )
                continue
            utt = _parse(record, where)
            if utt.id in seen:
                raise ManifestError(f"{where}: field 'id': duplicate id '{utt.id}' (first on line {seen[utt.id]})")
            seen[utt.id] = lineno
            utterances.append(utt)
    return utterances


def write_manifest(path: str | os.PathLike, utterances: Iterable[Utterance]) -> int:
    """Write utterances atomically; returns how many were written."""
    n = 0
    with atomic_open(path) as f:
        f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")
        for utt in utterances:
            f.write(json.dumps(utt.to_json(), ensure_ascii=False) + "\n")
            n += 1
    return n


def combine_manifests(inputs: list[str | os.PathLike], out: str | os.PathLike) -> int:
    """Concatenate manifests into `out` (atomically), as Kaldi's combine_data.sh: e.g. a corpus plus synthetic
    speech for training. An utterance id found twice is an error naming both files. Returns the count."""
    seen: dict[str, str] = {}
    combined: list[Utterance] = []
    for path in inputs:
        for utt in read_manifest(path):
            if utt.id in seen:
                raise ManifestError(f"{path}: utterance '{utt.id}' is also in {seen[utt.id]}")
            seen[utt.id] = str(path)
            combined.append(utt)
    return write_manifest(out, combined)


def total_hours(utterances: Iterable[Utterance]) -> float:
    return sum(u.duration for u in utterances) / 3600.0
