"""Mozilla Common Voice: crowd-sourced read speech, MP3 clips, one folder per language.

Layout (`source` is the language folder, e.g. `cv-corpus-17.0-2024-03-15/en`)::

    <source>/train.tsv dev.tsv test.tsv validated.tsv   tab-separated, header row
    <source>/clips/<path>.mp3

Columns are found by name in the header: `client_id` (the speaker), `path` (the clip file in
`clips/`) and `sentence` (the transcript). The utterance id is the clip's name without
extension. Train never shares a clip or a speaker with dev or test: rows that would are left
out of train (a no-op for the official `train.tsv`; it matters with `train_tsv="validated.tsv"`).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from asr_transformer.data.corpora.common import (
    CorpusError,
    console,
    measure,
    read_lines,
    skip,
    write_splits,
)
from asr_transformer.data.manifest import UNKNOWN_SPEAKER, Utterance
from asr_transformer.progress import track

DATASETS_URL = "https://commonvoice.mozilla.org/datasets"
COLUMNS = ("client_id", "path", "sentence")


def read_tsv(path: str | os.PathLike) -> list[tuple[int, str, str, str]]:
    """`(line number, client_id, path, sentence)` for each row; a bad row names file and line."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: not found; is --source the language folder of a Common Voice release?")
    lines = read_lines(path)
    header = lines[0].split("\t") if lines else []
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise CorpusError(f"{path}:1: header lacks column(s) {', '.join(missing)}; found: {', '.join(header) or 'nothing'}")
    index = [header.index(c) for c in COLUMNS]
    rows = []
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) <= max(index):
            raise CorpusError(f"{path}:{lineno}: expected {len(header)} tab-separated fields, found {len(fields)}")
        client, clip, sentence = (fields[i].strip() for i in index)
        if not clip:
            raise CorpusError(f"{path}:{lineno}: empty 'path' field")
        rows.append((lineno, client, clip, sentence))
    return rows


def _utterances(source: Path, tsv: Path, rows, skipped: Counter) -> list[Utterance]:
    utterances = []
    for lineno, client, clip, sentence in track(rows, f"reading {tsv.name}"):
        if not sentence:
            skip(skipped, "empty_transcript", f"{tsv}:{lineno}: empty sentence for {clip}")
            continue
        audio = source / "clips" / clip
        if not audio.suffix:
            audio = audio.with_suffix(".mp3")
        duration = measure(audio, skipped)
        if duration is not None:
            utterances.append(Utterance(Path(clip).stem, str(audio.absolute()), duration, sentence, client or UNKNOWN_SPEAKER))
    return utterances


def prepare(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    train_tsv: str = "train.tsv",
    dev_tsv: str = "dev.tsv",
    test_tsv: str = "test.tsv",
) -> dict:
    """Write train/dev/test manifests from a Common Voice language folder; return the summary."""
    source = Path(source)
    if not (source / "clips").is_dir():
        raise CorpusError(f"{source}: no 'clips' folder; pass the language folder of a Common Voice release with --source")
    skipped: Counter = Counter()
    rows = {name: read_tsv(source / tsv) for name, tsv in (("train", train_tsv), ("dev", dev_tsv), ("test", test_tsv))}
    held_out = [r for name in ("dev", "test") for r in rows[name]]
    held_clips, held_speakers = {r[2] for r in held_out}, {r[1] for r in held_out}
    train_rows = [r for r in rows["train"] if r[2] not in held_clips and r[1] not in held_speakers]
    if len(train_rows) < len(rows["train"]):
        console.print(f"{len(rows['train']) - len(train_rows)} rows of {train_tsv} left out of train: their clip or speaker is in dev or test")
    rows["train"] = train_rows
    tsv_of = {"train": train_tsv, "dev": dev_tsv, "test": test_tsv}
    splits = {name: _utterances(source, source / tsv_of[name], r, skipped) for name, r in rows.items()}
    return write_splits(out_dir, splits, skipped, corpus="commonvoice", source=source.absolute())


def download(dest: str | os.PathLike | None = None) -> Path:
    """Common Voice cannot be downloaded automatically: raises CorpusError saying what to do."""
    raise CorpusError(
        f"Common Voice needs a sign-in to download: get your language's archive from {DATASETS_URL}, "
        f"extract it, and pass its language folder (the one holding train.tsv and clips/) with --source"
    )
