"""Tar shards: thousands of utterances per file, read in sequence instead of one small file each.

A shard is a plain tar in WebDataset's layout: for each utterance, ``KEY.json`` (its record: id, text, speaker,
duration) then ``KEY.wav`` / ``KEY.flac`` / … (its audio file's bytes as stored; a segment of a longer file is cut
out and stored as FLAC). Any tar tool lists it, and WebDataset, WeNet's shard reader or ``tar xf`` read it.

The shard list (``shards.jsonl``, written beside the shards) is a header line ``{"format": "asr-shards",
"version": 1}`` and one line per shard::

    {"shard": "shard-000000.tar", "utterances": [{"key": "000000", "id": "spk1-utt3", "duration": 2.31,
     "text": "hello world", "speaker": "spk1"}, …]}

``shard`` is where to read it: a path (relative to the list's folder, or absolute), an ``http://`` or
``https://`` URL, or ``pipe:COMMAND`` whose standard output is the tar (``pipe:aws s3 cp s3://b/shard-0.tar -``),
as WebDataset names them. The list is the index: training plans its batches from it (the durations and texts)
without reading any audio, which is what lets every rank and loader worker know its batches ahead and resume
in the middle of an epoch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator

import soundfile as sf

from asr_transformer.data.audio import audio_info, load_audio
from asr_transformer.data.manifest import UNKNOWN_SPEAKER, Utterance
from asr_transformer.errors import UserError
from asr_transformer.fileio import atomic_open

FORMAT = "asr-shards"
VERSION = 1
LIST_NAME = "shards.jsonl"
PER_SHARD = 1000  # utterances per shard: ~1,000 × 10 s of 16-bit 16-kHz audio ≈ 300 MB, WeNet's and NeMo's size


class ShardError(UserError, ValueError):
    """A shard list or a shard that cannot be used; the message names the file (and line, field or member)."""


@dataclass
class Shard:
    """One tar and what its index says it holds: `location` (a path, URL or ``pipe:`` command) and its utterances
    in member order, each with its member `key` (`Utterance.audio` is ``LOCATION#KEY``, for messages)."""

    location: str
    keys: list[str]
    utterances: list[Utterance]


# ------------------------------------------------------------------------------------------------ writing


def write_shards(utterances: list[Utterance], out: str | os.PathLike, per_shard: int = PER_SHARD,
                 progress: Callable[[list], Iterable] | None = None) -> Path:
    """Write `utterances` into ``OUT/shard-NNNNNN.tar`` files of `per_shard` each, in the order given, and their
    list ``OUT/shards.jsonl`` (each file atomically); → the list's path. `progress` wraps the shards' loop (a bar)."""
    if per_shard < 1:
        raise ShardError(f"--per-shard must be at least 1, got {per_shard}")
    out = Path(out)
    groups = [utterances[i:i + per_shard] for i in range(0, len(utterances), per_shard)]
    lines = []
    for n, group in enumerate(progress(groups) if progress else groups):
        name = f"shard-{n:06d}.tar"
        records = _write_tar(out / name, group)
        lines.append({"shard": name, "utterances": records})
    path = out / LIST_NAME
    with atomic_open(path) as f:
        f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def _write_tar(path: Path, utterances: list[Utterance]) -> list[dict]:
    """One shard; → its index records."""
    records = []
    with atomic_open(path, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i, utt in enumerate(utterances):
            key = f"{i:06d}"
            record = {"key": key, "id": utt.id, "duration": utt.duration, "text": utt.text, "speaker": utt.speaker}
            extension, data = _audio_bytes(utt)
            _add_member(tar, f"{key}.json", json.dumps({k: v for k, v in record.items() if k != "key"},
                                                       ensure_ascii=False).encode())
            _add_member(tar, f"{key}.{extension}", data)
            records.append(record)
    return records


def _audio_bytes(utt: Utterance) -> tuple[str, bytes]:
    """(extension, bytes) of an utterance's audio: its file as stored, or for a segment the segment as FLAC."""
    if utt.offset is None:
        extension = Path(utt.audio).suffix.lstrip(".").lower() or "wav"
        try:
            return extension, Path(utt.audio).read_bytes()
        except OSError as e:
            raise ShardError(f"utterance '{utt.id}': {utt.audio}: cannot read its audio ({e.strerror or e})") from None
    rate = audio_info(utt.audio)[1]
    samples = load_audio(utt.audio, offset=utt.offset, duration=utt.duration, sample_rate=rate, allow_silent=True)
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format="FLAC", subtype="PCM_24")
    return "flac", buffer.getvalue()


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0  # no time stamp: the same input gives the same tar
    tar.addfile(info, io.BytesIO(data))


# ------------------------------------------------------------------------------------------------ reading


def is_shard_list(path: str | os.PathLike) -> bool:
    """Whether `path` is a shard list (its first line is the shard list's header), not a manifest."""
    with contextlib.suppress(OSError, UnicodeDecodeError, json.JSONDecodeError):
        with open(path, encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
        return isinstance(header := json.loads(first or "null"), dict) and header.get("format") == FORMAT
    return False


def read_shard_list(path: str | os.PathLike) -> list[Shard]:
    """The shards of a shard list, validated; ShardError naming the list's file, line and field."""
    path = Path(path)
    if not path.exists():
        raise ShardError(f"{path}: shard list not found")
    shards, seen = [], {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            where = f"{path}:{lineno}"
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ShardError(f"{where}: not valid JSON ({e.msg})") from None
            if isinstance(record, dict) and record.get("format") == FORMAT:
                if record.get("version", 0) > VERSION:
                    raise ShardError(f"{where}: shard list version {record['version']} is newer than this toolkit "
                                     f"reads ({VERSION}); upgrade asr-transformer")
                continue
            shard = _parse_shard(record, where, path.parent)
            for utt in shard.utterances:
                if utt.id in seen:
                    raise ShardError(f"{where}: utterance id '{utt.id}' is also on line {seen[utt.id]}")
                seen[utt.id] = lineno
            shards.append(shard)
    if not shards:
        raise ShardError(f"{path}: the shard list names no shard")
    return shards


def _parse_shard(record, where: str, folder: Path) -> Shard:
    if not isinstance(record, dict) or not isinstance(record.get("shard"), str) or not record["shard"]:
        raise ShardError(f"{where}: expected an object with a field 'shard' (a path, URL or pipe: command)")
    location = resolve_location(record["shard"], folder)
    if not isinstance(record.get("utterances"), list):
        raise ShardError(f"{where}: field 'utterances' must be a list of records")
    keys, utterances = [], []
    for i, utt in enumerate(record["utterances"]):
        field = f"{where}: utterances[{i}]"
        if not isinstance(utt, dict):
            raise ShardError(f"{field}: expected an object")
        for name, kind in (("key", str), ("id", str), ("text", str), ("duration", (int, float))):
            if not isinstance(utt.get(name), kind) or isinstance(utt.get(name), bool):
                raise ShardError(f"{field}: field '{name}' is missing or not a {getattr(kind, '__name__', 'number')}")
        if not utt["duration"] > 0:
            raise ShardError(f"{field}: field 'duration' must be > 0, got {utt['duration']}")
        keys.append(utt["key"])
        utterances.append(Utterance(utt["id"], f"{location}#{utt['key']}", float(utt["duration"]), utt["text"],
                                    utt.get("speaker") or UNKNOWN_SPEAKER))
    return Shard(location, keys, utterances)


def resolve_location(location: str, folder: Path) -> str:
    """A shard's location as written in its list, with a relative path taken relative to the list's `folder`."""
    if location.startswith("pipe:") or re.match(r"^[a-z][a-z0-9+.-]*://", location):
        return location
    return location if os.path.isabs(location) else str(folder / location)


def shard_utterances(shards: list[Shard]) -> list[Utterance]:
    return [utt for shard in shards for utt in shard.utterances]


@contextlib.contextmanager
def open_location(location: str) -> Iterator[IO[bytes]]:
    """A binary stream of a shard: a file, an http(s) URL (streamed), or a ``pipe:`` command's standard output.
    ShardError naming the location when it cannot be opened, or when the command fails."""
    if location.startswith("pipe:"):
        process = subprocess.Popen(location[len("pipe:"):], shell=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        unreadable, done = None, False
        try:
            yield process.stdout
            while process.stdout.read(1 << 16):  # the tar's end padding, so that the command never meets a closed pipe
                pass
            done = True
        except ShardError as e:  # a command that failed explains it better than the tar it did not write
            unreadable, done = e, True
        finally:
            if not done and process.poll() is None:  # the reader stopped early: the rest is not wanted
                process.kill()
            process.stdout.close()
            error = process.stderr.read().decode("utf-8", "replace").strip()
            process.stderr.close()
            code = process.wait()
        if code != 0:
            raise ShardError(f"{location}: the command exited with status {code}" + (f": {error}" if error else ""))
        if unreadable is not None:
            raise unreadable
        return
    try:
        stream = urllib.request.urlopen(location, timeout=60) if "://" in location else open(location, "rb")
    except (OSError, ValueError) as e:
        raise ShardError(f"{location}: cannot open the shard ({e})") from None
    with stream:
        yield stream


def read_shard(location: str, wanted: set[str] | None = None) -> Iterator[tuple[str, bytes | None]]:
    """(key, audio bytes) of each utterance member of the shard at `location`, in member order, read as a stream
    (no seeking: files, URLs and pipes alike); bytes None for keys outside `wanted` (not read into memory)."""
    with open_location(location) as stream:
        try:
            with tarfile.open(fileobj=stream, mode="r|*") as tar:
                for member in tar:
                    key, _, extension = member.name.rpartition("/")[2].partition(".")
                    if not member.isfile() or extension == "json":
                        continue
                    keep = wanted is None or key in wanted
                    yield key, tar.extractfile(member).read() if keep else None
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ShardError(f"{location}: not a readable tar shard ({e})") from None



def shard_audio(shards: list[Shard]) -> Iterator[tuple[Utterance, bytes]]:
    """Every utterance of `shards` with its audio file's bytes, reading the shards one after the other."""
    for shard in shards:
        by_key = dict(zip(shard.keys, shard.utterances))
        for key, data in read_shard(shard.location):
            if key in by_key:
                yield by_key[key], data
