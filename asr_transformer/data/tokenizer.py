"""sentencepiece tokenizer with fixed special ids and the project's text normalizer.

`load_tokenizer` and `tokenizer_from_bytes` also read the other kinds: phones (data/phones.py) and, from a
package, Whisper's BPE (data/whisper_tokenizer.py).

Ids 0-4 are reserved and the same for every model: 0 ``<blank>`` (CTC blank, also padding),
1 ``<unk>``, 2 ``<sos>`` (BEGIN), 3 ``<eos>`` (END), 4 ``<mask>`` (Mask-CTC). A tokenizer is a
directory holding ``tokenizer.model`` (sentencepiece) and ``tokenizer.json`` (format version,
unit type, normalizer options), both written atomically.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

import sentencepiece as spm

from asr_transformer.data.tokenizer_format import FORMAT, VERSION
from asr_transformer.fileio import atomic_open, read_json, write_json
from asr_transformer.text import NormalizerConfig, normalize
from asr_transformer.tokens import BLANK, EOS, MASK, SOS, UNK

MODEL_TYPES = ("unigram", "bpe", "char")


def load_tokenizer(directory: str | os.PathLike):
    """The tokenizer in `directory`: a `Tokenizer` (sentencepiece) or a `PhoneTokenizer` (data/phones.py)."""
    meta_path = Path(directory) / "tokenizer.json"
    meta = read_json(meta_path) if meta_path.exists() else {}
    if meta.get("model_type") == "phone":
        from asr_transformer.data.phones import PhoneTokenizer

        return PhoneTokenizer.load(directory, _checked(meta, meta_path))
    if meta.get("model_type") == "whisper":
        from asr_transformer.data.whisper_tokenizer import WhisperTokenizer

        return WhisperTokenizer.from_bytes((Path(directory) / "tokenizer.model").read_bytes(), _checked(meta, meta_path))
    return Tokenizer(directory)


def model_options(tokenizer) -> dict:
    """The model options (config.ModelConfig) a tokenizer fixes: its vocabulary size, and for Whisper's the
    decoder's prompt and the ids it must not emit."""
    if hasattr(tokenizer, "model_options"):
        return tokenizer.model_options()
    return {"vocab_size": tokenizer.vocab_size}


def tokenizer_from_bytes(model_bytes: bytes, meta: dict):
    """Rebuild any kind of tokenizer from what a model package stores."""
    if meta.get("model_type") == "whisper":
        from asr_transformer.data.whisper_tokenizer import WhisperTokenizer

        return WhisperTokenizer.from_bytes(model_bytes, meta)
    if meta.get("model_type") == "phone":
        from asr_transformer.data.phones import PhoneTokenizer

        return PhoneTokenizer.from_bytes(model_bytes, meta)
    return Tokenizer.from_bytes(model_bytes, meta)


def _checked(meta: dict, where) -> dict:
    if meta.get("format") != FORMAT or meta.get("version", 0) > VERSION:
        raise ValueError(f"{where}: not a tokenizer of a version this toolkit reads")
    return meta


class Tokenizer:
    """Text ↔ token ids; applies the normalizer before encoding."""

    def __init__(self, directory: str | os.PathLike):
        directory = Path(directory)
        meta_path = directory / "tokenizer.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{directory}: no tokenizer.json here; train one with `asr tokenizer`")
        meta = _checked(read_json(meta_path), meta_path)
        self.directory = directory
        self.model_type = meta["model_type"]
        self.normalizer = NormalizerConfig(**meta["normalizer"])
        self.sp = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
        self.model_bytes = (directory / "tokenizer.model").read_bytes()

    @classmethod
    def from_bytes(cls, model_bytes: bytes, meta: dict) -> "Tokenizer":
        """Rebuild from what a model package stores (no files needed)."""
        self = cls.__new__(cls)
        self.directory = None
        self.model_type = meta["model_type"]
        self.normalizer = NormalizerConfig(**meta["normalizer"])
        self.sp = spm.SentencePieceProcessor(model_proto=model_bytes)
        self.model_bytes = model_bytes
        return self

    def meta(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "model_type": self.model_type,
                "normalizer": asdict(self.normalizer)}

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def normalize(self, text: str) -> str:
        return normalize(text, self.normalizer)

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(self.normalize(text))

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → text; special ids are dropped."""
        return self.sp.decode([int(i) for i in ids if int(i) > MASK])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def word_pieces(self, ids: Iterable[int]) -> list[str]:
        """Each id's piece, "▁" marking a word start (decode/word_lm.py reads words from these)."""
        return self.pieces(ids)


def train_tokenizer(
    texts: Iterable[str],
    out_dir: str | os.PathLike,
    vocab_size: int = 300,
    model_type: str = "unigram",
    normalizer: NormalizerConfig = NormalizerConfig(),
    character_coverage: float = 1.0,
) -> Tokenizer:
    """Train sentencepiece on normalized `texts` into `out_dir`; returns the loaded tokenizer.

    For ``char`` the vocabulary is every character seen (``vocab_size`` is ignored).
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model type '{model_type}' is not one of {', '.join(MODEL_TYPES)}")
    lines = [normalize(t, normalizer) for t in texts]
    lines = [line for line in lines if line]
    if not lines:
        raise ValueError("tokenizer: no text to train on (all transcripts empty after normalization)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        corpus = Path(tmp) / "text.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        options = dict(
            input=str(corpus), model_prefix=str(Path(tmp) / "sp"), model_type=model_type,
            character_coverage=character_coverage, pad_id=BLANK, pad_piece="<blank>", unk_id=UNK,
            bos_id=SOS, bos_piece="<sos>", eos_id=EOS, eos_piece="<eos>", user_defined_symbols=["<mask>"],
            input_sentence_size=2_000_000, shuffle_input_sentence=True, minloglevel=2,
            num_threads=os.cpu_count() or 1,
        )
        smallest = len(set("".join(lines).replace(" ", ""))) + 6  # every character + 5 specials + ▁
        if model_type == "char":
            options["use_all_vocab"] = True
            options["vocab_size"] = smallest
        else:
            options["vocab_size"] = max(vocab_size, smallest)  # sentencepiece needs room for every character
            options["hard_vocab_limit"] = False
        spm.SentencePieceTrainer.train(**options)
        with atomic_open(out_dir / "tokenizer.model", "wb") as f:
            f.write((Path(tmp) / "sp.model").read_bytes())
    write_json(out_dir / "tokenizer.json", {"format": FORMAT, "version": VERSION, "model_type": model_type,
                                            "normalizer": asdict(normalizer)})
    return Tokenizer(out_dir)
