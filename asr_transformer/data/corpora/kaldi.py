"""Kaldi data directories, in and out.

A Kaldi data dir holds `wav.scp` (`<recording-id> <audio path>`), `text` (`<utt-id> <words>`),
`utt2spk` (`<utt-id> <speaker>`, optional here) and optionally `segments`
(`<utt-id> <recording-id> <start> <end>`, seconds; end -1 = to the end of the file). Without
`segments` the utterance ids are the recording ids.

Only plain paths are read from `wav.scp`: command pipes (`sph2pipe ... |`) are refused with
the file and line; convert such audio to files first. Relative paths are taken relative to
the current folder, as Kaldi does.

`prepare` imports one dir and splits it like `folder.prepare`, or takes dev and test from
their own dirs (`dev_dir`, `test_dir`) as given. `export` writes a manifest as a Kaldi dir.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from asr_transformer.data.corpora.common import (
    CorpusError,
    console,
    measure,
    progress,
    read_lines,
    skip,
    split_utterances,
    write_splits,
)
from asr_transformer.data.manifest import UNKNOWN_SPEAKER, Utterance, read_manifest
from asr_transformer.fileio import atomic_open


def _read_table(path: Path, fields: int | None) -> dict[str, tuple[int, list[str]]]:
    """`{id: (line number, other fields)}` from a Kaldi table; blank lines are ignored.

    `fields` is the exact number of fields per line, or None for "`<id> <rest of line>`"
    (the rest may be empty).
    """
    table: dict[str, tuple[int, list[str]]] = {}
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        if fields is None:
            parts = line.strip().split(maxsplit=1)
            rest = [parts[1] if len(parts) > 1 else ""]
        else:
            parts = line.split()
            if len(parts) != fields:
                raise CorpusError(f"{path}:{lineno}: expected {fields} fields, found {len(parts)}: '{line.strip()}'")
            rest = parts[1:]
        if parts[0] in table:
            raise CorpusError(f"{path}:{lineno}: duplicate id '{parts[0]}' (first on line {table[parts[0]][0]})")
        table[parts[0]] = (lineno, rest)
    return table


def read_dir(kaldi_dir: str | os.PathLike, skipped: Counter) -> list[Utterance]:
    """Utterances of one Kaldi data dir; unusable audio and missing transcripts go to `skipped`."""
    kaldi_dir = Path(kaldi_dir)
    for name in ("wav.scp", "text"):
        if not (kaldi_dir / name).is_file():
            raise CorpusError(f"{kaldi_dir}: not a Kaldi data dir: '{name}' not found")
    wav_scp = kaldi_dir / "wav.scp"
    recordings: dict[str, str] = {}
    for rec, (lineno, (path,)) in _read_table(wav_scp, None).items():
        if path.endswith("|"):
            raise CorpusError(
                f"{wav_scp}:{lineno}: recording '{rec}' is a command pipe ('... |'), which is not supported; "
                f"convert the audio to files (e.g. with sox or sph2pipe) and list their paths"
            )
        if not path:
            raise CorpusError(f"{wav_scp}:{lineno}: recording '{rec}' has no audio path")
        recordings[rec] = os.path.abspath(path)
    texts = _read_table(kaldi_dir / "text", None)
    utt2spk = _read_table(kaldi_dir / "utt2spk", 2) if (kaldi_dir / "utt2spk").is_file() else {}

    durations = {rec: measure(path, skipped) for rec, path in progress(recordings.items(), "reading audio", len(recordings))}

    # (utt, recording, start, end or None)
    pieces: list[tuple[str, str, float, float | None]] = []
    segments = kaldi_dir / "segments"
    if segments.is_file():
        for utt, (lineno, (rec, start, end)) in _read_table(segments, 4).items():
            where = f"{segments}:{lineno}"
            if rec not in recordings:
                raise CorpusError(f"{where}: recording '{rec}' is not in {wav_scp}")
            try:
                start_s, end_s = float(start), float(end)
            except ValueError:
                raise CorpusError(f"{where}: start and end must be numbers, got '{start}' '{end}'") from None
            if start_s < 0 or (end_s != -1 and end_s <= start_s):
                raise CorpusError(f"{where}: need 0 <= start < end (or end = -1), got {start} {end}")
            pieces.append((utt, rec, start_s, None if end_s == -1 else end_s))
    else:
        pieces = [(rec, rec, 0.0, None) for rec in recordings]

    utterances = []
    for utt, rec, start, end in pieces:
        length = durations[rec]
        if length is None:
            continue  # the recording's skip is already counted
        if utt not in texts:
            skip(skipped, "no_transcript", f"{kaldi_dir / 'text'}: no line for utterance '{utt}'")
            continue
        text = texts[utt][1][0]
        if not text:
            skip(skipped, "empty_transcript", f"{kaldi_dir / 'text'}:{texts[utt][0]}: utterance '{utt}' has no words")
            continue
        if start >= length:
            skip(skipped, "segment_out_of_range", f"{segments}: '{utt}' starts at {start}s, after the end of {recordings[rec]} ({length:.2f}s)")
            continue
        stop = length if end is None else min(end, length)
        speaker = utt2spk[utt][1][0] if utt in utt2spk else UNKNOWN_SPEAKER
        whole = start == 0 and end is None
        utterances.append(Utterance(utt, recordings[rec], stop - start, text, speaker, None if whole else start))
    return utterances


def prepare(
    kaldi_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    dev_dir: str | os.PathLike | None = None,
    test_dir: str | os.PathLike | None = None,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    split_by: str = "speaker",
) -> dict:
    """Import Kaldi data dir(s) as train/dev/test manifests; return the summary.

    `kaldi_dir` is split by speaker or file (see `folder.prepare`), except that a split given
    its own dir (`dev_dir`, `test_dir`) is taken from that dir as it is.
    """
    skipped: Counter = Counter()
    main = read_dir(kaldi_dir, skipped)
    given = {name: read_dir(d, skipped) for name, d in (("dev", dev_dir), ("test", test_dir)) if d is not None}
    if len(given) == 2:
        splits = {"train": main}
    else:
        dev = 0.0 if "dev" in given else dev_fraction
        test = 0.0 if "test" in given else test_fraction
        splits = split_utterances(main, split_by, dev, test, seed)
    splits.update(given)
    return write_splits(out_dir, splits, skipped, corpus="kaldi", source=Path(kaldi_dir).absolute())


def _fmt(seconds: float) -> str:
    return f"{seconds:.3f}"


def _check_token(value: str, what: str, utt: Utterance, manifest: Path) -> None:
    if not value or re.search(r"\s", value):
        raise CorpusError(f"{manifest}: utterance '{utt.id}': {what} '{value}' is empty or has whitespace, which Kaldi cannot store")


def export(manifest_path: str | os.PathLike, kaldi_dir: str | os.PathLike) -> Path:
    """Write a manifest as a Kaldi data dir (wav.scp, text, utt2spk, spk2utt, segments); return it.

    Files are sorted by id as Kaldi requires and written atomically. `segments` is written when
    any utterance has an offset; recordings are then named after their audio file, and
    utterances without an offset get the segment `0 -1` (the whole file).
    """
    manifest_path, kaldi_dir = Path(manifest_path), Path(kaldi_dir)
    utterances = sorted(read_manifest(manifest_path), key=lambda u: u.id)
    for u in utterances:
        _check_token(u.id, "id", u, manifest_path)
        _check_token(u.speaker, "speaker", u, manifest_path)

    def write(name: str, lines: list[str]) -> None:
        with atomic_open(kaldi_dir / name) as f:
            f.writelines(line + "\n" for line in lines)

    write("text", [f"{u.id} {' '.join(u.text.split())}" for u in utterances])
    write("utt2spk", [f"{u.id} {u.speaker}" for u in utterances])
    spk2utt: dict[str, list[str]] = {}
    for u in utterances:
        spk2utt.setdefault(u.speaker, []).append(u.id)
    write("spk2utt", [f"{spk} {' '.join(ids)}" for spk, ids in sorted(spk2utt.items())])

    if any(u.offset is not None for u in utterances):
        rec_of: dict[str, str] = {}  # audio path -> recording id, unique
        taken: set[str] = set()
        for audio in sorted({u.audio for u in utterances}):
            stem = re.sub(r"\s+", "_", Path(audio).stem) or "rec"
            rec, n = stem, 1
            while rec in taken:
                n += 1
                rec = f"{stem}-{n}"
            rec_of[audio] = rec
            taken.add(rec)
        write("wav.scp", [f"{rec} {audio}" for audio, rec in sorted(rec_of.items(), key=lambda item: item[1])])
        write("segments", [
            f"{u.id} {rec_of[u.audio]} " + ("0 -1" if u.offset is None else f"{_fmt(u.offset)} {_fmt(u.offset + u.duration)}")
            for u in utterances
        ])
    else:
        write("wav.scp", [f"{u.id} {u.audio}" for u in utterances])
        (kaldi_dir / "segments").unlink(missing_ok=True)

    speakers = [u.speaker for u in utterances]
    if speakers != sorted(speakers):
        console.print(
            f"[yellow]warning:[/yellow] {kaldi_dir}: utterance ids do not start with their speaker, so Kaldi's "
            f"validate_data_dir.sh will complain that utt2spk and spk2utt sort differently; prefix ids with the speaker"
        )
    return kaldi_dir
