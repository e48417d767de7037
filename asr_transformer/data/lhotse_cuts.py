"""Lhotse's cut manifests (a CutSet's JSONL, gzipped or not), read and written without Lhotse itself.

Lhotse's corpus recipes (dozens of corpora: `lhotse prepare librispeech …`) write one ``MonoCut`` per line::

    {"id": "cut1", "start": 0.0, "duration": 2.31, "channel": 0,
     "supervisions": [{"id": "sup1", "recording_id": "rec1", "start": 0.0, "duration": 2.31, "channel": 0,
                       "text": "HELLO WORLD", "speaker": "spk1"}],
     "recording": {"id": "rec1", "sources": [{"type": "file", "channels": [0], "source": "/data/rec1.flac"}],
                   "sampling_rate": 16000, "num_samples": 36960, "duration": 2.31, "channel_ids": [0]},
     "type": "MonoCut"}

A cut becomes one utterance: its recording's file, its start and duration (an offset only when the cut is part
of the recording), its supervisions' texts joined and the first one's speaker. Recordings read from URLs,
commands or memory have no file to point at and are reported by line.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Iterable

from asr_transformer.data.manifest import UNKNOWN_SPEAKER, ManifestError, Utterance
from asr_transformer.fileio import atomic_open


def read_cuts(path: str | os.PathLike) -> list[Utterance]:
    """The utterances of a Lhotse CutSet file (``.jsonl`` or ``.jsonl.gz``); ManifestError naming file, line and
    field of the first cut that cannot be one."""
    path = Path(path)
    if not path.exists():
        raise ManifestError(f"{path}: Lhotse cut manifest not found")
    opener = gzip.open if path.suffix == ".gz" else open
    utterances, seen = [], {}
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                cut = json.loads(line)
            except json.JSONDecodeError as e:
                raise ManifestError(f"{where}: not valid JSON ({e.msg})") from None
            utt = _utterance(cut, where, path.parent)
            if utt.id in seen:
                raise ManifestError(f"{where}: field 'id': duplicate cut id '{utt.id}' (first on line {seen[utt.id]})")
            seen[utt.id] = lineno
            utterances.append(utt)
    return utterances


def _utterance(cut, where: str, folder: Path) -> Utterance:
    if not isinstance(cut, dict) or cut.get("type", "MonoCut") != "MonoCut":
        kind = cut.get("type") if isinstance(cut, dict) else type(cut).__name__
        raise ManifestError(f"{where}: expected a MonoCut, got {kind} (mix or split cuts first: `cuts.to_eager()` "
                            f"after `cuts.trim_to_supervisions()` writes MonoCuts)")
    for name in ("id", "duration", "recording"):
        if name not in cut:
            raise ManifestError(f"{where}: missing field '{name}'")
    recording = cut["recording"]
    sources = recording.get("sources") if isinstance(recording, dict) else None
    if not sources or not isinstance(sources[0], dict):
        raise ManifestError(f"{where}: field 'recording.sources' is missing or empty")
    source = sources[0]
    if source.get("type") != "file" or len(sources) > 1:
        raise ManifestError(f"{where}: field 'recording.sources': only one source of type 'file' can be read "
                            f"(got {len(sources)}, the first of type {source.get('type')!r})")
    audio = str(source["source"])
    if not os.path.isabs(audio) and (folder / audio).exists():
        audio = os.path.normpath(os.path.abspath(folder / audio))
    start, duration = float(cut.get("start", 0.0)), float(cut["duration"])
    whole = start == 0.0 and abs(duration - float(recording.get("duration", duration))) < 1e-3
    supervisions = cut.get("supervisions") or []
    text = " ".join(s.get("text") or "" for s in supervisions if isinstance(s, dict)).strip()
    speaker = next((s["speaker"] for s in supervisions if isinstance(s, dict) and s.get("speaker")), UNKNOWN_SPEAKER)
    if not duration > 0:
        raise ManifestError(f"{where}: field 'duration' must be > 0, got {cut['duration']}")
    return Utterance(str(cut["id"]), audio, duration, text, str(speaker), None if whole else start)


def write_cuts(path: str | os.PathLike, utterances: Iterable[Utterance]) -> int:
    """Write utterances as a Lhotse CutSet (``.jsonl``, or gzipped for ``.gz``), atomically: one MonoCut per
    utterance over a recording of its whole file (read for its rate and length), the utterance its one
    supervision. → how many were written. `lhotse.CutSet.from_file(path)` loads it."""
    import soundfile as sf

    recordings: dict[str, dict] = {}
    lines = []
    for utt in utterances:
        if utt.audio not in recordings:
            try:
                info = sf.info(utt.audio)
            except Exception as e:  # soundfile raises several types for missing or bad files
                raise ManifestError(f"utterance '{utt.id}': {utt.audio}: cannot read its audio header ({e})") from None
            channels = list(range(info.channels))
            recordings[utt.audio] = {"id": _recording_id(utt.audio, len(recordings)),
                                     "sources": [{"type": "file", "channels": channels, "source": utt.audio}],
                                     "sampling_rate": info.samplerate, "num_samples": info.frames,
                                     "duration": info.frames / info.samplerate, "channel_ids": channels}
        recording = recordings[utt.audio]
        supervision = {"id": utt.id, "recording_id": recording["id"], "start": 0.0, "duration": utt.duration,
                       "channel": 0, "text": utt.text}
        if utt.speaker != UNKNOWN_SPEAKER:
            supervision["speaker"] = utt.speaker
        lines.append({"id": utt.id, "start": utt.offset or 0.0, "duration": utt.duration, "channel": 0,
                      "supervisions": [supervision], "recording": recording, "type": "MonoCut"})
    path = Path(path)
    with atomic_open(path, "wb") as raw:
        handle = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.suffix == ".gz" else raw
        for line in lines:
            handle.write((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
        if handle is not raw:
            handle.close()
    return len(lines)


def _recording_id(audio: str, n: int) -> str:
    return f"{Path(audio).stem}-{n}"
