"""CMU AN4 (alphanumeric census data): spoken letters, digits and words, 16 kHz NIST SPHERE.

Layout (`source` may be the `an4` folder or the folder holding it)::

    <root>/etc/an4_train.transcription    lines "<s> YES </s> (an251-fash-b)"
    <root>/etc/an4_test.transcription
    <root>/wav/an4_clstk/<speaker>/<id>.sph        train
    <root>/wav/an4test_clstk/<speaker>/<id>.sph    test

The utterance id is the one in parentheses, the text is what lies between `<s>` and `</s>`,
the speaker is the audio's folder. Dev is a held-out fraction of the train speakers.
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
    measure,
    read_lines,
    skip,
    split_by_group,
    write_splits,
)
from asr_transformer.data.manifest import Utterance

URL = "http://www.speech.cs.cmu.edu/databases/an4/an4_sphere.tar.gz"
WAV_DIRS = {"train": "an4_clstk", "test": "an4test_clstk"}


def _root(source: Path) -> Path:
    return source / "an4" if (source / "an4" / "etc").is_dir() else source


def read_transcription(path: str | os.PathLike) -> list[tuple[int, str, str]]:
    """`(line number, id, text)` per line of an AN4 `.transcription` file; `<s>`/`</s>` removed."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: not found; is --source the AN4 folder (holding etc/ and wav/)?")
    entries, seen = [], {}
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        match = re.fullmatch(r"\s*(.*?)\s*\(([^()\s]+)\)\s*", line)
        if not match:
            raise CorpusError(f"{path}:{lineno}: expected '<s> WORDS </s> (utterance-id)', got '{line.strip()}'")
        words, uid = match.group(1).split(), match.group(2)
        if uid in seen:
            raise CorpusError(f"{path}:{lineno}: duplicate id '{uid}' (first on line {seen[uid]})")
        seen[uid] = lineno
        if words[:1] == ["<s>"]:
            words = words[1:]
        if words[-1:] == ["</s>"]:
            words = words[:-1]
        entries.append((lineno, uid, " ".join(words)))
    return entries


def read_part(root: str | os.PathLike, part: str, skipped: Counter) -> list[Utterance]:
    """Utterances of the "train" or "test" part; missing or unreadable audio goes to `skipped`."""
    root = Path(root)
    transcription = root / "etc" / f"an4_{part}.transcription"
    wav_dir = root / "wav" / WAV_DIRS[part]
    entries = read_transcription(transcription)
    audio_of = {p.stem: p for p in sorted(wav_dir.glob("*/*.sph"))}
    utterances = []
    for lineno, uid, text in track(entries, f"reading AN4 {part}"):
        audio = audio_of.get(uid)
        if audio is None:
            skip(skipped, "missing", f"{transcription}:{lineno}: no audio {wav_dir}/<speaker>/{uid}.sph")
            continue
        if not text:
            skip(skipped, "empty_transcript", f"{transcription}:{lineno}: no words for '{uid}'")
            continue
        duration = measure(audio, skipped)
        if duration is not None:
            utterances.append(Utterance(uid, str(audio.absolute()), duration, text, audio.parent.name))
    return utterances


def prepare(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    dev_fraction: float = 0.1,
    seed: int = 0,
) -> dict:
    """Write train/dev/test manifests for AN4 (dev: `dev_fraction` of train speakers); return the summary."""
    root = _root(Path(source))
    skipped: Counter = Counter()
    train = read_part(root, "train", skipped)
    splits = split_by_group(train, lambda u: u.speaker, dev_fraction, 0.0, seed)
    splits["test"] = read_part(root, "test", skipped)
    return write_splits(out_dir, splits, skipped, corpus="an4", source=root.absolute())


def download(dest: str | os.PathLike) -> Path:
    """Download and extract AN4 into `<dest>/an4`; return that folder."""
    dest = Path(dest)
    archive = download_file(URL, dest / "an4_sphere.tar.gz")
    extract(archive, dest)
    return dest / "an4"
