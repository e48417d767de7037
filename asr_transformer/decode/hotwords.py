"""Hotword lists: read them (a file, `--hotword` options, a package's list) and turn them into a context graph
over a model's tokens (`decode/context.py`).

A list is one phrase a line, optionally followed by a tab and its score (the bonus per token, in log-probability
units; the list's default otherwise); blank lines and lines starting with ``#`` are skipped:

    Kathleen	3.0
    Saint Petersburg
    # a comment

Reading a list needs no torch (an export's command line reads one too).
A phrase is normalized as transcripts are, then spelled in the model's tokens: its pieces (sentencepiece), its
characters, Whisper's byte-level pieces (as written and with each word capitalized, since Whisper writes cased
text), or, for a phone model, every pronunciation the lexicon gives (a word the lexicon lacks is refused).
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

from asr_transformer.errors import UserError
from asr_transformer.tokens import UNK

MAX_PRONUNCIATIONS = 16  # spellings of one phrase in a phone model (the product of its words' pronunciations)


class HotwordError(UserError, ValueError):
    """A hotword list or phrase that cannot be used; the message names the file and line, or the phrase."""


def parse_line(line: str, where: str) -> str | None:
    """One line of a list → "phrase" or "phrase<TAB>score" checked (None for a blank line or a comment)."""
    phrase, _, score = line.partition("\t")
    phrase = phrase.strip()
    if not phrase and not score.strip() or phrase.startswith("#"):
        return None
    if not phrase:
        raise HotwordError(f"{where}: an empty phrase")
    if score.strip():
        try:
            value = float(score)
        except ValueError:
            raise HotwordError(f"{where}: score {score.strip()!r} is not a number (phrase<TAB>score)") from None
        if not math.isfinite(value) or value < 0:
            raise HotwordError(f"{where}: score {score.strip()} must be a finite number ≥ 0")
        return f"{phrase}\t{value:g}"
    return phrase


def read_hotwords(path: str | os.PathLike) -> list[str]:
    """A hotword file → its entries ("phrase" or "phrase<TAB>score"); HotwordError naming the file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HotwordError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise HotwordError(f"{path}: {e.strerror or e}") from None
    entries = [parse_line(line, f"{path}:{i}") for i, line in enumerate(text.splitlines(), 1)]
    return [e for e in entries if e is not None]


def parse_option(value: str) -> str:
    """`--hotword PHRASE[:SCORE]` → an entry; a colon followed by something that is not a number is the phrase's."""
    phrase, colon, score = value.rpartition(":")
    if colon:
        try:
            float(score)
        except ValueError:
            phrase, score = value, ""
    else:
        phrase, score = value, ""
    entry = parse_line(f"{phrase}\t{score}", f"--hotword {value!r}")
    if entry is None:
        raise HotwordError(f"--hotword {value!r}: an empty phrase")
    return entry


def spellings(tokenizer, phrase: str) -> list[list[int]]:
    """The token sequences a model can write `phrase` with (HotwordError when it has none)."""
    if tokenizer.model_type == "phone":
        return _pronunciations(tokenizer, phrase)
    if tokenizer.model_type == "whisper":
        variants = {phrase.strip(), " ".join(w[:1].upper() + w[1:] for w in phrase.split())}
        return [tokenizer.encode(v) for v in sorted(variants)]
    normalized = tokenizer.normalize(phrase)
    if not normalized:
        raise HotwordError(f"hotword {phrase!r}: nothing left after normalization")
    ids = tokenizer.encode(normalized)
    if not ids or UNK in ids:  # a character or piece the model cannot write
        raise HotwordError(f"hotword {phrase!r}: has characters this model cannot write")
    return [ids]


def _pronunciations(tokenizer, phrase: str) -> list[list[int]]:
    words = tokenizer.normalize(phrase).split()
    if not words:
        raise HotwordError(f"hotword {phrase!r}: nothing left after normalization")
    per_word = []
    for word in words:
        prons = tokenizer.pronounce(word)
        if not prons:
            raise HotwordError(f"hotword {phrase!r}: the lexicon has no pronunciation of {word!r}; add it to the "
                               "lexicon (CMUdict's format) and make the tokenizer again, or leave the word out")
        per_word.append([[tokenizer.word_start] + tokenizer.phone_ids(pron) for pron in prons])
    return [sum(combo, []) for combo in itertools.islice(itertools.product(*per_word), MAX_PRONUNCIATIONS)]


def context_graph(tokenizer, entries: list[str], default_score: float):
    """A ContextGraph of `entries` ("phrase" or "phrase<TAB>score") in `tokenizer`'s tokens; None for no entries."""
    from asr_transformer.decode.context import ContextGraph  # torch: reading a list needs none (the export's CLI)

    sequences = []
    for entry in entries:
        phrase, _, score = entry.partition("\t")
        bonus = float(score) if score else default_score
        sequences += [(ids, bonus) for ids in spellings(tokenizer, phrase)]
    return ContextGraph(sequences, tokenizer.vocab_size) if sequences else None
