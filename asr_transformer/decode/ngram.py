"""A token n-gram language model for shallow fusion: trained on text, stored as ARPA, queried in batches.

The units are the recogniser's own tokens (the tokenizer's pieces), so the LM scores exactly what the
decoder emits; `<s>` is <sos> (only ever a context) and `</s>` is <eos>.

Training is interpolated Kneser-Ney (Chen & Goodman 1998) with one discount per order,
D = n₁ / (n₁ + 2·n₂) from the counts of counts:

    p(w | h) = max(a(h w) − D, 0) / A(h)  +  γ(h) · p(w | h′),      γ(h) = D · T(h) / A(h)

where h′ drops h's first token, a(·) is the raw count at the highest order and at n-grams that start
with <s>, and the number of distinct left neighbours (the continuation count) below; A(h) sums a(h ·),
T(h) counts the distinct tokens seen after h. The lowest order interpolates with the uniform
distribution over every token the decoder can emit, so unseen tokens keep some probability.

Written as ARPA (log10, the format SRILM and KenLM read and write), an interpolated model is a back-off
model whose back-off weight is γ(h); reading ARPA therefore also takes an LM built elsewhere over the
same pieces. Queries follow ARPA's rule — p(w | h) is listed, or else back-off(h) · p(w | h′) — as a
dense vector over the vocabulary per distinct history, cached, so a beam step costs one lookup per
hypothesis.

This dict-of-dicts model is what training builds and `write_arpa` writes; for decoding, ARPA files and a
package's LMs are read into `ngram_binary.BinaryNgramLM` instead (`search.read_lm`): the same scores, held in
sorted numpy arrays that are converted once, cached and memory-mapped — a large LM loads in well under a
second instead of tens of seconds and gigabytes.
"""

from __future__ import annotations

import gzip
import io
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

import torch

from asr_transformer.errors import UserError
from asr_transformer.tokens import BLANK, EOS, MASK, NUM_SPECIAL, SOS, UNK

LN10 = math.log(10.0)
NOT_PREDICTED = (BLANK, SOS, MASK)  # never an LM outcome (as for the attention decoder)
SPECIAL_WORDS = {UNK: "<unk>", SOS: "<s>", EOS: "</s>"}
CACHE_FLOATS = 1 << 25  # the cache of dense distributions is emptied when it would hold more (128 MB)


class NgramError(UserError, ValueError):
    """A malformed ARPA file or one whose words are not this tokenizer's pieces; the message names the line."""


class BackoffQueries:
    """The queries of a back-off LM, the same for every way of storing one (`NgramLM`'s dicts,
    `ngram_binary.BinaryNgramLM`'s arrays): a subclass has `order`, `vocab_size`, a `_cache` dict, and answers
    `_unk_unigram`, `_backoff_weight` and `_listed_after` from its storage."""

    order: int
    vocab_size: int
    _cache: dict[tuple, torch.Tensor]

    def _unk_unigram(self) -> float | None:
        """log p(<unk>) as order 1 lists it, or None."""
        raise NotImplementedError

    def _backoff_weight(self, h: tuple) -> float:
        """log back-off weight of history h (len ≥ 1; 0 when the file gives none)."""
        raise NotImplementedError

    def _listed_after(self, h: tuple) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(ids (K,) int64, log p (K,) float64) of the n-grams the file lists after history h (h = () for order 1),
        or None."""
        raise NotImplementedError

    def distribution(self, history: Sequence[int]) -> torch.Tensor:
        """log p(· | history) over the vocabulary, (V,) float32; only the last order-1 ids matter."""
        h = tuple(int(t) for t in history[len(history) - (self.order - 1):]) if self.order > 1 else ()
        return self._dense(h)

    def next_log_probs(self, histories: torch.Tensor) -> torch.Tensor:
        """histories (N, L) token ids starting with <sos> → log p(next | history) (N, V) on their device."""
        keep = min(histories.size(1), self.order - 1)
        rows = histories[:, histories.size(1) - keep:].tolist() if keep > 0 else [[] for _ in range(histories.size(0))]
        return torch.stack([self._dense(tuple(r)) for r in rows]).to(histories.device)

    def sentence_log_prob(self, tokens: Sequence[int]) -> float:
        """log p(tokens </s> | <s>) (natural log)."""
        seq = [SOS, *tokens, EOS]
        return float(sum(self.distribution(seq[:i])[seq[i]] for i in range(1, len(seq))))

    def _dense(self, h: tuple) -> torch.Tensor:
        """log p(· | h) as a (V,) float32 vector by ARPA's rule, built from the shorter history's and cached."""
        vec = self._cache.get(h)
        if vec is not None:
            return vec
        if not h:
            vec = torch.full((self.vocab_size,), float("-inf"))
            unk = self._unk_unigram()
            if unk is not None:  # ids the file does not list are <unk>
                vec.fill_(unk)
                vec[list(NOT_PREDICTED)] = float("-inf")
        else:
            vec = self._dense(h[1:]) + self._backoff_weight(h)
        listed = self._listed_after(h)
        if listed is not None:
            vec = vec.clone()
            vec[listed[0]] = listed[1].to(vec.dtype)
        if (len(self._cache) + 1) * self.vocab_size > CACHE_FLOATS:
            self._cache.clear()
        self._cache[h] = vec
        return vec


class NgramLM(BackoffQueries):
    """Back-off n-gram LM over token ids 0..V-1 (natural-log probabilities).

    `prob[n]` maps a history (tuple of n-1 ids) to {next id: log p}; `backoff` maps a history to its
    log back-off weight (absent: 0).
    """

    def __init__(self, order: int, vocab_size: int, prob: dict[int, dict[tuple, dict[int, float]]],
                 backoff: dict[tuple, float], words: dict[str, int] | None = None):
        self.order, self.vocab_size = order, vocab_size
        self.prob, self.backoff = prob, backoff
        self.words = words  # a word LM's vocabulary (word → id); None for an LM over a tokenizer's pieces
        self._cache: dict[tuple, torch.Tensor] = {}

    # ------------------------------------------------------------------------------------ queries

    def _unk_unigram(self) -> float | None:
        return self.prob[1].get((), {}).get(UNK)

    def _backoff_weight(self, h: tuple) -> float:
        return self.backoff.get(h, 0.0)

    def _listed_after(self, h: tuple) -> tuple[torch.Tensor, torch.Tensor] | None:
        listed = self.prob.get(len(h) + 1, {}).get(h, {})
        if not listed:
            return None
        return torch.tensor(list(listed), dtype=torch.long), torch.tensor(list(listed.values()), dtype=torch.float64)

    def ngram_counts(self) -> list[int]:
        """The n-grams listed of each order 1..order (those ending in <s>, a context only, not counted)."""
        return [sum(len(w) for w in self.prob.get(n, {}).values()) for n in range(1, self.order + 1)]

    def log_prob(self, history: Sequence[int], token: int) -> float:
        """log p(token | history) without building a dense distribution (for large vocabularies)."""
        h = tuple(history[len(history) - (self.order - 1):]) if self.order > 1 else ()
        return _log_prob(self.prob, self.backoff, h, token)

    # -------------------------------------------------------------------------------------- ARPA

    def write_arpa(self, path: str | os.PathLike, pieces: Sequence[str]) -> None:
        """Write ARPA (log10) with the tokenizer's `pieces` (id → piece) as words; atomically."""
        from asr_transformer.fileio import atomic_open

        def word(i: int) -> str:
            return SPECIAL_WORDS.get(i) or pieces[i]

        entries = {n: sorted((h + (w,), lp) for h, ws in self.prob[n].items() for w, lp in ws.items())
                   for n in range(1, self.order + 1)}
        if self.order > 1 and (SOS,) in self.backoff:  # <s> is a context only: listed with log10 p = -99
            entries[1] = sorted(entries[1] + [((SOS,), -99.0 * LN10)])
        with atomic_open(path) as f:
            f.write("\\data\\\n")
            for n in range(1, self.order + 1):
                f.write(f"ngram {n}={len(entries[n])}\n")
            for n in range(1, self.order + 1):
                f.write(f"\n\\{n}-grams:\n")
                for gram, lp in entries[n]:
                    line = f"{lp / LN10:.6f}\t{' '.join(word(i) for i in gram)}"
                    if n < self.order and gram in self.backoff:
                        line += f"\t{self.backoff[gram] / LN10:.6f}"
                    f.write(line + "\n")
            f.write("\n\\end\\\n")

    @classmethod
    def read_arpa(cls, path: str | os.PathLike, pieces: Sequence[str] | None) -> "NgramLM":
        """Read ARPA whose words are `pieces` (the model's tokenizer, id → piece) or <s>, </s>, <unk>.

        pieces=None reads a word LM (`asr lm --words`): its words get ids in the order the file lists them,
        after the special ids, and `words` maps them."""
        with open(path, encoding="utf-8") as f:
            return cls.parse_arpa(f, pieces, path)

    @classmethod
    def from_packed(cls, packed: bytes, pieces: Sequence[str] | None, where: str) -> "NgramLM":
        """Read the gzip-compressed ARPA text that `pack_arpa` made (a model package stores LMs so)."""
        with io.TextIOWrapper(gzip.GzipFile(fileobj=io.BytesIO(packed)), encoding="utf-8") as f:
            return cls.parse_arpa(f, pieces, where)

    @classmethod
    def parse_arpa(cls, lines: Iterable[str], pieces: Sequence[str] | None, path) -> "NgramLM":
        """`read_arpa` of ARPA text lines; `path` names them in errors."""
        if pieces is None:
            ids = {w: i for i, w in SPECIAL_WORDS.items()}
        else:
            ids = {p: i for i, p in enumerate(pieces) if i not in NOT_PREDICTED and i not in SPECIAL_WORDS}
            ids.update({w: i for i, w in SPECIAL_WORDS.items()})
        prob: dict[int, dict[tuple, dict[int, float]]] = defaultdict(dict)
        backoff: dict[tuple, float] = {}
        order, section = 0, None
        for number, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("ngram ") or line == "\\data\\":
                continue
            if line == "\\end\\":
                break
            if line.startswith("\\") and line.endswith("-grams:"):
                section = int(line[1:-len("-grams:")])
                order = max(order, section)
                continue
            if section is None:
                raise NgramError(f"{path}:{number}: expected \\data\\ or an \\N-grams: section")
            fields = line.split()
            if len(fields) not in (section + 1, section + 2):
                raise NgramError(f"{path}:{number}: a {section}-gram line needs log10 p, {section} words "
                                 f"and an optional back-off; got {len(fields)} fields")
            if pieces is None and section == 1 and fields[1] not in ids:
                ids[fields[1]] = NUM_SPECIAL + len(ids) - len(SPECIAL_WORDS)
            try:
                gram = tuple(ids[w] for w in fields[1:section + 1])
            except KeyError as e:
                raise NgramError(f"{path}:{number}: word {e.args[0]!r} is not a piece of the model's tokenizer "
                                 "(train the LM with the same tokenizer: `asr lm`)") from None
            try:
                lp = float(fields[0]) * LN10
                if len(fields) == section + 2:
                    backoff[gram] = float(fields[-1]) * LN10
            except ValueError:
                raise NgramError(f"{path}:{number}: not a number in {line!r}") from None
            if gram[-1] != SOS:
                prob[section].setdefault(gram[:-1], {})[gram[-1]] = lp
        if order == 0:
            raise NgramError(f"{path}: no n-grams (is this an ARPA file?)")
        if pieces is None:
            return cls(order, max(ids.values()) + 1, dict(prob), backoff, words=ids)
        return cls(order, len(pieces), dict(prob), backoff)


def pack_arpa(path: str | os.PathLike) -> bytes:
    """An ARPA file's text, gzip-compressed (deterministically: no name or time in the header), for a model
    package; `NgramLM.from_packed` reads it back to the same numbers as `NgramLM.read_arpa(path)`."""
    return gzip.compress(Path(path).read_bytes(), compresslevel=6, mtime=0)


def train_ngram(sentences: Iterable[Sequence[int]], vocab_size: int, order: int = 4) -> NgramLM:
    """Interpolated Kneser-Ney LM of `order` from token-id sentences (no <sos>/<eos>; they are added)."""
    if order < 1:
        raise ValueError(f"order must be ≥ 1, got {order}")
    counts: list[dict[tuple, int]] = [defaultdict(int) for _ in range(order + 1)]  # counts[n][gram]
    for sentence in sentences:
        seq = [SOS, *(int(t) for t in sentence), EOS]
        for i in range(1, len(seq)):
            for n in range(1, min(order, i + 1) + 1):
                counts[n][tuple(seq[i - n + 1:i + 1])] += 1
    if not counts[1]:
        raise ValueError("no sentences to train an n-gram LM on")
    # adjusted counts: raw at the top order and for grams starting with <s>, else distinct left neighbours
    adjusted: list[dict[tuple, int]] = [{} for _ in range(order + 1)]
    adjusted[order] = dict(counts[order])
    for n in range(order - 1, 0, -1):
        left = defaultdict(int)
        for gram in counts[n + 1]:
            left[gram[1:]] += 1
        adjusted[n] = {g: (c if g[0] == SOS else left[g]) for g, c in counts[n].items()}

    outcomes = [i for i in range(vocab_size) if i not in NOT_PREDICTED]
    uniform = math.log(1.0 / len(outcomes))
    prob: dict[int, dict[tuple, dict[int, float]]] = {}
    backoff: dict[tuple, float] = {}
    for n in range(1, order + 1):
        by_history: dict[tuple, dict[int, int]] = defaultdict(dict)
        for gram, a in adjusted[n].items():
            by_history[gram[:-1]][gram[-1]] = a
        n1 = sum(1 for a in adjusted[n].values() if a == 1)
        n2 = sum(1 for a in adjusted[n].values() if a == 2)
        discount = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5
        prob[n] = {}
        for h, followers in by_history.items():
            total = sum(followers.values())
            gamma = discount * len(followers) / total

            def below(w: int) -> float:  # p(w | h′) of the orders already built
                return math.exp(_log_prob(prob, backoff, h[1:], w) if n > 1 else uniform)

            listed = outcomes if n == 1 else followers  # every outcome is listed at the lowest order
            prob[n][h] = {w: math.log(max(followers.get(w, 0) - discount, 0.0) / total + gamma * below(w))
                          for w in listed}
            if n > 1:
                backoff[h] = math.log(gamma)
    return NgramLM(order, vocab_size, prob, backoff)


def _log_prob(prob: dict, backoff: dict, h: tuple, w: int) -> float:
    """log p(w | h) by ARPA's rule: listed, or else back-off(h) + log p(w | h′)."""
    listed = prob[len(h) + 1].get(h, {}) if len(h) + 1 in prob else {}
    if w in listed:
        return listed[w]
    if not h:
        return float("-inf")
    return backoff.get(h, 0.0) + _log_prob(prob, backoff, h[1:], w)
