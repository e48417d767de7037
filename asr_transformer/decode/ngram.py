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

Training (`train_tables`) counts and estimates each order at once with numpy, over the n-grams sorted as
arrays, and gives the rows of the ARPA file (`ArpaTables`), written in bulk; `train_ngram` gives the same LM as
the dict-of-dicts `NgramLM` below, to query (small LMs: tests, tools). For decoding, ARPA files and a
package's LMs are read into `ngram_binary.BinaryNgramLM` instead (`search.read_lm`): the same scores, held in
sorted numpy arrays that are converted once, cached and memory-mapped — a large LM loads in well under a
second instead of tens of seconds and gigabytes.
"""

from __future__ import annotations

import gzip
import io
import itertools
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from asr_transformer.errors import UserError
from asr_transformer.tokens import BLANK, EOS, MASK, NUM_SPECIAL, SOS, UNK

LN10 = math.log(10.0)
NOT_PREDICTED = (BLANK, SOS, MASK)  # never an LM outcome (as for the attention decoder)
SPECIAL_WORDS = {UNK: "<unk>", SOS: "<s>", EOS: "</s>"}
CACHE_FLOATS = 1 << 25  # the cache of dense distributions is emptied when it would hold more (128 MB)
SLICE = 1 << 14  # ARPA lines formatted at a time


class NgramError(UserError, ValueError):
    """A malformed ARPA file or one whose words are not this tokenizer's pieces; the message names the line."""


class BackoffQueries:
    """The queries of a back-off LM, the same for every way of storing one (`NgramLM`'s dicts,
    `ngram_binary.BinaryNgramLM`'s arrays): a subclass has `order`, `vocab_size`, a `_cache` dict, and answers
    `_unk_unigram`, `_backoff_weight` and `_listed_after` from its storage."""

    order: int
    vocab_size: int
    _cache: dict[tuple, np.ndarray]

    def _unk_unigram(self) -> float | None:
        """log p(<unk>) as order 1 lists it, or None."""
        raise NotImplementedError

    def _backoff_weight(self, h: tuple) -> float:
        """log back-off weight of history h (len ≥ 1; 0 when the file gives none)."""
        raise NotImplementedError

    def _listed_after(self, h: tuple) -> tuple[np.ndarray, np.ndarray] | None:
        """(ids (K,) int64, log p (K,) float64) of the n-grams the file lists after history h (h = () for order 1),
        or None."""
        raise NotImplementedError

    def distribution(self, history: Sequence[int]) -> np.ndarray:
        """log p(· | history) over the vocabulary, (V,) float32; only the last order-1 ids matter."""
        h = tuple(int(t) for t in history[max(0, len(history) - (self.order - 1)):]) if self.order > 1 else ()
        return self._dense(h)

    def next_log_probs(self, histories: Sequence[Sequence[int]]) -> np.ndarray:
        """histories: N rows of token ids starting with <sos> (a list, or an array's `tolist()`) → log p(next |
        history) (N, V) float32."""
        keep = self.order - 1
        return np.stack([self._dense(tuple(r[max(0, len(r) - keep):]) if keep > 0 else ()) for r in histories])

    def sentence_log_prob(self, tokens: Sequence[int]) -> float:
        """log p(tokens </s> | <s>) (natural log)."""
        seq = [SOS, *tokens, EOS]
        return float(sum(self.distribution(seq[:i])[seq[i]] for i in range(1, len(seq))))

    def _dense(self, h: tuple) -> np.ndarray:
        """log p(· | h) as a (V,) float32 vector by ARPA's rule, built from the shorter history's and cached."""
        vec = self._cache.get(h)
        if vec is not None:
            return vec
        if not h:
            vec = np.full(self.vocab_size, -np.inf, np.float32)
            unk = self._unk_unigram()
            if unk is not None:  # ids the file does not list are <unk>
                vec.fill(unk)
                vec[list(NOT_PREDICTED)] = -np.inf
        else:
            vec = self._dense(h[1:]) + self._backoff_weight(h)
        listed = self._listed_after(h)
        if listed is not None:
            vec = vec.copy()
            vec[listed[0]] = listed[1].astype(vec.dtype)
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
        self._cache: dict[tuple, np.ndarray] = {}

    # ------------------------------------------------------------------------------------ queries

    def _unk_unigram(self) -> float | None:
        return self.prob[1].get((), {}).get(UNK)

    def _backoff_weight(self, h: tuple) -> float:
        return self.backoff.get(h, 0.0)

    def _listed_after(self, h: tuple) -> tuple[np.ndarray, np.ndarray] | None:
        listed = self.prob.get(len(h) + 1, {}).get(h, {})
        if not listed:
            return None
        return np.array(list(listed), np.int64), np.array(list(listed.values()), np.float64)

    def ngram_counts(self) -> list[int]:
        """The n-grams listed of each order 1..order (those ending in <s>, a context only, not counted)."""
        return [sum(len(w) for w in self.prob.get(n, {}).values()) for n in range(1, self.order + 1)]

    def log_prob(self, history: Sequence[int], token: int) -> float:
        """log p(token | history) without building a dense distribution (for large vocabularies)."""
        h = tuple(history[max(0, len(history) - (self.order - 1)):]) if self.order > 1 else ()
        return _log_prob(self.prob, self.backoff, h, token)

    # -------------------------------------------------------------------------------------- ARPA

    def write_arpa(self, path: str | os.PathLike, pieces: Sequence[str]) -> None:
        """Write ARPA (log10) with the tokenizer's `pieces` (id → piece) as words; atomically."""
        ArpaTables.from_lm(self).write_arpa(path, pieces)

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


@dataclass
class ArpaTables:
    """An n-gram LM as the rows of its ARPA file, order n = 1 … N at index n − 1: `grams[n-1]` (K, n) int64 ids
    in lexicographic order, `logp[n-1]` (K,) natural-log probabilities, `backoff[n-1]` (K,) natural-log back-off
    weights (NaN: none, as at order N). Order 1 lists <s> only as a context, with log p = −99·ln 10."""

    grams: list[np.ndarray]
    logp: list[np.ndarray]
    backoff: list[np.ndarray]
    vocab_size: int

    @property
    def order(self) -> int:
        return len(self.grams)

    def ngram_counts(self) -> list[int]:
        """The n-grams listed of each order 1..order (those ending in <s>, a context only, not counted)."""
        return [int((g[:, -1] != SOS).sum()) for g in self.grams]

    def write_arpa(self, path: str | os.PathLike, pieces: Sequence[str]) -> None:
        """Write ARPA (log10, 6 decimals) with the tokenizer's `pieces` (id → piece) as words; atomically."""
        from asr_transformer.fileio import atomic_open

        names = np.array([(SPECIAL_WORDS.get(i) or pieces[i]).encode() for i in range(len(pieces))], dtype=bytes)
        lengths = np.char.str_len(names)
        names = names.view(np.uint8).reshape(len(names), -1)  # (V, longest) UTF-8, 0-padded
        with atomic_open(path, "wb") as f:
            f.write(("\\data\\\n" + "".join(f"ngram {n}={len(g)}\n" for n, g in enumerate(self.grams, 1))).encode())
            for n, (grams, logp, backoff) in enumerate(zip(self.grams, self.logp, self.backoff), 1):
                f.write(f"\n\\{n}-grams:\n".encode())
                for i in range(0, len(grams), SLICE):  # a slice at a time: narrow fields, little memory
                    f.write(_arpa_lines(names, lengths, grams[i:i + SLICE], logp[i:i + SLICE], backoff[i:i + SLICE]))
            f.write(b"\n\\end\\\n")

    @classmethod
    def from_lm(cls, lm: NgramLM) -> "ArpaTables":
        """The rows of an `NgramLM`'s ARPA file: its listed n-grams, and <s> at order 1 when it has a back-off."""
        grams, logp, backoff = [], [], []
        for n in range(1, lm.order + 1):
            rows = sorted((h + (w,), lp) for h, ws in lm.prob.get(n, {}).items() for w, lp in ws.items())
            if n == 1 and lm.order > 1 and (SOS,) in lm.backoff:  # <s> is a context only: log10 p = -99
                rows = sorted(rows + [((SOS,), -99.0 * LN10)])
            grams.append(np.array([g for g, _ in rows], dtype=np.int64).reshape(len(rows), n))
            logp.append(np.array([lp for _, lp in rows], dtype=np.float64))
            backoff.append(np.array([lm.backoff.get(g, math.nan) if n < lm.order else math.nan for g, _ in rows],
                                    dtype=np.float64))
        return cls(grams, logp, backoff, lm.vocab_size)

    def to_lm(self) -> NgramLM:
        """The same LM as an `NgramLM` of dicts, to query (for small LMs: every n-gram becomes Python objects)."""
        prob: dict[int, dict[tuple, dict[int, float]]] = {n: {} for n in range(1, self.order + 1)}
        backoff: dict[tuple, float] = {}
        for n, (grams, logp, bo) in enumerate(zip(self.grams, self.logp, self.backoff), 1):
            for gram, lp, b in zip(map(tuple, grams.tolist()), logp.tolist(), bo.tolist()):
                if gram[-1] != SOS:
                    prob[n].setdefault(gram[:-1], {})[gram[-1]] = lp
                if not math.isnan(b):
                    backoff[gram] = b
        return NgramLM(self.order, self.vocab_size, prob, backoff)


def _arpa_lines(names: np.ndarray, lengths: np.ndarray, grams: np.ndarray, logp: np.ndarray,
                backoff: np.ndarray) -> bytes:
    """The ARPA lines `log10 p <TAB> words [<TAB> log10 back-off]` of rows grams (K, n), logp and backoff (K,)
    (natural log; NaN: no back-off); names (V, L) uint8 each id's UTF-8 name 0-padded, lengths (V,) its length.
    Each line is assembled in a row of fixed-width fields, 0 where a field is shorter, and the 0 bytes dropped."""
    has = ~np.isnan(backoff)[:, None]
    tab, space, newline = (np.full((len(grams), 1), ord(c), dtype=np.uint8) for c in "\t \n")
    fields = [_decimals(logp / LN10), tab]
    for ids in grams.T:
        fields += [names[ids, :lengths[ids].max(initial=0)], space]  # as wide as the longest name here
    fields[-1] = tab * has  # before the back-off, if any
    fields += [_decimals(np.where(has[:, 0], backoff / LN10, 0.0)) * has, newline]
    lines = np.concatenate(fields, axis=1)
    return lines[lines != 0].tobytes()


def _decimals(x: np.ndarray) -> np.ndarray:
    """f"{v:.6f}" of each value of x (K,) as ASCII (K, W) uint8, right-aligned, 0 before it. The
    digits are those of rint(|v|·10⁶), rounded as Python's formatting rounds unless |v|·10⁶ lies within 10⁻³ of a
    half (or v is huge or not finite): Python formats those few values."""
    y = np.minimum(np.abs(x), 1e6) * 1e6  # 1e12: too large (or infinite) for the fast way
    fast = (y < 1e12) & (np.abs(y - np.floor(y) - 0.5) > 1e-3)
    m = np.rint(np.where(fast, y, 0.0)).astype(np.int64)
    whole = len(str(int(m.max()) // 10 ** 6)) if len(m) else 1  # digits before the point
    digits = (m[:, None] // 10 ** np.arange(whole + 5, -1, -1) % 10 + ord("0")).astype(np.uint8)
    digits[:, :whole - 1][np.cumsum(digits[:, :whole - 1] != ord("0"), axis=1) == 0] = 0  # no leading zeros
    width = whole + 8
    out = np.zeros((len(x), width), dtype=np.uint8)
    out[:, 1:whole + 1], out[:, whole + 1], out[:, whole + 2:] = digits[:, :whole], ord("."), digits[:, whole:]
    sign = np.signbit(x)
    out[np.arange(len(x)), width - 1 - (out != 0).sum(axis=1)] = np.where(sign, ord("-"), 0)
    slow = {int(i): f"{x[i]:.6f}".encode() for i in np.flatnonzero(~fast)}
    if slow:
        width = max([width] + [len(s) for s in slow.values()])
        out = np.pad(out, ((0, 0), (width - out.shape[1], 0)))
        for i, s in slow.items():
            out[i] = 0
            out[i, width - len(s):] = np.frombuffer(s, dtype=np.uint8)
    return out


def train_ngram(sentences: Iterable[Sequence[int]], vocab_size: int, order: int = 4) -> NgramLM:
    """Interpolated Kneser-Ney LM of `order` from token-id sentences (no <sos>/<eos>; they are added), to query;
    `train_tables` is the same LM as ARPA rows (what `asr lm` writes: fast for large LMs)."""
    return train_tables(sentences, vocab_size, order).to_lm()


def train_tables(sentences: Iterable[Sequence[int]], vocab_size: int, order: int = 4) -> ArpaTables:
    """Interpolated Kneser-Ney LM of `order` (see the module's docstring) from token-id sentences (ids in
    0..vocab_size-1, never <sos>; <sos>/<eos> are added), as the rows of its ARPA file. Numpy throughout: the
    n-grams of each order are counted and estimated at once, as sorted arrays."""
    if order < 1:
        raise ValueError(f"order must be ≥ 1, got {order}")
    seq, dist = _token_sequence(sentences, vocab_size)
    unigrams, grams = _count(seq, dist, order, vocab_size)
    return _estimate(seq, grams, _adjusted(seq, unigrams, grams))


@dataclass
class _Grams:
    """The distinct n-grams of one order n ≥ 2 in lexicographic order, each (K,) int64: its history (the row of
    its first n − 1 ids at order n − 1; at n = 2 the id itself), its raw count, its suffix (the row of its last
    n − 1 ids at order n − 1) and a position of the token sequence where it ends."""

    history: np.ndarray
    count: np.ndarray
    suffix: np.ndarray
    end: np.ndarray


def _token_sequence(sentences: Iterable[Sequence[int]], vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """All sentences as one sequence `<s> ids </s> <s> ids </s> …` (T,) int64, and each position's distance from
    its sentence's <s> (T,) int64."""
    sentences = list(sentences)
    if not sentences:
        raise ValueError("no sentences to train an n-gram LM on")
    lengths = np.fromiter(map(len, sentences), np.int64, len(sentences)) + 2
    ids = np.fromiter(itertools.chain.from_iterable(sentences), np.int64, int(lengths.sum()) - 2 * len(sentences))
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size or (ids == SOS).any()):
        raise ValueError(f"sentences hold ids outside 0..{vocab_size - 1} or <sos> ({SOS})")
    starts = np.cumsum(lengths) - lengths
    dist = np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
    seq = np.full(len(dist), SOS, dtype=np.int64)
    seq[starts + lengths - 1] = EOS
    seq[(dist > 0) & (dist < np.repeat(lengths, lengths) - 1)] = ids
    return seq, dist


def _count(seq: np.ndarray, dist: np.ndarray, order: int, vocab_size: int) -> tuple[np.ndarray, list[_Grams]]:
    """Raw counts of the unigrams (V,) int64 and the distinct n-grams of orders 2..order, counted as one key
    (history row · V + last id) per position where an n-gram ends."""
    unigrams = np.bincount(seq[dist >= 1], minlength=vocab_size)
    rows, grams = seq, []  # rows: the row at order n − 1 of the (n−1)-gram ending at each position (−1: none)
    for n in range(2, order + 1):
        ends = np.flatnonzero(dist >= n - 1)
        keys = rows[ends - 1] * vocab_size + seq[ends]
        keys, first, inverse, count = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
        end = ends[first]
        grams.append(_Grams(keys // vocab_size, count, rows[end], end))
        rows = np.full(len(seq), -1, dtype=np.int64)
        rows[ends] = inverse.reshape(-1)
    return unigrams, grams


def _adjusted(seq: np.ndarray, unigrams: np.ndarray, grams: list[_Grams]) -> list[np.ndarray]:
    """a(·) of each order 1..N (order 1: (V,), 0 for unseen ids): the raw count at the top order and for n-grams
    that start with <s>, else the number of distinct left neighbours (the (n+1)-grams it is the suffix of)."""
    if not grams:
        return [unigrams]
    adjusted = [np.bincount(grams[0].suffix, minlength=len(unigrams))]  # no unigram starts with <s>
    for n, g in enumerate(grams[:-1], 2):
        left = np.bincount(grams[n - 1].suffix, minlength=len(g.count))
        adjusted.append(np.where(seq[g.end - n + 1] == SOS, g.count, left))
    return adjusted + [grams[-1].count]


def _discount(adjusted: np.ndarray) -> float:
    """D = n₁ / (n₁ + 2·n₂) from the counts of counts of one order (0.5 without an n₁ or an n₂)."""
    n1, n2 = int((adjusted == 1).sum()), int((adjusted == 2).sum())
    return n1 / (n1 + 2 * n2) if n1 and n2 else 0.5


def _estimate(seq: np.ndarray, grams: list[_Grams], adjusted: list[np.ndarray]) -> ArpaTables:
    """The interpolated Kneser-Ney log p of every listed n-gram and the back-off weights, order by order."""
    vocab_size, order = len(adjusted[0]), len(adjusted)
    outcome = np.ones(vocab_size, dtype=bool)
    outcome[[i for i in NOT_PREDICTED if i < vocab_size]] = False
    a, discount = adjusted[0], _discount(adjusted[0])
    total = int(a.sum())
    gamma = discount * int((a > 0).sum()) / total
    uniform = math.exp(math.log(1.0 / int(outcome.sum())))  # exp(log p), as from every order below
    logp = [np.where(outcome, np.log(np.maximum(a - discount, 0.0) / total + gamma * uniform), -math.inf)]
    backoff = [np.full(vocab_size, math.nan)]
    for n, g in enumerate(grams, 2):
        lp, histories, gamma = _interpolate(adjusted[n - 1], g.history, logp[-1][g.suffix])
        backoff[-1][histories] = np.log(gamma)
        logp.append(lp)
        backoff.append(np.full(len(lp), math.nan))
    # order 1 lists every outcome, and <s> as a context
    ids = np.flatnonzero(outcome | ((np.arange(vocab_size) == SOS) & (order > 1) & ~np.isnan(backoff[0])))
    tables = ArpaTables([ids[:, None]], [np.where(ids == SOS, -99.0 * LN10, logp[0][ids])], [backoff[0][ids]],
                        vocab_size)
    for n, g in enumerate(grams, 2):
        tables.grams.append(seq[g.end[:, None] + np.arange(1 - n, 1)])
        tables.logp.append(logp[n - 1])
        tables.backoff.append(backoff[n - 1])
    return tables


def _interpolate(a: np.ndarray, history: np.ndarray, below: np.ndarray) -> tuple[np.ndarray, ...]:
    """One order's log p(w | h) = log(max(a(h w) − D, 0) / A(h) + γ(h) · p(w | h′)) (K,), from its n-grams'
    adjusted counts a (K,), histories (K,) sorted and log p(w | h′) below (K,); and each distinct history with its
    γ(h) = D · T(h) / A(h) (H,)."""
    discount = _discount(a)
    starts = np.flatnonzero(np.diff(history, prepend=-1))  # where each history's followers begin
    followers = np.diff(starts, append=len(a))  # T(h)
    total = np.add.reduceat(a, starts) if len(a) else a  # A(h)
    gamma = discount * followers / total
    lp = np.log(np.maximum(a - discount, 0.0) / np.repeat(total, followers)
                + np.repeat(gamma, followers) * np.exp(below))
    return lp, history[starts], gamma


def _log_prob(prob: dict, backoff: dict, h: tuple, w: int) -> float:
    """log p(w | h) by ARPA's rule: listed, or else back-off(h) + log p(w | h′)."""
    listed = prob[len(h) + 1].get(h, {}) if len(h) + 1 in prob else {}
    if w in listed:
        return listed[w]
    if not h:
        return float("-inf")
    return backoff.get(h, 0.0) + _log_prob(prob, backoff, h[1:], w)
