"""Phones as the recogniser's units: a tokenizer that spells each word by its pronunciation in a lexicon.

English spelling is far from its sound, and an hour of speech is too little to learn it: a model that emits
phones only has to learn what is said, and decoding turns phones into words through the lexicon and a word LM
(decode/lexicon_lm.py), as hybrid recognisers and lexicon-based CTC decoders do.

Ids 0-4 are the reserved specials, 5 is ``▁`` (a word starts, as in sentencepiece's pieces), then the phones
in sorted order. ``encode("the cat")`` gives ``▁ dh ah ▁ k ae t``; a word the lexicon does not know gives
``▁ <unk>`` (training leaves such utterances out). ``decode`` maps each word's phones back to the lexicon's
word with that pronunciation (homophones: the one most frequent in the tokenizer's training texts); a phone
sequence that is no word's is written in capitals (``KAET``), so that it scores as an error; ``transcript``,
what people read, writes the word whose pronunciation is fewest phone edits away instead.

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
from asr_transformer.data.tokenizer_format import FORMAT, VERSION
from asr_transformer.fileio import atomic_open, write_json
from asr_transformer.text import NormalizerConfig, normalize
from asr_transformer.tokens import MASK, SPECIAL_TOKENS, UNK

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
        self._by_length = None  # length → (preference ranks, phone ids) of the pronunciations, for `nearest_word`
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

    def phone_ids(self, pron: tuple[str, ...]) -> list[int]:
        """A pronunciation (phones this tokenizer knows, as `pronounce` gives them) → its phone ids."""
        return [self._ids[ph] for ph in pron]

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in self.normalize(text).split():
            prons = self.pronounce(word)
            ids += [self.word_start] + ([self._ids[ph] for ph in prons[0]] if prons else [UNK])
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → words; special ids are dropped, a phone sequence no word has is written in capitals (``KAET``), so
        that it scores as an error (the trainer's dev CER). `transcript` writes the nearest word instead."""
        return " ".join(self.word(phones) for phones in self.split_words(ids))

    def transcript(self, ids: Iterable[int]) -> str:
        """Ids → words for people: as `decode`, but a phone sequence no word has becomes the nearest word."""
        return " ".join(self.spoken_word(phones) for phones in self.split_words(ids))

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
        """One word's phone ids → the lexicon's word with that pronunciation, or the phones in capitals."""
        pron = tuple(self._pieces[i] for i in phones)
        return self.word_of.get(pron) or "".join(pron).upper()

    def spoken_word(self, phones: list[int]) -> str:
        """One word's phone ids → the lexicon's word with that pronunciation, or else the nearest one's."""
        pron = tuple(self._pieces[i] for i in phones)
        return self.word_of.get(pron) or self.nearest_word(pron)

    def nearest_word(self, pron: tuple[str, ...]) -> str:
        """The lexicon's word whose pronunciation is the fewest phone edits (insertions, deletions, substitutions)
        from `pron`; among equals, the preferred one (the lexicon's order). Cached.

        Edit distances are computed for all pronunciations of a length at once (numpy, one pass per phone of
        `pron`), nearest lengths first: a pronunciation k phones longer or shorter is at least k edits away, so
        lengths within k of `pron`'s suffice once the best distance found is at most k."""
        if pron in self._nearest:
            return self._nearest[pron]
        if self._by_length is None:
            prons = list(self.word_of)
            self._by_length = {}
            for length in sorted({len(p) for p in prons}):
                rows = [r for r, p in enumerate(prons) if len(p) == length]
                table = np.array([[self._ids.get(ph, -2) for ph in prons[r]] for r in rows], np.int16)
                self._by_length[length] = (np.array(rows), table)
            self._prons = prons
        query = np.array([self._ids.get(ph, -3) for ph in pron], np.int16)
        n, best = len(query), (np.iinfo(np.int64).max, 0)  # (distance, preference rank)
        for low, high in ((0, 1), (2, 2), (3, 4), (5, max(self._by_length) + n)):  # |length difference|
            for length, (rows, table) in self._by_length.items():
                if low <= abs(length - n) <= high:
                    distance = _edit_distances(query, table)
                    i = int(np.lexsort((rows, distance))[0])
                    best = min(best, (int(distance[i]), int(rows[i])))
            if best[0] <= high:  # any word of a length not yet tried is more than `high` edits away
                break
        word = self.word_of[self._prons[best[1]]]
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


def _edit_distances(query: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Levenshtein distances from `query` (n,) to every row of `table` (N, L) of phone ids → (N,).

    Row by row of the classic table; within a row the insertions' chain  d[j] = min(c[j], d[j−1] + 1)  is the
    running minimum of c[j] − j, plus j."""
    N, L = table.shape
    steps = np.arange(L + 1, dtype=np.int16)
    previous = np.broadcast_to(steps, (N, L + 1))
    for i, phone in enumerate(query, 1):
        c = np.empty((N, L + 1), np.int16)
        c[:, 0] = i
        c[:, 1:] = np.minimum(previous[:, :-1] + (table != phone), previous[:, 1:] + 1)
        previous = np.minimum.accumulate(c - steps, axis=1) + steps
    return previous[:, L]
