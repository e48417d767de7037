"""Free Spoken Digit Dataset: isolated English digits, 8 kHz WAV.

Layout (`source` may be the dataset folder or its `recordings` folder)::

    <source>/recordings/{digit}_{speaker}_{index}.wav     e.g. 7_theo_42.wav

The transcript is the digit's English word (0 → "zero" ... 9 → "nine"); the id is the file
name without extension. Splits:

- `split="speaker"` (default): test = `test_speaker`, dev = `dev_speaker`, train = the others. With no
  `dev_speaker` (""), every speaker but the test one trains, and dev is their recordings 0-4 (the
  dataset's conventional test indices), so no speaker is spent on validation alone.
- `split="index"`: the dataset's convention, index 0-4 test and 5-49 train, with dev taken out
  of train as index 5-9 (so train is 10-49).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from asr_transformer.progress import track
from asr_transformer.data.corpora.common import (
    CorpusError,
    download as download_file,
    extract,
    find_dir,
    measure,
    skip,
    write_splits,
)
from asr_transformer.data.manifest import Utterance

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
URL = "https://github.com/Jakobovski/free-spoken-digit-dataset/archive/HEAD.zip"


def _recordings(source: Path) -> Path:
    return source / "recordings" if (source / "recordings").is_dir() else source


def prepare(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    split: str = "speaker",
    test_speaker: str = "theo",
    dev_speaker: str = "jackson",
) -> dict:
    """Write train/dev/test manifests for FSDD; return the summary."""
    if split not in ("speaker", "index"):
        raise CorpusError(f"split must be 'speaker' or 'index', got '{split}'")
    folder = _recordings(Path(source))
    files = sorted(folder.glob("*.wav"))
    if not files:
        raise CorpusError(f"{folder}: no .wav recordings found; pass the FSDD folder (holding recordings/) with --source")
    skipped: Counter = Counter()
    utterances: list[tuple[int, Utterance]] = []
    for path in track(files, "reading FSDD"):
        match = re.fullmatch(r"(\d)_([^_]+)_(\d+)", path.stem)
        if not match:
            skip(skipped, "bad_name", f"{path}: name is not {{digit}}_{{speaker}}_{{index}}.wav")
            continue
        duration = measure(path, skipped)
        if duration is not None:
            digit, speaker, index = match.groups()
            utterance = Utterance(path.stem, str(path.absolute()), duration, DIGITS[int(digit)], speaker)
            utterances.append((int(index), utterance))

    splits: dict[str, list[Utterance]] = {"train": [], "dev": [], "test": []}
    if split == "speaker":
        speakers = sorted({u.speaker for _, u in utterances})
        for role, name in (("test_speaker", test_speaker), ("dev_speaker", dev_speaker)):
            if (name or role == "test_speaker") and name not in speakers:
                raise CorpusError(f"{folder}: {role} '{name}' has no recordings; speakers: {', '.join(speakers)}")
        if test_speaker == dev_speaker:
            raise CorpusError(f"test_speaker and dev_speaker are both '{test_speaker}'; choose two speakers")
        role_of = {test_speaker: "test", dev_speaker: "dev"}
        for index, u in utterances:
            role = role_of.get(u.speaker) or ("train" if dev_speaker or index >= 5 else "dev")
            splits[role].append(u)
    else:
        for index, u in utterances:
            splits["test" if index < 5 else "dev" if index < 10 else "train"].append(u)
    return write_splits(out_dir, splits, skipped, corpus="fsdd", source=folder.absolute())


def download(dest: str | os.PathLike) -> Path:
    """Download FSDD from GitHub and extract it under `dest`; return the folder holding `recordings/`."""
    dest = Path(dest)
    archive = download_file(URL, dest / "free-spoken-digit-dataset.zip")
    extract(archive, dest)
    recordings = find_dir(dest, "recordings")
    if recordings is None:
        raise CorpusError(f"{archive}: no 'recordings' folder after extraction; delete {dest} and download again")
    return recordings.parent
