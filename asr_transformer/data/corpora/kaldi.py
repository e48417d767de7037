"""Kaldi data directories, in and out.

A Kaldi data dir holds `wav.scp` (`<recording-id> <audio>`), `text` (`<utt-id> <words>`),
`utt2spk` (`<utt-id> <speaker>`, optional here) and optionally `segments`
(`<utt-id> <recording-id> <start> <end>`, seconds; end -1 = to the end of the file). Without
`segments` the utterance ids are the recording ids.

The audio of a `wav.scp` line is a file path, taken relative to the current folder as Kaldi
does, or a command ending in `|` (`flac -c -d -s f.flac |`, `sph2pipe -f wav f.sph |`) that
writes a WAV file to stdout. `prepare` runs each such command once, with the shell as Kaldi
does, and keeps its audio as `<out>/audio/<recording-id>.flac` (as ESPnet's format_wav_scp.sh
does), so that training never runs them again. A command that fails or writes no audio is an
error naming wav.scp and its line.

`prepare` imports one dir and splits it like `folder.prepare`, or takes dev and test from
their own dirs (`dev_dir`, `test_dir`) as given. `export` writes a manifest as a Kaldi dir whose
`wav.scp` Kaldi's programs read: Kaldi reads only 16-bit PCM WAV files itself, so other audio is
listed as a command that converts it (`flac -c -d -s PATH |`, `sox PATH -t wav -b 16 - |`).
"""

from __future__ import annotations

import io
import os
import re
import shlex
import struct
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import numpy as np
import soundfile as sf

from asr_transformer.progress import track
from asr_transformer.data.corpora.common import (
    CorpusError,
    console,
    measure,
    read_lines,
    skip,
    split_corpus,
    write_splits,
)
from asr_transformer.data.manifest import UNKNOWN_SPEAKER, Utterance, read_manifest
from asr_transformer.fileio import atomic_open

# How much of a failed command's stderr an error message quotes (its end: where tools explain).
STDERR_TAIL_CHARS = 300


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


# --- wav.scp commands -------------------------------------------------------------------------


def _stderr_tail(stderr: bytes) -> str:
    """The end of a command's stderr, on one line."""
    text = " / ".join(line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip())
    if not text:
        return "no message on stderr"
    return "stderr: " + ("…" + text[-STDERR_TAIL_CHARS:] if len(text) > STDERR_TAIL_CHARS else text)


def _streamed_wav(data: bytes) -> bytes:
    """`data` with the data chunk's size filled in where a program writing WAV to a pipe left it 0
    (it cannot seek back to write it); Kaldi reads such 'stream mode' files to the end, and so do we."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return data
    pos = 12
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        if chunk == b"data":
            if size == 0:
                return data[: pos + 4] + struct.pack("<I", len(data) - pos - 8) + data[pos + 8 :]
            return data
        pos += 8 + size + (size & 1)
    return data


def convert_command(command: str, flac: str | os.PathLike, where: str) -> None:
    """Run a wav.scp `command` (its text before the final `|`) with the shell and store the audio it writes
    to stdout as the FLAC file `flac` (atomically; 16-bit, or 24-bit for deeper or float audio; channels kept).
    A command that fails or writes no audio raises CorpusError starting with `where` (wav.scp:line)."""
    result = subprocess.run(command, shell=True, stdin=subprocess.DEVNULL, capture_output=True)
    stderr = _stderr_tail(result.stderr)
    if result.returncode != 0:
        raise CorpusError(f"{where}: the command failed (exit status {result.returncode}); {stderr}")
    if not result.stdout:
        raise CorpusError(f"{where}: the command wrote no audio to stdout; {stderr}")
    try:
        with sf.SoundFile(io.BytesIO(_streamed_wav(result.stdout))) as f:
            rate, subtype = f.samplerate, f.subtype
            if subtype in ("PCM_S8", "PCM_U8", "PCM_16", "ULAW", "ALAW"):
                samples, depth = f.read(dtype="int16", always_2d=True), "PCM_16"
            elif subtype in ("PCM_24", "PCM_32"):
                samples, depth = f.read(dtype="int32", always_2d=True), "PCM_24"
            else:  # float (or compressed) samples: read as such, since reading them as integers does not scale them
                samples, depth = np.clip(f.read(dtype="float64", always_2d=True), -1.0, 1.0), "PCM_24"
    except Exception:  # soundfile raises several types for data that is not audio
        raise CorpusError(f"{where}: the command wrote {len(result.stdout)} bytes to stdout that are not a WAV "
                          f"file (nor other audio soundfile reads); {stderr}") from None
    if samples.shape[0] == 0:
        raise CorpusError(f"{where}: the command wrote audio without samples; {stderr}")
    with atomic_open(flac, "wb") as out:
        sf.write(out, samples, rate, format="FLAC", subtype=depth)


def _convert_commands(commands: dict[str, tuple[str, str]], audio_dir: Path, jobs: int | None) -> dict[str, str]:
    """Run each recording's command once, `jobs` at a time (default: one per core), keeping its audio as
    `<audio_dir>/<recording-id>.flac`. commands: {recording: (command, where)} → {recording: FLAC path}."""
    flacs = {rec: os.path.abspath(audio_dir / f"{quote(rec, safe='')}.flac") for rec in commands}  # a slash stays one file
    pool = ThreadPoolExecutor(max(1, jobs or os.cpu_count() or 1))
    try:
        done = pool.map(lambda rec: convert_command(commands[rec][0], flacs[rec], commands[rec][1]), commands)
        for _ in track(done, "running wav.scp commands", len(commands)):
            pass
    finally:
        pool.shutdown(cancel_futures=True)  # after an error, start no more commands
    return flacs


# --- import -----------------------------------------------------------------------------------


def read_dir(kaldi_dir: str | os.PathLike, skipped: Counter, audio_dir: str | os.PathLike,
             jobs: int | None = None) -> list[Utterance]:
    """Utterances of one Kaldi data dir; unusable audio and missing transcripts go to `skipped`.

    The audio of wav.scp commands is stored in `audio_dir` (see `convert_command`); only recordings that
    an utterance uses are read or converted, each once.
    """
    kaldi_dir = Path(kaldi_dir)
    for name in ("wav.scp", "text"):
        if not (kaldi_dir / name).is_file():
            raise CorpusError(f"{kaldi_dir}: not a Kaldi data dir: '{name}' not found")
    wav_scp = kaldi_dir / "wav.scp"
    table = _read_table(wav_scp, None)
    recordings: dict[str, str] = {}
    commands: dict[str, tuple[str, str]] = {}  # recording -> (command, where it is)
    for rec, (lineno, (value,)) in table.items():
        if not value:
            raise CorpusError(f"{wav_scp}:{lineno}: recording '{rec}' has no audio path")
        if value.endswith("|"):
            command = value[:-1].strip()
            if not command:
                raise CorpusError(f"{wav_scp}:{lineno}: recording '{rec}' has an empty command before '|'")
            commands[rec] = (command, f"{wav_scp}:{lineno}: recording '{rec}'")
        else:
            recordings[rec] = os.path.abspath(value)
    texts = _read_table(kaldi_dir / "text", None)
    utt2spk = _read_table(kaldi_dir / "utt2spk", 2) if (kaldi_dir / "utt2spk").is_file() else {}

    # (utt, recording, start, end or None)
    pieces: list[tuple[str, str, float, float | None]] = []
    segments = kaldi_dir / "segments"
    if segments.is_file():
        for utt, (lineno, (rec, start, end)) in _read_table(segments, 4).items():
            where = f"{segments}:{lineno}"
            if rec not in table:
                raise CorpusError(f"{where}: recording '{rec}' is not in {wav_scp}")
            try:
                start_s, end_s = float(start), float(end)
            except ValueError:
                raise CorpusError(f"{where}: start and end must be numbers, got '{start}' '{end}'") from None
            if start_s < 0 or (end_s != -1 and end_s <= start_s):
                raise CorpusError(f"{where}: need 0 <= start < end (or end = -1), got {start} {end}")
            pieces.append((utt, rec, start_s, None if end_s == -1 else end_s))
    else:
        pieces = [(rec, rec, 0.0, None) for rec in table]

    used = {rec for _, rec, _, _ in pieces}
    commands = {rec: command for rec, command in commands.items() if rec in used}
    if commands:
        recordings.update(_convert_commands(commands, Path(audio_dir), jobs))
    used_recordings = [(rec, path) for rec, path in recordings.items() if rec in used]
    durations = {rec: measure(path, skipped) for rec, path in track(used_recordings, "reading audio", len(used_recordings))}

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
    jobs: int | None = None,
) -> dict:
    """Import Kaldi data dir(s) as train/dev/test manifests; return the summary.

    `kaldi_dir` is split by speaker or file (see `folder.prepare`), except that a split given
    its own dir (`dev_dir`, `test_dir`) is taken from that dir as it is. The audio of wav.scp
    commands goes to `<out_dir>/audio` (a given dir's to `audio/dev`, `audio/test`); `jobs`
    commands run at once (default: one per core).
    """
    skipped: Counter = Counter()
    out_dir = Path(out_dir)
    main = read_dir(kaldi_dir, skipped, out_dir / "audio", jobs)
    given: dict[str, list[Utterance]] = {}
    if dev_dir is not None:
        given["dev"] = read_dir(dev_dir, skipped, out_dir / "audio" / "dev", jobs)
    if test_dir is not None:
        same = dev_dir is not None and Path(test_dir).resolve() == Path(dev_dir).resolve()
        given["test"] = given["dev"] if same else read_dir(test_dir, skipped, out_dir / "audio" / "test", jobs)
    if len(given) == 2:
        splits, how = {"train": main}, ""
    else:
        dev = 0.0 if "dev" in given else dev_fraction
        test = 0.0 if "test" in given else test_fraction
        splits, how = split_corpus(main, split_by, dev, test, seed)
    splits.update(given)
    return write_splits(out_dir, splits, skipped, corpus="kaldi", source=Path(kaldi_dir).absolute(), split_by=how)


# --- export -----------------------------------------------------------------------------------


def kaldi_audio(audio: str) -> str:
    """What wav.scp says for `audio` so that Kaldi's programs read it: the path of a 16-bit PCM WAV file
    (the only audio Kaldi reads itself), else a command writing one to stdout: `flac -c -d -s PATH |` for
    16-bit FLAC, `sox PATH -t wav -b 16 - |` for anything else. The file's header decides; a file that
    cannot be read here is judged by its extension (.wav, .flac)."""
    try:
        info = sf.info(audio)
        kind = (info.format, info.subtype)
    except Exception:  # soundfile raises several types; the audio may live on the machine that runs Kaldi
        kind = {".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16")}.get(Path(audio).suffix.lower())
    if kind in (("WAV", "PCM_16"), ("WAVEX", "PCM_16")):
        return audio
    if kind == ("FLAC", "PCM_16"):
        return f"flac -c -d -s {shlex.quote(audio)} |"
    return f"sox {shlex.quote(audio)} -t wav -b 16 - |"


def _fmt(seconds: float) -> str:
    return f"{seconds:.3f}"


def _check_token(value: str, what: str, utt: Utterance, manifest: Path) -> None:
    if not value or re.search(r"\s", value):
        raise CorpusError(f"{manifest}: utterance '{utt.id}': {what} '{value}' is empty or has whitespace, which Kaldi cannot store")


def export(manifest_path: str | os.PathLike, kaldi_dir: str | os.PathLike) -> Path:
    """Write a manifest as a Kaldi data dir (wav.scp, text, utt2spk, spk2utt, segments); return it.

    Files are sorted by id as Kaldi requires and written atomically. wav.scp lists audio as
    `kaldi_audio` says. `segments` is written when any utterance has an offset (a segment of a
    longer recording); recordings are then named after their audio file, each listed once, and
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
        write("wav.scp", [f"{rec} {kaldi_audio(audio)}" for audio, rec in sorted(rec_of.items(), key=lambda item: item[1])])
        write("segments", [
            f"{u.id} {rec_of[u.audio]} " + ("0 -1" if u.offset is None else f"{_fmt(u.offset)} {_fmt(u.offset + u.duration)}")
            for u in utterances
        ])
    else:
        write("wav.scp", [f"{u.id} {kaldi_audio(u.audio)}" for u in utterances])
        (kaldi_dir / "segments").unlink(missing_ok=True)

    speakers = [u.speaker for u in utterances]
    if speakers != sorted(speakers):
        console.print(
            f"[yellow]warning:[/yellow] {kaldi_dir}: utterance ids do not start with their speaker, so Kaldi's "
            f"validate_data_dir.sh will complain that utt2spk and spk2utt sort differently; prefix ids with the speaker"
        )
    return kaldi_dir
