"""LibriSpeech (OpenSLR 12): read English audiobooks, 16 kHz FLAC.

Layout (`source` may be the `LibriSpeech` folder or the folder holding it)::

    <root>/<subset>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt   lines "<utt-id> TEXT"
    <root>/<subset>/<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac

Manifests written: `train.jsonl`, `dev.jsonl`, `test.jsonl` (each the union of its subsets)
and one per subset, named with "_" for "-": `train_clean_100.jsonl`, `dev_clean.jsonl`,
`test_clean.jsonl`, `test_other.jsonl`, ...
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Sequence

from asr_transformer.data.corpora.common import (
    CorpusError,
    download as download_file,
    extract,
    is_extracted,
    measure,
    read_lines,
    write_splits,
)
from asr_transformer.data.manifest import Utterance
from asr_transformer.progress import track

SUBSETS = (
    "dev-clean", "dev-other", "test-clean", "test-other",
    "train-clean-100", "train-clean-360", "train-other-500",
)
MIRROR = "https://www.openslr.org/resources/12"


def _root(source: Path) -> Path:
    return source / "LibriSpeech" if (source / "LibriSpeech").is_dir() else source


def read_subset(root: str | os.PathLike, subset: str, skipped: Counter) -> list[Utterance]:
    """Utterances of one subset folder; missing or unreadable audio goes to `skipped`."""
    folder = Path(root) / subset
    if not folder.is_dir():
        raise CorpusError(
            f"{folder}: LibriSpeech subset '{subset}' not found; download it "
            f"(asr prepare librispeech --download) or pass the folder holding it with --source"
        )
    transcripts = sorted(folder.glob("*/*/*.trans.txt"))
    if not transcripts:
        raise CorpusError(f"{folder}: no <speaker>/<chapter>/*.trans.txt files found")
    utterances = []
    for trans in track(transcripts, f"reading {subset}"):
        for lineno, line in enumerate(read_lines(trans), 1):
            if not line.strip():
                continue
            parts = line.split(maxsplit=1)
            if len(parts) != 2 or not re.fullmatch(r"\d+-\d+-\d+", parts[0]):
                raise CorpusError(f"{trans}:{lineno}: expected '<speaker>-<chapter>-<utt> TEXT', got '{line.strip()}'")
            uid, text = parts
            audio = trans.parent / f"{uid}.flac"
            duration = measure(audio, skipped)
            if duration is not None:
                utterances.append(Utterance(uid, str(audio.absolute()), duration, text.strip(), uid.split("-")[0]))
    return utterances


def prepare(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    train_subsets: Sequence[str] = ("train-clean-100",),
    dev_subsets: Sequence[str] = ("dev-clean",),
    test_subsets: Sequence[str] = ("test-clean", "test-other"),
) -> dict:
    """Write train/dev/test manifests and one manifest per subset; return the summary."""
    root = _root(Path(source))
    groups = {"train": tuple(train_subsets), "dev": tuple(dev_subsets), "test": tuple(test_subsets)}
    chosen = [s for subsets in groups.values() for s in subsets]
    if len(set(chosen)) != len(chosen):
        raise CorpusError(f"a LibriSpeech subset is listed in two splits: {groups}")
    skipped: Counter = Counter()
    by_subset = {s: read_subset(root, s, skipped) for s in chosen}
    splits = {name: [u for s in subsets for u in by_subset[s]] for name, subsets in groups.items()}
    splits.update({s.replace("-", "_"): utts for s, utts in by_subset.items()})
    return write_splits(out_dir, splits, skipped, corpus="librispeech", source=root.absolute())


def download(
    subsets: Sequence[str],
    dest: str | os.PathLike,
    mirror: str = MIRROR,
    keep_archives: bool = False,
) -> Path:
    """Download and extract subsets from OpenSLR into `<dest>/LibriSpeech`; return that folder.

    Subsets already extracted (by an earlier call) are left alone. `mirror` replaces the OpenSLR address (it must
    serve `<subset>.tar.gz`).
    """
    dest = Path(dest)
    for subset in subsets:
        if subset not in SUBSETS:
            raise CorpusError(f"unknown LibriSpeech subset '{subset}'; choose from {', '.join(SUBSETS)}")
        archive = dest / f"{subset}.tar.gz"
        if is_extracted(archive, dest):
            continue
        download_file(f"{mirror.rstrip('/')}/{subset}.tar.gz", archive)
        extract(archive, dest)
        if not keep_archives:
            archive.unlink()
    return dest / "LibriSpeech"
