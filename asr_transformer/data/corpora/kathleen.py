"""Kathleen: one US-English speaker reading CMU ARCTIC prompts (rhasspy/dataset-voice-cathy).

Layout (`source` may be the dataset folder or its `audio` folder)::

    <source>/audio/<id>.flac  <id>.txt      <id> = arctic_<a|b><NNNN>_<take>

Any audio extension works (the upstream repository has 48 kHz stereo .wav). Several takes of
one prompt exist, so the split is by prompt (`arctic_a0001`), never by file: prompts are
shuffled with `seed` and about 80/10/10 of them go to train/dev/test. Speaker: "kathleen".
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from asr_transformer.progress import track
from asr_transformer.data.corpora.common import (
    AUDIO_EXTENSIONS,
    CorpusError,
    download as download_file,
    extract,
    measure,
    sidecar_transcript,
    skip,
    split_by_group,
    write_splits,
)
from asr_transformer.data.manifest import Utterance

URL = "https://github.com/rhasspy/dataset-voice-cathy/archive/HEAD.zip"
SPEAKER = "kathleen"
ID = re.compile(r"(arctic_[ab]\d{4})_(\w+)")


def prompt_of(utterance_id: str) -> str:
    """`arctic_a0001_1592748574` → `arctic_a0001`."""
    match = ID.fullmatch(utterance_id)
    if not match:
        raise CorpusError(f"'{utterance_id}' is not an id of the form arctic_<a|b><NNNN>_<take>")
    return match.group(1)


def _audio_dir(source: Path) -> Path:
    return source / "audio" if (source / "audio").is_dir() else source


def prepare(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> dict:
    """Write train/dev/test manifests, split by prompt; return the summary."""
    folder = _audio_dir(Path(source))
    if not folder.is_dir():
        raise CorpusError(f"{folder}: folder not found; pass the Kathleen folder with --source")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file())
    if not files:
        raise CorpusError(f"{folder}: no audio files found; pass the Kathleen folder (holding audio/) with --source")
    skipped: Counter = Counter()
    utterances = []
    for path in track(files, "reading Kathleen"):
        if not ID.fullmatch(path.stem):
            skip(skipped, "bad_name", f"{path}: name is not arctic_<a|b><NNNN>_<take>")
            continue
        text = sidecar_transcript(path, skipped)
        if text is None:
            continue
        duration = measure(path, skipped)
        if duration is not None:
            utterances.append(Utterance(path.stem, str(path.absolute()), duration, text, SPEAKER))
    splits = split_by_group(utterances, lambda u: prompt_of(u.id), dev_fraction, test_fraction, seed)
    return write_splits(out_dir, splits, skipped, corpus="kathleen", source=folder.absolute())


def download(dest: str | os.PathLike) -> Path:
    """Download the dataset from GitHub and extract it under `dest`; return the folder of its files."""
    dest = Path(dest)
    archive = download_file(URL, dest / "dataset-voice-cathy.zip")
    extract(archive, dest)
    for folder in [dest, *sorted(p for p in dest.iterdir() if p.is_dir())]:
        if any(folder.glob("arctic_*.txt")):
            return folder
    raise CorpusError(f"{archive}: no arctic_*.txt files after extraction; delete {dest} and download again")
