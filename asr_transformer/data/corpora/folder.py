"""Any folder of audio files with same-name `.txt` transcripts.

    <source>/a.wav  a.txt                    speaker "unknown"
    <source>/spk1/b.flac  b.txt              speaker "spk1"
    <source>/spk2/session1/c.mp3  c.txt      speaker "spk2/session1"

Audio is any file soundfile reads (wav, flac, ogg, mp3, sph, ...), found recursively. The
speaker is the parent folder's path relative to `source` (whitespace → "_"); the utterance id is the file's path
relative to `source` without extension, "/" and whitespace replaced by "-" and "_".
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from asr_transformer.progress import track
from asr_transformer.data.corpora.common import (
    CorpusError,
    audio_files,
    measure,
    sidecar_transcript,
    split_corpus,
    write_splits,
)
from asr_transformer.data.manifest import UNKNOWN_SPEAKER, Utterance


def utterance_id(relative: Path) -> str:
    """`spk1/b.flac` → `spk1-b`: a Kaldi-safe id from a path relative to the corpus root."""
    return re.sub(r"\s+", "_", "-".join(relative.with_suffix("").parts))


def prepare(
    source_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    split_by: str = "speaker",
) -> dict:
    """Write train/dev/test manifests for a folder of audio + `.txt` files; return the summary.

    `split_by="speaker"` keeps each speaker in one split (fractions count speakers) and falls back to "text"
    with a warning when there are too few speakers (one speaker: a folder without sub-folders); `"text"` keeps
    each sentence in one split (fractions count distinct sentences), so a repeated take is never tested on.
    Audio without a transcript, or with an empty one or one that is not UTF-8 text, is skipped and counted
    (`skipped: not_utf8=1`, with a line naming the file).
    """
    source_dir = Path(source_dir)
    if not source_dir.is_dir():
        raise CorpusError(f"{source_dir}: folder not found")
    files = audio_files(source_dir)
    if not files:
        raise CorpusError(f"{source_dir}: no audio files found (looked for .wav .flac .ogg .mp3 .sph ...)")
    skipped: Counter = Counter()
    utterances: list[Utterance] = []
    ids: dict[str, Path] = {}
    for path in track(files, "reading audio"):
        relative = path.relative_to(source_dir)
        text = sidecar_transcript(path, skipped)
        if text is None:
            continue
        uid = utterance_id(relative)
        if uid in ids:
            raise CorpusError(f"{path}: same utterance id '{uid}' as {ids[uid]}; rename one of them")
        ids[uid] = path
        duration = measure(path, skipped)
        if duration is None:
            continue
        speaker = re.sub(r"\s+", "_", relative.parent.as_posix()) if relative.parent != Path(".") else UNKNOWN_SPEAKER
        utterances.append(Utterance(uid, str(path.absolute()), duration, text, speaker))
    if not utterances:
        raise CorpusError(f"{source_dir}: no usable utterances (skipped: {dict(skipped)})")
    splits, how = split_corpus(utterances, split_by, dev_fraction, test_fraction, seed)
    return write_splits(out_dir, splits, skipped, corpus="folder", source=source_dir.absolute(), split_by=how)
