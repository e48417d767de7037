"""Scoring: Levenshtein alignment, WER/CER/SER, and sclite-style reports.

Conventions:
- Word error rate: (S + D + I) / reference words, summed over the corpus (not averaged per
  utterance), as sclite and jiwer compute it.
- Character error rate: the same over the characters of the normalized text **with the single
  space between words counted as a character** (what ``jiwer.cer`` computes on normalized
  text). A word-boundary error ("at tend" for "attend") thus costs one character error.
- Sentence error rate: the fraction of utterances with at least one word error.
- An empty reference has rate errors / 1 (its insertions), as jiwer does, never a division by 0.
- Ties between equally cheap alignments are broken as rapidfuzz (and so jiwer) does, so the
  S/D/I counts equal jiwer's exactly.

Hypotheses come from a decode folder's ``hyp.jsonl`` (``score_dir``) or, as Kaldi's compute-wer
and sclite take them, from two plain files, references and hypotheses, each Kaldi ``text``
(``<id> <words>``) or sclite ``trn`` (``<words> (<id>)``) (``score_files``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .errors import UserError
from .fileio import atomic_open, write_json
from .text import NormalizerConfig, normalize, text_normalizer

# What scoring normalizes texts with: the toolkit's normalizer options, any text → text function (e.g.
# `text.text_normalizer("whisper")`), or None to compare texts as written.
Normalizer = NormalizerConfig | Callable[[str], str] | None

FORMAT_VERSION = 1

# How many ids an error message lists before only counting them.
MAX_LISTED_IDS = 5


class ScoringError(UserError, ValueError):
    """Hypotheses or references that cannot be scored; the message names file and line."""


# Alignment ops: correct, substitution, deletion (ref token missing), insertion (extra hyp token).
C, S, D, I = "C", "S", "D", "I"
AlignOp = tuple[str, "str | None", "str | None"]


def align(ref: Sequence[str], hyp: Sequence[str]) -> list[AlignOp]:
    """Minimum-edit-distance alignment of `ref` to `hyp` with unit costs.

    Returns ``[(op, ref_tok | None, hyp_tok | None), ...]`` in order, op one of C/S/D/I.
    Among equally cheap alignments the one rapidfuzz's backtrace chooses is returned.
    """
    # The common prefix and suffix are matches; only the middle needs the O(n*m) table.
    n0, m0 = len(ref), len(hyp)
    pre = 0
    while pre < min(n0, m0) and ref[pre] == hyp[pre]:
        pre += 1
    suf = 0
    while suf < min(n0, m0) - pre and ref[n0 - 1 - suf] == hyp[m0 - 1 - suf]:
        suf += 1
    r, h = ref[pre : n0 - suf], hyp[pre : m0 - suf]
    n, m = len(r), len(h)

    # dist[i][j]: edit distance between r[:i] and h[:j].
    dist = [[0] * (m + 1) for _ in range(n + 1)]
    for j in range(m + 1):
        dist[0][j] = j
    for i in range(1, n + 1):
        row, prev = dist[i], dist[i - 1]
        row[0] = i
        ri = r[i - 1]
        for j in range(1, m + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ri != h[j - 1]))

    # Backtrace from the end, preferring (as rapidfuzz does) deletion, then insertion, then
    # the diagonal (correct or substitution).
    ops: list[AlignOp] = []
    i, j = n, m
    while i > 0 and j > 0:
        if dist[i][j] == dist[i - 1][j] + 1:
            i -= 1
            ops.append((D, r[i], None))
        elif j > 1 and dist[i][j - 1] == dist[i - 1][j - 1] - 1:
            j -= 1
            ops.append((I, None, h[j]))
        else:
            i, j = i - 1, j - 1
            ops.append((C if r[i] == h[j] else S, r[i], h[j]))
    ops.extend((D, r[k], None) for k in reversed(range(i)))
    ops.extend((I, None, h[k]) for k in reversed(range(j)))
    ops.reverse()
    return (
        [(C, t, t) for t in ref[:pre]]
        + ops
        + [(C, t, t) for t in ref[n0 - suf :]]
    )


@dataclass
class ErrorCounts:
    """Counts from aligning reference tokens to hypothesis tokens."""

    ref_len: int = 0
    cor: int = 0
    sub: int = 0
    dele: int = 0
    ins: int = 0

    @classmethod
    def from_alignment(cls, ops: Iterable[AlignOp]) -> "ErrorCounts":
        n = Counter(op for op, _, _ in ops)
        return cls(ref_len=n[C] + n[S] + n[D], cor=n[C], sub=n[S], dele=n[D], ins=n[I])

    @property
    def errors(self) -> int:
        return self.sub + self.dele + self.ins

    @property
    def rate(self) -> float:
        """Errors per reference token (errors / 1 when the reference is empty, as jiwer)."""
        return self.errors / max(self.ref_len, 1)

    def __add__(self, other: "ErrorCounts") -> "ErrorCounts":
        return ErrorCounts(
            self.ref_len + other.ref_len,
            self.cor + other.cor,
            self.sub + other.sub,
            self.dele + other.dele,
            self.ins + other.ins,
        )

    def to_dict(self) -> dict:
        return {"ref_len": self.ref_len, "cor": self.cor, "sub": self.sub, "dele": self.dele, "ins": self.ins}


@dataclass
class UttScore:
    """One utterance: normalized texts, word alignment, word and character counts."""

    id: str
    ref: str
    hyp: str
    alignment: list[AlignOp]
    words: ErrorCounts
    chars: ErrorCounts


@dataclass
class Confusions:
    """How often each substitution (ref, hyp), deletion and insertion occurred."""

    substitutions: Counter = field(default_factory=Counter)
    deletions: Counter = field(default_factory=Counter)
    insertions: Counter = field(default_factory=Counter)

    @staticmethod
    def top(counter: Counter, n: int | None = None) -> list:
        """Most frequent first; ties in a fixed (sorted) order."""
        return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def to_dict(self, n: int | None = 100) -> dict:
        return {
            "substitutions": [[r, h, c] for (r, h), c in self.top(self.substitutions, n)],
            "deletions": [[w, c] for w, c in self.top(self.deletions, n)],
            "insertions": [[w, c] for w, c in self.top(self.insertions, n)],
        }


@dataclass
class Report:
    """Scores of a set of utterances; totals and confusions are derived from `utterances`."""

    utterances: list[UttScore]

    @cached_property
    def words(self) -> ErrorCounts:
        return sum((u.words for u in self.utterances), ErrorCounts())

    @cached_property
    def chars(self) -> ErrorCounts:
        return sum((u.chars for u in self.utterances), ErrorCounts())

    @property
    def wer(self) -> float:
        return self.words.rate

    @property
    def cer(self) -> float:
        return self.chars.rate

    @property
    def ser(self) -> float:
        """Fraction of utterances with at least one word error."""
        return sum(u.words.errors > 0 for u in self.utterances) / max(len(self.utterances), 1)

    @cached_property
    def confusions(self) -> Confusions:
        conf = Confusions()
        for u in self.utterances:
            for op, r, h in u.alignment:
                if op == S:
                    conf.substitutions[(r, h)] += 1
                elif op == D:
                    conf.deletions[r] += 1
                elif op == I:
                    conf.insertions[h] += 1
        return conf

    # ---- text reports ----

    def summary_table(self, title: str = "") -> str:
        """sclite-style tables of word and character results, then the top confusions."""
        n_snt = len(self.utterances)
        n_err_snt = {
            "word": sum(u.words.errors > 0 for u in self.utterances),
            "char": sum(u.chars.errors > 0 for u in self.utterances),
        }
        parts = [
            _table(f"WORD  {title}".rstrip(), "# Wrd", n_snt, n_err_snt["word"], self.words),
            _table(f"CHAR  {title}".rstrip(), "# Chr", n_snt, n_err_snt["char"], self.chars),
            self.confusions_text(),
        ]
        return "\n\n".join(parts) + "\n"

    def confusions_text(self, n: int = 10) -> str:
        """The `n` most frequent word substitutions, deletions and insertions."""
        conf = self.confusions
        lines = [f"Top {n} substitutions (ref ==> hyp):"]
        lines += [f"  {c:6d}  {r} ==> {h}" for (r, h), c in conf.top(conf.substitutions, n)]
        lines += ["", f"Top {n} deletions:"]
        lines += [f"  {c:6d}  {w}" for w, c in conf.top(conf.deletions, n)]
        lines += ["", f"Top {n} insertions:"]
        lines += [f"  {c:6d}  {w}" for w, c in conf.top(conf.insertions, n)]
        return "\n".join(lines)

    def alignments_text(self) -> str:
        """Per-utterance aligned REF/HYP/Eval lines, like sclite's ``pra`` output.

        Errors are upper-cased and gaps shown as ``***``, as sclite does.
        """
        blocks = []
        for u in self.utterances:
            ref_cols, hyp_cols, eval_cols = [], [], []
            for op, r, h in u.alignment:
                rt = "***" if r is None else (r if op == C else r.upper())
                ht = "***" if h is None else (h if op == C else h.upper())
                mark = "" if op == C else op
                width = max(len(rt), len(ht))
                ref_cols.append(rt.ljust(width))
                hyp_cols.append(ht.ljust(width))
                eval_cols.append(mark.ljust(width))
            w = u.words
            blocks.append(
                "\n".join(
                    [
                        f"id: ({u.id})",
                        f"Scores: (#C #S #D #I) {w.cor} {w.sub} {w.dele} {w.ins}",
                        ("REF:  " + " ".join(ref_cols)).rstrip(),
                        ("HYP:  " + " ".join(hyp_cols)).rstrip(),
                        ("Eval: " + " ".join(eval_cols)).rstrip(),
                    ]
                )
            )
        return "\n\n".join(blocks) + "\n"

    # ---- JSON ----

    def to_json(self) -> dict:
        """Everything as plain JSON types; `from_json` reads it back."""
        return {
            "format_version": FORMAT_VERSION,
            "wer": self.wer,
            "cer": self.cer,
            "ser": self.ser,
            "num_utterances": len(self.utterances),
            "counts": {"word": self.words.to_dict(), "char": self.chars.to_dict()},
            "confusions": self.confusions.to_dict(),
            "utterances": [
                {
                    "id": u.id,
                    "ref": u.ref,
                    "hyp": u.hyp,
                    "wer": u.words.rate,
                    "counts": {"word": u.words.to_dict(), "char": u.chars.to_dict()},
                    "alignment": [list(a) for a in u.alignment],
                }
                for u in self.utterances
            ],
        }

    @classmethod
    def from_json(cls, d: dict) -> "Report":
        return cls(
            [
                UttScore(
                    id=u["id"],
                    ref=u["ref"],
                    hyp=u["hyp"],
                    alignment=[tuple(a) for a in u["alignment"]],
                    words=ErrorCounts(**u["counts"]["word"]),
                    chars=ErrorCounts(**u["counts"]["char"]),
                )
                for u in d["utterances"]
            ]
        )


def _pct(x: int, total: int) -> str:
    return f"{100.0 * x / max(total, 1):.1f}"


def _table(title: str, unit: str, n_snt: int, n_err_snt: int, c: ErrorCounts) -> str:
    """One sclite-like box: counts, then Corr/Sub/Del/Ins/Err as % of reference tokens."""
    header = f"| {'# Snt':>6} {unit:>8} | {'Corr':>6} {'Sub':>6} {'Del':>6} {'Ins':>6} {'Err':>6} {'S.Err':>6} |"
    values = [_pct(c.cor, c.ref_len), _pct(c.sub, c.ref_len), _pct(c.dele, c.ref_len),
              _pct(c.ins, c.ref_len), _pct(c.errors, c.ref_len), _pct(n_err_snt, n_snt)]
    row = f"| {n_snt:>6} {c.ref_len:>8} | " + " ".join(f"{v:>6}" for v in values) + " |"
    inner = len(header) - 2
    return "\n".join(
        [
            "," + "-" * inner + ".",
            "|" + title.center(inner) + "|",
            "|" + "-" * inner + "|",
            header,
            "|" + "-" * inner + "|",
            row,
            "`" + "-" * inner + "'",
        ]
    )


def score_utterance(utt_id: str, ref: str, hyp: str, normalizer: Normalizer = None) -> UttScore:
    """Normalize (if asked), split on whitespace, align words, and count words and characters."""
    if isinstance(normalizer, NormalizerConfig):
        ref, hyp = normalize(ref, normalizer), normalize(hyp, normalizer)
    elif normalizer is not None:
        ref, hyp = normalizer(ref), normalizer(hyp)
    ref_words, hyp_words = ref.split(), hyp.split()
    ref, hyp = " ".join(ref_words), " ".join(hyp_words)
    alignment = align(ref_words, hyp_words)
    return UttScore(
        id=utt_id,
        ref=ref,
        hyp=hyp,
        alignment=alignment,
        words=ErrorCounts.from_alignment(alignment),
        chars=ErrorCounts.from_alignment(align(list(ref), list(hyp))),
    )


def score(pairs: Iterable[tuple[str, str, str]], normalizer: Normalizer = None) -> Report:
    """Score ``(utt_id, ref, hyp)`` triples. Without a normalizer, texts are only split on
    whitespace; pass the tokenizer's `NormalizerConfig` (or another `Normalizer`) to compare normalized text."""
    return Report([score_utterance(i, r, h, normalizer) for i, r, h in pairs])


def read_hyp_jsonl(path: str | Path) -> list[tuple[str, str, str]]:
    """Read ``{"id", "text", "ref"}`` records (one per line) as ``(id, ref, hyp)`` triples.

    Every line must be such an object with string texts and an id seen once; a file without a record is an
    error too (scoring nothing is not 0 % WER). Each problem is a ScoringError naming file:line.
    """
    pairs, seen = [], {}
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    pairs.append(_hyp_record(line, f"{path}:{lineno}", seen))
    except UnicodeDecodeError as e:
        raise ScoringError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not pairs:
        raise ScoringError(f"{path}: no hypotheses to score (an empty file)")
    return pairs


def _hyp_record(line: str, where: str, seen: dict[str, str]) -> tuple[str, str, str]:
    """One line of hyp.jsonl → (id, ref, hyp); `seen` maps each id read so far to its file:line."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise ScoringError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(rec, dict):
        raise ScoringError(f'{where}: expected a JSON object {{"id", "text", "ref"}}, got {type(rec).__name__}')
    missing = [k for k in ("id", "text", "ref") if k not in rec]
    if missing:
        raise ScoringError(f"{where}: record {rec.get('id', '?')!r} lacks {missing}; each line needs "
                           '{"id", "text" (hypothesis), "ref"}: decode with references to score')
    for key in ("text", "ref"):
        if not isinstance(rec[key], str):
            raise ScoringError(f"{where}: {key!r} of {rec['id']!r} is {json.dumps(rec[key])}, not a string")
    uid = str(rec["id"])
    if uid in seen:
        raise ScoringError(f"{where}: utterance {uid!r} again (first at {seen[uid]}); each is scored once")
    seen[uid] = where
    return uid, rec["ref"], rec["text"]


def score_dir(decode_dir: str | Path, normalizer: NormalizerConfig | None = NormalizerConfig(),
              scheme: str = "toolkit") -> Report:
    """Score ``<decode_dir>/hyp.jsonl``; write ``result.txt``, ``alignments.txt``, ``result.json``.

    Both texts are normalized by `scheme` (`text.NORMALIZERS`): toolkit with `normalizer` (default: the default
    `NormalizerConfig`; pass the tokenizer's, or None to compare texts as written), whisper with Whisper's English
    normalizer, whose reports are ``result_whisper.txt``, ``alignments_whisper.txt``, ``result_whisper.json``.
    """
    decode_dir = Path(decode_dir)
    rewrite = normalizer if scheme == "toolkit" else text_normalizer(scheme)
    report = score(read_hyp_jsonl(decode_dir / "hyp.jsonl"), rewrite)
    suffix = "" if scheme == "toolkit" else f"_{scheme}"
    with atomic_open(decode_dir / f"result{suffix}.txt") as f:
        f.write(report.summary_table(title=f"{decode_dir.name}{suffix}"))
    with atomic_open(decode_dir / f"alignments{suffix}.txt") as f:
        f.write(report.alignments_text())
    write_json(decode_dir / f"result{suffix}.json", {**report.to_json(), "normalizer": scheme})
    return report


def score_decoding(decode_dir: str | Path, normalizer: NormalizerConfig | None = NormalizerConfig()) -> tuple[Report,
                                                                                                           Report]:
    """The two reports of a decoding (`score_dir`): texts normalized by `normalizer` (result.*), and by Whisper's
    English normalizer (result_whisper.*), which counts words, not spelling ("15" for "fifteen")."""
    return score_dir(decode_dir, normalizer), score_dir(decode_dir, scheme="whisper")


def whisper_line(report: Report) -> str:
    return f"Whisper's English normalizer: WER {100 * report.wer:.2f} %, CER {100 * report.cer:.2f} %"


# A line of sclite's trn format: the words, then the utterance id in parentheses.
_TRN_LINE = re.compile(r"^(?P<text>.*?)\s*\((?P<id>[^()\s]+)\)\s*$")


def read_transcripts(path: str | Path) -> dict[str, tuple[int, str]]:
    """``{id: (line number, text)}`` of a Kaldi ``text`` file (``<id> <words>``) or an sclite ``trn`` file
    (``<words> (<id>)``), in file order; blank lines are ignored.

    The file is trn when its name ends in ``.trn`` or every line ends in ``(<id>)``, else Kaldi text. A
    duplicated id, or a trn line without its ``(<id>)``, raises ScoringError naming file and line.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        lines = data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ScoringError(f"{path}:{line}: not UTF-8 text ({e.reason}); convert the file to UTF-8") from None
    numbered = [(n, line.strip()) for n, line in enumerate(lines, 1) if line.strip()]
    trn = path.suffix.lower() == ".trn" or (bool(numbered) and all(_TRN_LINE.match(line) for _, line in numbered))
    transcripts: dict[str, tuple[int, str]] = {}
    for lineno, line in numbered:
        if trn:
            match = _TRN_LINE.match(line)
            if match is None:
                raise ScoringError(f"{path}:{lineno}: a trn line ends in its utterance id in parentheses, "
                                   f"'<words> (<id>)'; got '{line}'")
            utt_id, text = match["id"], match["text"]
        else:
            utt_id, *words = line.split(maxsplit=1)
            text = words[0] if words else ""
        if utt_id in transcripts:
            raise ScoringError(f"{path}:{lineno}: duplicate id '{utt_id}' (first on line {transcripts[utt_id][0]})")
        transcripts[utt_id] = (lineno, text)
    return transcripts


def _listed(ids: list[str]) -> str:
    shown = ", ".join(f"'{i}'" for i in ids[:MAX_LISTED_IDS])
    return shown + (f" and {len(ids) - MAX_LISTED_IDS} more" if len(ids) > MAX_LISTED_IDS else "")


def score_files(ref_path: str | Path, hyp_path: str | Path,
                normalizer: Normalizer = NormalizerConfig()) -> tuple[Report, list[str]]:
    """Score the hypotheses in `hyp_path` against the references in `ref_path` (each Kaldi text or trn, see
    `read_transcripts`), in the reference's order, normalized as `score_dir` normalizes.

    An utterance of the reference without a hypothesis is scored against an empty one (all its words are
    deletions), as sclite does; their ids are returned beside the report. A hypothesis id that is not in the
    reference raises ScoringError naming it.
    """
    refs, hyps = read_transcripts(ref_path), read_transcripts(hyp_path)
    unknown = [i for i in hyps if i not in refs]
    if unknown:
        first = hyps[unknown[0]][0]
        raise ScoringError(f"{hyp_path}:{first}: {len(unknown)} hypothesis id(s) not in the reference {ref_path}: "
                           f"{_listed(unknown)}")
    missing = [i for i in refs if i not in hyps]
    report = score([(i, text, hyps[i][1] if i in hyps else "") for i, (_, text) in refs.items()], normalizer)
    return report, missing
