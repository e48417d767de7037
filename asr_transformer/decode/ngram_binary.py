"""A compact, memory-mapped n-gram LM: the same scores as `ngram.NgramLM`, loaded in a fraction of a second.

`NgramLM` keeps an ARPA file as dicts of Python objects: a 4-gram word LM of 3.8 M n-grams takes ~30 s and
~2.5 GB to read. `BinaryNgramLM` keeps it as a few sorted numpy arrays per order, in one file that is
memory-mapped, so loading reads a small header and the operating system pages in only what queries touch.

Layout. Every n-gram the ARPA file lists, and every prefix of one, is a *node*. Order 1 is dense, indexed by
word id. A node of order k ≥ 2 is the key  parent · V + w  (parent: the index of its first k−1 words among
the order k−1 nodes, V: the vocabulary size), and each order holds its keys sorted (int64) with, per node,
log p (float64, natural log; NaN where the n-gram itself is not listed — a prefix only, or one ending in
<s>) and the back-off weight (float64, 0 where absent; none at the top order). The n-grams after a history
are one contiguous run of keys, so a dense distribution is two binary searches and a slice. Scores are
stored as float64 computed exactly as NgramLM computes them (float(text) · ln 10) and combined in the same
order, so `log_prob` equals NgramLM's bit for bit, and `distribution` / `next_log_probs` build the same
float32 vectors.

File: b"ASRNGRAM" + a format version byte + the header's length (uint64 LE) + a JSON header (order,
vocabulary size, n-gram counts, each array's dtype/shape/offset) + the arrays, each 64-byte aligned; a word
LM's words are one "\\n"-joined UTF-8 array in id order.

Where it is used. `asr lm --out x.arpa` still writes ARPA (what SRILM and KenLM read), and model packages
still store gzip ARPA (old packages stay readable, and a package stays a single portable file).
`search.read_lm` (so `asr decode --lm/--word-lm` and a package's LMs) reads an LM with `load_lm`: an ARPA
text (a path, or a package's gzip bytes) is converted once — a vectorized parse, seconds even for millions
of n-grams — and, when it is large (≥ CACHE_MIN_BYTES), the result is cached in the LM cache directory
($ASR_LM_CACHE, else $XDG_CACHE_HOME/asr-transformer/ngram, else ~/.cache/asr-transformer/ngram; ASR_LM_CACHE=off
disables it), keyed by the file's path, size and modification time or by the package bytes' SHA-256 and by
the tokenizer's pieces. Later loads memory-map the cached file. A path to a binary file (`convert_arpa`,
or `python -m asr_transformer.decode.ngram_binary in.arpa out.ngram [--tokenizer DIR]`) is read directly.
The cache may be deleted at any time.

An ARPA text the fast parser does not expect (duplicate n-grams, stray lines, a malformed line) is read by
`NgramLM.parse_arpa` instead, which gives the same model or the same error (naming the line).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import operator
import os
import re
import struct
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from asr_transformer.decode.ngram import LN10, NOT_PREDICTED, SPECIAL_WORDS, BackoffQueries, NgramError, NgramLM
from asr_transformer.tokens import NUM_SPECIAL, SOS, UNK

MAGIC = b"ASRNGRAM"
VERSION = 1
ALIGN = 64
CACHE_MIN_BYTES = 4 << 20  # ARPA texts (or packed bytes) smaller than this are converted in memory, not cached
_LOG_PROB_CACHE = 1 << 18  # log_prob results kept before the memo is emptied


class _Fallback(Exception):
    """The fast parser met something unusual: NgramLM.parse_arpa reads the text instead."""


# ------------------------------------------------------------------------------------------ the LM


class BinaryNgramLM(BackoffQueries):
    """Back-off n-gram LM over token ids 0..V-1 (natural-log probabilities) held in sorted arrays; the query
    interface of NgramLM (`distribution`, `next_log_probs`, `log_prob`, `sentence_log_prob`, `order`,
    `vocab_size`, `words`) with the same scores. See the module docstring for the layout."""

    def __init__(self, order: int, vocab_size: int, arrays: dict[str, np.ndarray], counts: Sequence[int],
                 words: dict[str, int] | None = None, path: str | None = None):
        self.order, self.vocab_size = order, vocab_size
        self.words, self.path = words, path
        self.counts = list(counts)  # listed n-grams of each order 1..order, as NgramLM.ngram_counts
        self.arrays = arrays
        self._p1, self._b1 = arrays["prob1"], arrays.get("backoff1")
        self._keys = {k: arrays[f"keys{k}"] for k in range(2, order + 1)}
        self._prob = {k: arrays[f"prob{k}"] for k in range(2, order + 1)}
        self._backoff = {k: arrays[f"backoff{k}"] for k in range(2, order)}
        self._cache: dict[tuple, np.ndarray] = {}
        self._memo: dict[tuple, float] = {}
        self._nodes: dict[tuple, int] = {}

    def ngram_counts(self) -> list[int]:
        return list(self.counts)

    # ------------------------------------------------------------------------------- node lookups

    def _node(self, h: tuple) -> int:
        """The index of node `h` among the nodes of order len(h) ≥ 1, or -1 (memoized: histories recur)."""
        got = self._nodes.get(h)
        if got is None:
            if len(self._nodes) >= _LOG_PROB_CACHE:
                self._nodes.clear()
            got = self._nodes[h] = self._find_node(h)
        return got

    def _find_node(self, h: tuple) -> int:
        w = h[0]
        if not 0 <= w < self.vocab_size:
            return -1
        idx = w
        V = self.vocab_size
        for k in range(2, len(h) + 1):
            w = h[k - 1]
            if not 0 <= w < V:
                return -1
            keys = self._keys[k]
            key = idx * V + w
            i = int(keys.searchsorted(key))
            if i == len(keys) or keys[i] != key:
                return -1
            idx = i
        return idx

    def _listed(self, ctx: tuple, ctx_idx: int, w: int) -> float | None:
        """log p(w | ctx) when the n-gram ctx+w is listed (ctx_idx: ctx's node index; ignored for ctx=())."""
        if not 0 <= w < self.vocab_size:
            return None
        if not ctx:
            p = self._p1[w]
        else:
            k = len(ctx) + 1
            if k not in self._keys:
                return None
            keys = self._keys[k]
            key = ctx_idx * self.vocab_size + w
            i = int(keys.searchsorted(key))
            if i == len(keys) or keys[i] != key:
                return None
            p = self._prob[k][i]
        return None if p != p else float(p)

    def _backoff_of(self, k: int, idx: int) -> float:
        if k == 1:
            return float(self._b1[idx]) if self._b1 is not None else 0.0
        return float(self._backoff[k][idx]) if k in self._backoff else 0.0

    # ------------------------------------------------------------------------------------ queries

    def log_prob(self, history: Sequence[int], token: int) -> float:
        """log p(token | history) by ARPA's rule, equal to NgramLM.log_prob."""
        h = tuple(history[max(0, len(history) - (self.order - 1)):]) if self.order > 1 else ()
        key = (h, token)
        got = self._memo.get(key)
        if got is not None:
            return got
        w = int(token)
        # the longest suffix of h (a listed context) under which w is listed; back-offs of the longer ones
        backoffs = []
        value = float("-inf")
        for start in range(len(h) + 1):
            ctx = h[start:]
            idx = self._node(ctx) if ctx else 0
            if ctx and idx < 0:
                continue  # not a node: back-off weight 0, nothing listed after it
            lp = self._listed(ctx, idx, w)
            if lp is not None:
                value = lp
                break
            if ctx:
                backoffs.append(self._backoff_of(len(ctx), idx))
        for b in reversed(backoffs):  # b(h) + (b(h′) + (… + p)) as NgramLM adds them
            value = b + value
        if len(self._memo) >= _LOG_PROB_CACHE:
            self._memo.clear()
        self._memo[key] = value
        return value

    def _unk_unigram(self) -> float | None:
        p = self._p1[UNK] if UNK < len(self._p1) else float("nan")
        return None if p != p else float(p)

    def _backoff_weight(self, h: tuple) -> float:
        idx = self._node(h)
        return self._backoff_of(len(h), idx) if idx >= 0 and len(h) < self.order else 0.0

    def _listed_after(self, h: tuple) -> tuple[np.ndarray, np.ndarray] | None:
        if not h:
            p1 = np.asarray(self._p1)
            ids = np.flatnonzero(p1 == p1)
            return (ids.astype(np.int64), p1[ids].astype(np.float64)) if len(ids) else None
        k = len(h) + 1
        if k not in self._keys:
            return None
        idx = self._node(h)
        if idx < 0:
            return None
        keys, V = self._keys[k], self.vocab_size
        lo, hi = keys.searchsorted([idx * V, (idx + 1) * V])
        ids = np.asarray(keys[lo:hi]) - idx * V
        probs = np.asarray(self._prob[k][lo:hi])
        ok = probs == probs  # NaN: a prefix of a listed n-gram, not itself listed
        if not ok.any():
            return None
        return ids[ok].astype(np.int64), probs[ok].astype(np.float64)

    # ----------------------------------------------------------------------------------- file

    def save(self, path: str | os.PathLike) -> None:
        """Write the binary file (atomically: a temporary file renamed)."""
        arrays = dict(self.arrays)
        if self.words is not None:
            ordered = sorted((i, w) for w, i in self.words.items() if i >= NUM_SPECIAL)
            arrays["words"] = np.frombuffer("\n".join(w for _, w in ordered).encode("utf-8"), dtype=np.uint8)
        header = {"order": self.order, "vocab_size": self.vocab_size, "counts": self.counts,
                  "word_lm": self.words is not None, "arrays": {}}
        offset = 0
        for name, a in arrays.items():
            header["arrays"][name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset}
            offset += -(-a.nbytes // ALIGN) * ALIGN
        blob = json.dumps(header).encode("utf-8")
        start = -(-(len(MAGIC) + 1 + 8 + len(blob)) // ALIGN) * ALIGN
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + bytes([VERSION]) + struct.pack("<Q", len(blob)) + blob)
                f.write(b"\0" * (start - f.tell()))
                for name, a in arrays.items():
                    assert f.tell() == start + header["arrays"][name]["offset"]
                    f.write(np.ascontiguousarray(a).tobytes())
                    f.write(b"\0" * (-a.nbytes % ALIGN))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BinaryNgramLM":
        """Memory-map a file that `save` wrote."""
        with open(path, "rb") as f:
            head = f.read(len(MAGIC) + 9)
            if len(head) < len(MAGIC) + 9 or head[:len(MAGIC)] != MAGIC:
                raise NgramError(f"{path}: not a binary n-gram LM")
            if head[len(MAGIC)] != VERSION:
                raise NgramError(f"{path}: binary n-gram LM format {head[len(MAGIC)]}, this version reads {VERSION}")
            (size,) = struct.unpack("<Q", head[len(MAGIC) + 1:])
            header = json.loads(f.read(size).decode("utf-8"))
        start = -(-(len(MAGIC) + 1 + 8 + size) // ALIGN) * ALIGN
        buf = np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))  # a plain ndarray view: cheaper indexing
        arrays = {}
        for name, spec in header["arrays"].items():
            dtype = np.dtype(spec["dtype"])
            n = int(np.prod(spec["shape"], dtype=np.int64)) * dtype.itemsize
            off = start + spec["offset"]
            arrays[name] = buf[off:off + n].view(dtype).reshape(spec["shape"])
        words = None
        if header["word_lm"]:
            blob = bytes(arrays.pop("words")) if "words" in arrays else b""
            names = blob.decode("utf-8").split("\n") if blob else []
            words = {w: i for i, w in SPECIAL_WORDS.items()}
            words.update(zip(names, range(NUM_SPECIAL, NUM_SPECIAL + len(names))))
        return cls(header["order"], header["vocab_size"], arrays, header["counts"], words, str(path))


# ------------------------------------------------------------------------------------ building


def _ids_of(pieces: Sequence[str] | None) -> dict[str, int]:
    """word → id as NgramLM.parse_arpa maps them (a word LM's own words are added while reading)."""
    if pieces is None:
        return {w: i for i, w in SPECIAL_WORDS.items()}
    ids = {p: i for i, p in enumerate(pieces) if i not in NOT_PREDICTED and i not in SPECIAL_WORDS}
    ids.update({w: i for i, w in SPECIAL_WORDS.items()})
    return ids


_HEADER = re.compile(r"^[ \t]*\\(\d+)-grams:[ \t]*\r?$", re.M)
_NGRAM_LINE = re.compile(r"^\s*ngram ", re.M)
_END = re.compile(r"^[ \t]*\\end\\[ \t]*\r?$", re.M)


def _find_line(text: str, literal: str, pattern: re.Pattern):
    """The first match of `pattern` (a whole line holding `literal`) in text, found by str.find."""
    at = text.find(literal)
    while at >= 0:
        m = pattern.match(text, text.rfind("\n", 0, at) + 1)
        if m is not None:
            return m
        at = text.find(literal, at + 1)
    return None


def _pick(items: list, positions: list) -> tuple:
    """items at positions (a tuple, in C: operator.itemgetter)."""
    if not positions:
        return ()
    got = operator.itemgetter(*positions)(items)
    return got if len(positions) > 1 else (got,)


CHUNK_CHARS = 1 << 24  # a section is parsed 16 M characters at a time, so conversion memory stays bounded


def _chunks(body: str):
    """(start, end) of pieces of `body` of about CHUNK_CHARS, split at line ends."""
    lo = 0
    while lo < len(body):
        hi = body.find("\n", lo + CHUNK_CHARS)
        hi = len(body) if hi < 0 else hi + 1
        yield lo, hi
        lo = hi


def _parse_chunk(body: str, n: int, ids: dict[str, int], add_words: bool):
    """Lines of an n-gram section → (grams, log p, back-off, has back-off), None when blank; _Fallback if odd."""
    lens = np.fromiter(map(len, map(str.split, body.split("\n"))), dtype=np.int64)
    lens = lens[lens > 0]
    if not len(lens):
        return None
    if not ((lens == n + 1) | (lens == n + 2)).all():
        raise _Fallback
    tokens = body.split()
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    word_pos = (starts[:, None] + np.arange(1, n + 1)).ravel().tolist()
    words_at = _pick(tokens, word_pos)
    if add_words:
        for w in words_at:
            if w not in ids:
                ids[w] = NUM_SPECIAL + len(ids) - len(SPECIAL_WORDS)
    has_bo = lens == n + 2
    try:
        grams = np.fromiter(map(ids.__getitem__, words_at), dtype=np.int64, count=len(word_pos)).reshape(-1, n)
        del words_at
        lp = np.fromiter(map(float, _pick(tokens, starts.tolist())), dtype=np.float64, count=len(lens)) * LN10
        bo = np.zeros(len(lens))
        bo[has_bo] = np.fromiter(map(float, _pick(tokens, (starts[has_bo] + n + 1).tolist())),
                                 dtype=np.float64, count=int(has_bo.sum())) * LN10
    except (KeyError, ValueError):
        raise _Fallback from None
    del tokens
    return grams, lp, bo, has_bo


def _parse_fast(text: str, pieces: Sequence[str] | None):
    """ARPA text → (order, vocab size, words or None, {n: (grams (M, n) int64, log p (M,), back-off (M,),
    has back-off (M,) bool)}); _Fallback for anything unusual."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    end = _find_line(text, "\\end\\", _END)
    if end is not None:
        text = text[:end.start()]
    headers = []
    at = text.find("-grams:")
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        m = _HEADER.match(text, line_start)
        if m is None:
            raise _Fallback
        headers.append(m)
        at = text.find("-grams:", m.end())
    if not headers:
        raise _Fallback
    for line in text[:headers[0].start()].split("\n"):
        line = line.strip()
        if line and not line.startswith("ngram ") and line != "\\data\\":
            raise _Fallback
    ids = _ids_of(pieces)
    sections: dict[int, tuple] = {}
    for i, m in enumerate(headers):
        n = int(m.group(1))
        if n < 1 or n in sections:
            raise _Fallback
        body = text[m.end():headers[i + 1].start() if i + 1 < len(headers) else len(text)]
        if "\\" in body or ("ngram " in body and _NGRAM_LINE.search(body)):
            raise _Fallback
        parts = [_parse_chunk(body[lo:hi], n, ids, pieces is None and n == 1) for lo, hi in _chunks(body)]
        del body
        parts = [p for p in parts if p is not None]
        if not parts:
            sections[n] = (np.zeros((0, n), np.int64), np.zeros(0), np.zeros(0), np.zeros(0, bool))
            continue
        grams, lp, bo, has_bo = (np.concatenate(x) for x in zip(*parts))
        sections[n] = (grams, lp, bo, has_bo)
    order = max(sections)
    vocab = max(ids.values()) + 1 if pieces is None else len(pieces)
    return order, vocab, (ids if pieces is None else None), sections


def _sections_of(lm: NgramLM) -> dict[int, tuple]:
    """NgramLM's dicts → the sections `_build` takes (n-grams ending in <s> keep only their back-off)."""
    sections = {}
    grams_by_n: dict[int, dict[tuple, list]] = {n: {} for n in range(1, lm.order + 1)}
    for n, table in lm.prob.items():
        for h, ws in table.items():
            for w, lp in ws.items():
                grams_by_n[n][h + (w,)] = [lp, None]
    for gram, b in lm.backoff.items():
        if len(gram) in grams_by_n:
            grams_by_n[len(gram)].setdefault(gram, [float("nan"), None])[1] = b
    for n, entries in grams_by_n.items():
        keys = list(entries)
        grams = np.array(keys, dtype=np.int64).reshape(-1, n)
        lp = np.array([entries[g][0] for g in keys], dtype=np.float64)
        has_bo = np.array([entries[g][1] is not None for g in keys], dtype=bool)
        bo = np.array([entries[g][1] or 0.0 for g in keys], dtype=np.float64)
        sections[n] = (grams, lp, bo, has_bo)
    return sections


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    a = np.sort(a)  # (numpy 2's np.unique hashes: several times slower on millions of int64)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if len(a) else a


def _has_duplicates(a: np.ndarray) -> bool:
    a = np.sort(a)
    return bool((a[1:] == a[:-1]).any())


def _build(order: int, V: int, sections: dict[int, tuple], words: dict[str, int] | None,
           strict: bool) -> BinaryNgramLM:
    """The node arrays of sections {n: (grams, log p, back-off, has back-off)}; strict: raise _Fallback on a
    duplicate n-gram (NgramLM.parse_arpa's last-wins reading is then the reference)."""
    counts = []
    for n in range(1, order + 1):
        grams, lp = sections[n][:2] if n in sections else (np.zeros((0, n), np.int64), np.zeros(0))
        counts.append(int(((grams[:, -1] != SOS) & (lp == lp)).sum()))
    arrays: dict[str, np.ndarray] = {}
    p1 = np.full(V, np.nan)
    b1 = np.zeros(V)
    # the running node index of each section's prefixes of length k, updated order by order
    prefix_idx = {n: sections[n][0][:, 0].copy() for n in sections if len(sections[n][0])}
    if 1 in sections and len(sections[1][0]):
        grams, lp, bo, has_bo = sections[1]
        if strict and _has_duplicates(grams[:, 0]):
            raise _Fallback
        listed = grams[:, 0] != SOS
        p1[grams[listed, 0]] = lp[listed]
        b1[grams[has_bo, 0]] = bo[has_bo]
    arrays["prob1"] = p1
    if order > 1:
        arrays["backoff1"] = b1
    for k in range(2, order + 1):
        parts = [prefix_idx[n] * V + sections[n][0][:, k - 1] for n in prefix_idx if n >= k]
        keys = _sorted_unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        for n in [n for n in prefix_idx if n >= k]:
            prefix_idx[n] = np.searchsorted(keys, prefix_idx[n] * V + sections[n][0][:, k - 1])
        prob = np.full(len(keys), np.nan)
        backoff = np.zeros(len(keys)) if k < order else None
        if k in prefix_idx:
            grams, lp, bo, has_bo = sections[k]
            pos = prefix_idx[k]
            if strict and _has_duplicates(pos):
                raise _Fallback
            listed = grams[:, -1] != SOS
            prob[pos[listed]] = lp[listed]
            if backoff is not None:
                backoff[pos[has_bo]] = bo[has_bo]
        arrays[f"keys{k}"], arrays[f"prob{k}"] = keys, prob
        if backoff is not None:
            arrays[f"backoff{k}"] = backoff
    return BinaryNgramLM(order, V, arrays, counts, words)


def from_ngram(lm: NgramLM) -> BinaryNgramLM:
    """The BinaryNgramLM of a (dict) NgramLM: the same scores."""
    return _build(lm.order, lm.vocab_size, _sections_of(lm), lm.words, strict=False)


def parse_arpa_text(text: str, pieces: Sequence[str] | None, where) -> BinaryNgramLM:
    """ARPA text → BinaryNgramLM, with NgramLM.parse_arpa's vocabulary, scores and errors (`where` names it)."""
    try:
        order, V, words, sections = _parse_fast(text, pieces)
        return _build(order, V, sections, words, strict=True)
    except _Fallback:
        return from_ngram(NgramLM.parse_arpa(io.StringIO(text, newline=None), pieces, where))


def _decode(data: bytes) -> str:
    return data.decode("utf-8")


def convert_arpa(source, pieces: Sequence[str] | None, out: str | os.PathLike | None = None,
                 where=None) -> BinaryNgramLM:
    """An ARPA file (path) or a package's gzip ARPA (bytes) → BinaryNgramLM, written to `out` when given."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        text = _decode(gzip.decompress(bytes(source)))
    else:
        text = _decode(Path(source).read_bytes())
    lm = parse_arpa_text(text, pieces, where if where is not None else source)
    if out is not None:
        lm.save(out)
        return BinaryNgramLM.load(out)
    return lm


def is_binary(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def cache_dir() -> Path | None:
    """Where converted LMs are cached (see the module docstring), or None when ASR_LM_CACHE=off."""
    env = os.environ.get("ASR_LM_CACHE")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "asr-transformer" / "ngram"


def _cache_key(source, pieces: Sequence[str] | None) -> str:
    h = hashlib.sha256(f"ngram v{VERSION}\n".encode())
    if isinstance(source, (bytes, bytearray, memoryview)):
        h.update(b"bytes\n" + hashlib.sha256(source).digest())
    else:
        st = os.stat(source)
        h.update(f"file\n{os.path.realpath(source)}\n{st.st_size}\n{st.st_mtime_ns}\n".encode())
    h.update(b"words\n" if pieces is None else ("\n".join(pieces) + "\npieces\n").encode("utf-8"))
    return h.hexdigest()[:40]


def load_lm(source, pieces: Sequence[str] | None, where=None) -> BinaryNgramLM:
    """The LM of `source` — a binary file's path, an ARPA file's path, or a package's gzip ARPA bytes — over
    `pieces` (None: a word LM), through the cache (see the module docstring)."""
    if not isinstance(source, (bytes, bytearray, memoryview)):
        if is_binary(source):
            lm = BinaryNgramLM.load(source)
            if (pieces is None) != (lm.words is not None) or (pieces is not None and lm.vocab_size != len(pieces)):
                raise NgramError(f"{source}: a binary {'word' if lm.words is not None else 'token'} LM "
                                 f"of {lm.vocab_size} ids does not fit this {'word' if pieces is None else 'token'} LM")
            return lm
        size = os.path.getsize(source)
    else:
        size = len(source)
    cached = _cached_path(source, pieces, size)
    if cached is None:
        return convert_arpa(source, pieces, where=where)
    if cached.exists():
        try:
            return BinaryNgramLM.load(cached)
        except (OSError, ValueError, NgramError):
            pass  # damaged: convert again
    return _store(cached, convert_arpa(source, pieces, where=where))


def _cached_path(source, pieces: Sequence[str] | None, size: int) -> Path | None:
    folder = cache_dir() if size >= CACHE_MIN_BYTES else None
    return None if folder is None else folder / f"{_cache_key(source, pieces)}.ngram"


def _store(cached: Path, lm: BinaryNgramLM) -> BinaryNgramLM:
    try:
        lm.save(cached)
        return BinaryNgramLM.load(cached)
    except OSError:
        return lm  # an unwritable cache: the in-memory arrays serve


def cache_lm(source, pieces: Sequence[str] | None, lm: BinaryNgramLM) -> None:
    """Put `lm`, converted from `source` (a path or a package's gzip bytes), in the cache when `load_lm` would
    cache it: `asr package` does so, so the package's first decode need not convert its LMs again."""
    size = len(source) if isinstance(source, (bytes, bytearray, memoryview)) else os.path.getsize(source)
    cached = _cached_path(source, pieces, size)
    if cached is not None and not cached.exists():
        _store(cached, lm)


def main(argv: Sequence[str] | None = None) -> None:
    """python -m asr_transformer.decode.ngram_binary IN.arpa OUT.ngram [--tokenizer DIR] (none: a word LM)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("arpa")
    parser.add_argument("out")
    parser.add_argument("--tokenizer", default=None, help="the tokenizer of a token LM (omit for a word LM)")
    args = parser.parse_args(argv)
    pieces = None
    if args.tokenizer:
        from asr_transformer.data.tokenizer import load_tokenizer

        tok = load_tokenizer(Path(args.tokenizer))
        pieces = tok.pieces(range(tok.vocab_size))
    lm = convert_arpa(args.arpa, pieces, args.out)
    print(f"{args.out}: {lm.order}-gram LM, {sum(lm.counts)} n-grams")


if __name__ == "__main__":
    main()
