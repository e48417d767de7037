"""A pronunciation lexicon: word → pronunciations, each a tuple of phones (CMUdict's ARPAbet or any other set).

The file format is CMUdict's, one pronunciation a line:

    tomato  T AH0 M EY1 T OW2
    tomato(2)  T AH0 M AA1 T OW2    # a variant: "(N)" after the word
    ;;; a comment line

Words are lower-cased; stress digits are dropped (``EY1`` → ``ey``), so that a phone is one unit whatever its
stress. A word's first pronunciation is the one training targets use. A possessive missing from the lexicon is
its stem's pronunciation plus the ending English gives it ("dennin's" = "dennin" + z, "companion's" + z,
"kerfoot's" + s, "thomas's" + ih z).
"""

from __future__ import annotations

import os
import re
from typing import Iterable
from asr_transformer.errors import UserError

Lexicon = dict[str, list[tuple[str, ...]]]

_VARIANT = re.compile(r"\(\d+\)$")
_SIBILANTS = {"s", "z", "sh", "zh", "ch", "jh"}
_VOICELESS = {"p", "t", "k", "f", "th"}
ENDING_PHONES = ("ih", "s", "z")  # what `pronunciations` may add to a stem


class LexiconError(UserError, ValueError):
    """A malformed lexicon file; the message names the line."""


def read_lexicon(path: str | os.PathLike) -> Lexicon:
    """Read a CMUdict-format file → {word: [pronunciation, ...]} in the file's order, variants de-duplicated."""
    with open(path, encoding="utf-8", errors="strict") as f:
        return parse_lexicon(f, str(path))


def parse_lexicon(lines: Iterable[str], where: str) -> Lexicon:
    """`read_lexicon` of lines already read; `where` names them in errors."""
    lexicon: Lexicon = {}
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith(";;;"):
            continue
        fields = line.split()
        if len(fields) < 2:
            raise LexiconError(f"{where}:{number}: expected a word and its phones, got {raw.strip()!r}")
        word = _VARIANT.sub("", fields[0]).lower()
        phones = tuple(re.sub(r"\d", "", p).lower() for p in fields[1:])
        if not all(p.isalpha() for p in phones):
            raise LexiconError(f"{where}:{number}: a phone must be letters (and a stress digit): {raw.strip()!r}")
        prons = lexicon.setdefault(word, [])
        if phones not in prons:
            prons.append(phones)
    if not lexicon:
        raise LexiconError(f"{where}: no pronunciations (is this a CMUdict-format lexicon?)")
    return lexicon


def pronunciations(word: str, lexicon: Lexicon) -> list[tuple[str, ...]]:
    """The word's pronunciations; a possessive the lexicon lacks is built from its stem; [] when unknown."""
    if word in lexicon:
        return lexicon[word]
    if word.endswith("'s") and word[:-2] in lexicon:
        return [stem + _possessive_ending(stem[-1]) for stem in lexicon[word[:-2]]]
    return []


def _possessive_ending(last: str) -> tuple[str, ...]:
    if last in _SIBILANTS:
        return ("ih", "z")
    return ("s",) if last in _VOICELESS else ("z",)
