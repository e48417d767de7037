"""Phones as the recogniser's units: a tokenizer that spells each word by its pronunciation in a lexicon.

English spelling is far from its sound, and an hour of speech is too little to learn it: a model that emits
phones only has to learn what is said, and decoding turns phones into words through the lexicon and a word LM
(decode/lexicon_lm.py), as hybrid recognisers and lexicon-based CTC decoders do.

Ids 0-4 are the reserved specials, 5 is ``▁`` (a word starts, as in sentencepiece's pieces), then the phones
in sorted order. ``encode("the cat")`` gives ``▁ dh ah ▁ k ae t``; a word the lexicon does not know gives
``▁ <unk>`` (training leaves such utterances out). ``decode`` maps each word's phones back to the lexicon's
word with that pronunciation (homophones: the one most frequent in the tokenizer's training texts); a phone
sequence that is no word's becomes the word whose pronunciation is fewest phone edits away, so a transcript
holds only words.

A phone tokenizer is a directory holding ``tokenizer.json`` (format, unit type ``phone``, normalizer, phones)
and ``lexicon.txt`` (CMUdict format, homophones in order of preference), both written atomically.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

import numpy as np

from asr_transformer.data.lexicon import ENDING_PHONES, Lexicon, parse_lexicon, pronunciations, read_lexicon
from asr_transformer.fileio import atomic_open, write_json
from asr_transformer.model.tokens import MASK, SPECIAL_TOKENS, UNK
from asr_transformer.text import NormalizerConfig, normalize

WORD_START = "▁"


class PhoneTokenizer:
    """Text ↔ phone ids through a pronunciation lexicon; the interface of `Tokenizer`."""

    model_type = "phone"

    def __init__(self, lexicon: Lexicon, phones: list[str], normalizer: NormalizerConfig, model_bytes: bytes):
        self.lexicon, self.normalizer, self.model_bytes = lexicon, normalizer, model_bytes
        self._pieces = [*SPECIAL_TOKENS, WORD_START, *phones]
        self._ids = {p: i for i, p in enumerate(self._pieces) if i > MASK}
        self.word_start = self._ids[WORD_START]
        self.word_of: dict[tuple[str, ...], str] = {}  # pronunciation → preferred word
        self._nearest: dict[tuple[str, ...], str] = {}  # a pronunciation no word has → the nearest word
        self._table = None  # every pronunciation as phone ids, for `nearest_word`
        for word, prons in lexicon.items():
            for pron in prons:
                self.word_of.setdefault(pron, word)

    @classmethod
    def load(cls, directory: str | os.PathLike, meta: dict) -> "PhoneTokenizer":
        return cls.from_bytes((Path(directory) / "lexicon.txt").read_bytes(), meta)

    @classmethod
    def from_bytes(cls, model_bytes: bytes, meta: dict) -> "PhoneTokenizer":
        """Rebuild from what a model package stores: the lexicon file's bytes and the metadata."""
        lexicon = parse_lexicon(model_bytes.decode("utf-8").splitlines(), "the tokenizer's lexicon.txt")
        return cls(lexicon, list(meta["phones"]), NormalizerConfig(**meta["normalizer"]), model_bytes)

    def meta(self) -> dict:
        from asr_transformer.data.tokenizer import FORMAT, VERSION

        return {"format": FORMAT, "version": VERSION, "model_type": self.model_type,
                "normalizer": asdict(self.normalizer), "phones": self._pieces[MASK + 2:]}

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def normalize(self, text: str) -> str:
        return normalize(text, self.normalizer)

    def pronounce(self, word: str) -> list[tuple[str, ...]]:
        """The word's pronunciations (phones this tokenizer knows only); [] when the lexicon has none."""
        return [p for p in pronunciations(word, self.lexicon) if all(ph in self._ids for ph in p)]

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in self.normalize(text).split():
            prons = self.pronounce(word)
            ids += [self.word_start] + ([self._ids[ph] for ph in prons[0]] if prons else [UNK])
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → words; special ids are dropped, a phone sequence no word has becomes the nearest word."""
        return " ".join(self.word(phones) for phones in self.split_words(ids))

    def split_words(self, ids: Iterable[int]) -> list[list[int]]:
        """Ids → the phone ids of each word (split at ``▁``; special ids dropped, empty words skipped)."""
        words, current = [], []
        for i in [*(int(i) for i in ids if int(i) > MASK), self.word_start]:
            if i != self.word_start:
                current.append(i)
            elif current:
                words.append(current)
                current = []
        return words

    def word(self, phones: list[int]) -> str:
        """One word's phone ids → the lexicon's word with that pronunciation, or else the nearest one's."""
        pron = tuple(self._pieces[i] for i in phones)
        return self.word_of.get(pron) or self.nearest_word(pron)

    def nearest_word(self, pron: tuple[str, ...]) -> str:
        """The lexicon's word whose pronunciation is the fewest phone edits (insertions, deletions, substitutions)
        from `pron`; among equals, the preferred one (the lexicon's order). One vectorized edit-distance pass over
        every pronunciation (tens of milliseconds for CMUdict), cached."""
        if pron in self._nearest:
            return self._nearest[pron]
        if self._table is None:
            prons = list(self.word_of)
            table = np.full((len(prons), max(map(len, prons))), -1, np.int32)
            for row, p in enumerate(prons):
                table[row, :len(p)] = [self._ids.get(ph, -2) for ph in p]
            self._table = (prons, table, np.array([len(p) for p in prons]))
        prons, table, lengths = self._table
        n, width = len(table), table.shape[1]
        previous = np.tile(np.arange(width + 1), (n, 1))  # distances from the empty prefix of `pron`
        for i, phone in enumerate(pron, 1):
            keep_or_swap = previous[:, :-1] + (table != self._ids.get(phone, -3))
            best = np.minimum(keep_or_swap, previous[:, 1:] + 1)  # or delete that phone of `pron`
            current = np.empty_like(previous)
            current[:, 0] = i
            for j in range(1, width + 1):  # or insert a candidate's phone
                current[:, j] = np.minimum(best[:, j - 1], current[:, j - 1] + 1)
            previous = current
        word = self.word_of[prons[int(np.argmin(previous[np.arange(n), lengths]))]]
        self._nearest[pron] = word
        return word

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._pieces[int(i)] for i in ids]


def train_phone_tokenizer(texts: Iterable[str], out_dir: str | os.PathLike, lexicon_path: str | os.PathLike,
                          normalizer: NormalizerConfig = NormalizerConfig()) -> tuple[PhoneTokenizer, Counter]:
    """Write a phone tokenizer for `lexicon_path` into `out_dir`.

    Homophones are ordered by their frequency in `texts` (then the lexicon's order), so that `decode` prefers
    the common word. Returns the tokenizer and the words of `texts` it cannot pronounce, with their counts.
    """
    lexicon = read_lexicon(lexicon_path)
    counts = Counter(w for t in texts for w in normalize(t, normalizer).split())
    if not counts:
        raise ValueError("tokenizer: no text to train on (all transcripts empty after normalization)")
    rank = {w: i for i, (w, _) in enumerate(counts.most_common())}
    order = sorted(lexicon, key=lambda w: rank.get(w, len(rank)))  # stable: then the lexicon's own order
    phones = sorted({ph for prons in lexicon.values() for pron in prons for ph in pron} | set(ENDING_PHONES))
    out_dir = Path(out_dir)
    with atomic_open(out_dir / "lexicon.txt") as f:
        for word in order:
            for n, pron in enumerate(lexicon[word]):
                f.write(f"{word}{f'({n + 1})' if n else ''} {' '.join(pron)}\n")
    tok = PhoneTokenizer.load(out_dir, {"phones": phones, "normalizer": asdict(normalizer)})
    write_json(out_dir / "tokenizer.json", tok.meta())
    return tok, Counter({w: c for w, c in counts.items() if not tok.pronounce(w)})
