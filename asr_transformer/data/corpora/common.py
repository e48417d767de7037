"""Helpers shared by the corpus importers: measure, split, write, download, extract.

An importer finds audio and transcripts, measures each file from its header, splits the
utterances and calls `write_splits`, which writes `<out>/<split>.jsonl` manifests and
`<out>/summary.json`. Files that cannot be used (missing, unreadable, empty audio, no
transcript) are skipped and counted by kind, never silently: each skip is reported on stderr
(the first few of each kind) and the counts go into the summary. A malformed line in a
transcript or index file is an error (`CorpusError`) naming file and line.

Transcripts are kept as the corpus writes them; the tokenizer normalizes text.
"""

from __future__ import annotations

import json
import os
import random
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping

from rich.console import Console

from asr_transformer.data.audio import AUDIO_EXTENSIONS, AudioError, audio_info
from asr_transformer.data.manifest import Utterance, total_hours, write_manifest
from asr_transformer.fileio import current_umask, write_json
from asr_transformer.progress import BYTES, progress_bar
from asr_transformer.text import normalize
from asr_transformer.errors import UserError

SUMMARY_FORMAT = "asr-corpus-summary"
SUMMARY_VERSION = 1


# How many skipped files of one kind are named on stderr before only counting.
MAX_REPORTED_SKIPS = 10

console = Console(stderr=True, soft_wrap=True)


class CorpusError(UserError, ValueError):
    """A corpus that cannot be imported as it is; the message says where and what to do."""


# --- skipping and measuring -------------------------------------------------------------------


def skip(skipped: Counter, kind: str, message: str) -> None:
    """Count one skipped item under `kind` and report the first few of each kind on stderr."""
    skipped[kind] += 1
    if skipped[kind] <= MAX_REPORTED_SKIPS:
        console.print(f"[yellow]skipped ({kind})[/yellow] {message}", highlight=False)
    elif skipped[kind] == MAX_REPORTED_SKIPS + 1:
        console.print(f"[yellow]more '{kind}' skips are counted, not listed[/yellow]")


def measure(path: str | os.PathLike, skipped: Counter) -> float | None:
    """Duration in seconds from the audio header, or None (skip counted) if it cannot be used."""
    if not Path(path).is_file():
        skip(skipped, "missing", f"{path}: audio file not found")
        return None
    try:
        duration, _ = audio_info(path)
    except AudioError as e:
        skip(skipped, e.kind, str(e))
        return None
    return duration


def audio_files(root: str | os.PathLike) -> list[Path]:
    """Audio files under `root`, recursively, sorted; hidden files and folders are left out."""
    root = Path(root)
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if path.suffix.lower() in AUDIO_EXTENSIONS and path.is_file():
            found.append(path)
    return sorted(found)


# --- reading text -----------------------------------------------------------------------------


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file, without line ends; an encoding error names file and line."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise CorpusError(f"{path}:{line}: not UTF-8 text ({e.reason}); convert the file to UTF-8") from None
    return text.splitlines()


def read_transcript(path: str | os.PathLike) -> str:
    """The text of a one-utterance transcript file, its lines joined by spaces ("" if empty)."""
    return " ".join(line.strip() for line in read_lines(path) if line.strip())


def sidecar_transcript(audio: Path, skipped: Counter) -> str | None:
    """The text of the same-name ``.txt`` beside `audio`; None (skipped and counted) when absent, empty or not
    UTF-8 (kind "not_utf8": guessing another encoding could put wrong words into the corpus unseen)."""
    transcript = audio.with_suffix(".txt")
    if not transcript.is_file():
        skip(skipped, "no_transcript", f"{audio}: no transcript {transcript.name} beside it")
        return None
    try:
        text = read_transcript(transcript)
    except CorpusError as e:  # read_lines' only error: not UTF-8 (its message names file and line)
        skip(skipped, "not_utf8", str(e))
        return None
    if not text:
        skip(skipped, "empty_transcript", f"{transcript}: transcript is empty")
        return None
    return text


# --- splitting --------------------------------------------------------------------------------


def _check_fractions(dev_fraction: float, test_fraction: float) -> None:
    if not (0 <= dev_fraction < 1 and 0 <= test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise CorpusError(
            f"dev_fraction ({dev_fraction}) and test_fraction ({test_fraction}) must be in [0, 1) with a sum < 1"
        )


def split_by_group(
    utterances: list[Utterance],
    key: Callable[[Utterance], str],
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> dict[str, list[Utterance]]:
    """Split into train/dev/test so that no group (speaker, prompt, ...) is in two splits.

    Fractions count groups, not utterances. Groups are sorted, then shuffled with `seed`, so
    the split is deterministic. A split with a fraction > 0 gets at least one group; train
    must keep at least one, or CorpusError is raised.
    """
    _check_fractions(dev_fraction, test_fraction)
    groups = sorted({key(u) for u in utterances})
    random.Random(seed).shuffle(groups)

    def count(fraction: float) -> int:
        return max(1, round(len(groups) * fraction)) if fraction > 0 else 0

    n_test, n_dev = count(test_fraction), count(dev_fraction)
    if n_test + n_dev >= len(groups):
        raise CorpusError(
            f"only {len(groups)} groups to split into train/dev/test; need at least {n_test + n_dev + 1}"
        )
    split_of = {g: "test" for g in groups[:n_test]}
    split_of.update({g: "dev" for g in groups[n_test : n_test + n_dev]})
    splits: dict[str, list[Utterance]] = {"train": [], "dev": [], "test": []}
    for u in utterances:
        splits[split_of.get(key(u), "train")].append(u)
    return splits


def split_corpus(
    utterances: list[Utterance],
    split_by: str = "speaker",
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> tuple[dict[str, list[Utterance]], str]:
    """Split by "speaker" (no speaker in two splits) or by "text" (no sentence in two splits: the repeated
    takes of one sentence stay together, compared after case and punctuation are normalized away).

    With too few speakers to split by speaker, splits by text with a warning. "file" is the old name of "text".
    Returns the splits and how they were made ("speaker" or "text").
    """
    if split_by not in ("speaker", "text", "file"):
        raise CorpusError(f"split_by must be 'speaker' or 'text', got '{split_by}'")
    _check_fractions(dev_fraction, test_fraction)
    if split_by == "speaker":
        try:
            return split_by_group(utterances, lambda u: u.speaker, dev_fraction, test_fraction, seed), "speaker"
        except CorpusError as e:
            console.print(f"[yellow]warning:[/yellow] cannot split by speaker ({e}); splitting by text instead: "
                          "no sentence in two splits")
    return split_by_group(utterances, sentence_key, dev_fraction, test_fraction, seed), "text"


def sentence_key(utterance: Utterance) -> str:
    """What makes two transcripts the same sentence: the words, without case and punctuation."""
    return " ".join(normalize(utterance.text).split())


# --- writing ----------------------------------------------------------------------------------


SPLIT_FILES = ("train.jsonl", "dev.jsonl", "test.jsonl")


def refuse_foreign_manifests(out_dir: str | os.PathLike, force: bool = False) -> None:
    """CorpusError when `out_dir` holds split manifests that no `asr prepare` wrote (no summary.json of its
    format beside them), unless `force`: preparing never replaces a user's own manifests."""
    out_dir = Path(out_dir)
    present = [name for name in SPLIT_FILES if (out_dir / name).exists()]
    if force or not present:
        return
    try:
        ours = json.loads((out_dir / "summary.json").read_text(encoding="utf-8")).get("format") == "asr-corpus-summary"
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise CorpusError(f"{out_dir}: holds {', '.join(present)} that asr prepare did not write (no summary.json of "
                          "its own): give another --out, or --force to replace them")


def write_splits(
    out_dir: str | os.PathLike,
    splits: Mapping[str, list[Utterance]],
    skipped: Mapping[str, int] | None = None,
    corpus: str = "",
    source: str | os.PathLike = "",
    split_by: str = "",
) -> dict:
    """Write `<out_dir>/<name>.jsonl` for each split and `<out_dir>/summary.json`; return the summary.

    Utterances are written sorted by id. The summary::

        {"format": "asr-corpus-summary", "version": 1, "corpus": ..., "source": ..., "split_by": "speaker"|"text",
         "splits": {"train": {"manifest": path, "utterances": n, "hours": h, "speakers": k}, ...},
         "skipped": {"unreadable": 2, "missing": 1, ...}}
    """
    out_dir = Path(out_dir)
    summary: dict = {
        "format": SUMMARY_FORMAT,
        "version": SUMMARY_VERSION,
        "corpus": corpus,
        "source": str(source),
        **({"split_by": split_by} if split_by else {}),
        "splits": {},
        "skipped": dict(sorted((skipped or {}).items())),
    }
    for name, utterances in splits.items():
        utterances = sorted(utterances, key=lambda u: u.id)
        for a, b in zip(utterances, utterances[1:]):
            if a.id == b.id:
                raise CorpusError(f"split '{name}': two utterances have the id '{a.id}' ({a.audio} and {b.audio})")
        if not utterances:
            console.print(f"[yellow]warning:[/yellow] split '{name}' is empty")
        path = out_dir / f"{name}.jsonl"
        write_manifest(path, utterances)
        summary["splits"][name] = {
            "manifest": str(path),
            "utterances": len(utterances),
            "hours": total_hours(utterances),
            "speakers": len({u.speaker for u in utterances}),
        }
    write_json(out_dir / "summary.json", summary)
    return summary


def print_summary(summary: dict) -> None:
    """Show a summary from `write_splits` as a table on stderr."""
    from rich.table import Table

    table = Table(title=f"{summary.get('corpus') or 'corpus'} → {len(summary['splits'])} manifests")
    for column in ("split", "utterances", "hours", "speakers", "manifest"):
        table.add_column(column, justify="right" if column in ("utterances", "hours", "speakers") else "left")
    for name, s in summary["splits"].items():
        table.add_row(name, str(s["utterances"]), f"{s['hours']:.2f}", str(s["speakers"]), s["manifest"])
    console.print(table)
    if summary["skipped"]:
        counts = ", ".join(f"{kind}: {n}" for kind, n in summary["skipped"].items())
        console.print(f"[yellow]skipped[/yellow] {counts}")


# --- downloading and extracting ---------------------------------------------------------------


def download(url: str, dest: str | os.PathLike, timeout: float = 60.0,
             advice: str = "download it yourself, extract it and pass its folder with --source") -> Path:
    """Download `url` to the file `dest` with a progress bar; atomic (temp file + rename).

    Does nothing if `dest` exists. Raises CorpusError with what to do when offline (`advice`).
    """
    dest = Path(dest)
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.chmod(fd, 0o666 & ~current_umask())
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "asr-transformer"})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as response:
            size = response.headers.get("Content-Length")
            with progress_bar(BYTES, transient=True) as bar:
                task = bar.add_task(f"download {dest.name}", total=int(size) if size else None)
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    bar.advance(task, len(chunk))
        os.replace(tmp, dest)
    except (urllib.error.URLError, OSError) as e:
        Path(tmp).unlink(missing_ok=True)
        reason = getattr(e, "reason", e)
        raise CorpusError(f"cannot download {url} ({reason}); check the network, or {advice}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def is_extracted(archive: str | os.PathLike, dest: str | os.PathLike) -> bool:
    """Whether `extract(archive, dest)` has completed (the archive itself may be gone)."""
    return (Path(dest) / f".{Path(archive).name}.extracted").exists()


def extract(archive: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Extract a .tar(.gz/.bz2/.xz) or .zip archive into the folder `dest`; return `dest`.

    A marker file `<dest>/.<archive name>.extracted` makes a second call a no-op. Members
    that would land outside `dest` are refused.
    """
    archive, dest = Path(archive), Path(dest)
    if is_extracted(archive, dest):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    console.print(f"extracting {archive} → {dest}", highlight=False)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            root = dest.resolve()
            for name in z.namelist():
                target = (dest / name).resolve()
                if target != root and root not in target.parents:
                    raise CorpusError(f"{archive}: member '{name}' would be written outside {dest}; not extracting")
            z.extractall(dest)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            t.extractall(dest, filter="data")
    else:
        raise CorpusError(f"{archive}: not a tar or zip archive; delete it and download again")
    (dest / f".{archive.name}.extracted").touch()
    return dest


def find_dir(root: str | os.PathLike, name: str, max_depth: int = 3) -> Path | None:
    """The folder called `name` at `root` or up to `max_depth` levels below it (first in sorted order)."""
    root = Path(root)
    level = [root]
    for _ in range(max_depth + 1):
        for folder in level:
            if folder.name == name and folder.is_dir():
                return folder
        level = sorted(p for folder in level if folder.is_dir() for p in folder.iterdir() if p.is_dir())
    return None
