"""Text normalization: one function, used identically for tokenizer training and for scoring.

    >>> normalize("Don't stop — twenty-one, OK?!", NormalizerConfig())
    "don't stop twenty one ok"

Scoring can also use Whisper's English normalizer (`text_normalizer("whisper")`), as the Open ASR Leaderboard
does: it also writes numbers as digits, British spellings as American ones and expands contractions, so "fifteen"
and "15", "colour" and "color" count as the same word and a score measures words, not spelling.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, fields
from functools import cache, partial
from typing import Callable

FORMAT_VERSION = 1

# How scoring rewrites texts before comparing words: this module's `normalize` with the tokenizer's options,
# Whisper's English normalizer, or not at all (split on whitespace).
NORMALIZERS = ("toolkit", "whisper", "none")

# Typographic apostrophes written for "'" (right single quote, modifier letter apostrophe, ...).
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'"})
# An apostrophe is kept only with a letter or digit on both sides ("don't", "rock'n'roll").
_INNER_APOSTROPHE = re.compile(r"(?<=[^\W_])'(?=[^\W_])")
_PLACEHOLDER = "\x00"  # a control character, so never left in the text: marks kept apostrophes


@dataclass(frozen=True)
class NormalizerConfig:
    """How `normalize` rewrites text. Saved with the tokenizer so scoring uses the same rules."""

    lowercase: bool = True
    remove_punctuation: bool = True  # Unicode punctuation (P*) and symbols (S*) become spaces
    keep_apostrophes: bool = True  # ... except an apostrophe inside a word
    collapse_whitespace: bool = True  # runs of whitespace become one space
    unicode_form: str | None = "NFKC"  # "NFC", "NFD", "NFKC", "NFKD", or None to leave as is

    def to_dict(self) -> dict:
        return {"format_version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "NormalizerConfig":
        version = d.get("format_version", FORMAT_VERSION)
        if version > FORMAT_VERSION:
            raise ValueError(
                f"normalizer config has format_version {version}, newer than this toolkit "
                f"understands ({FORMAT_VERSION}); upgrade asr-transformer"
            )
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known - {"format_version"}
        if unknown:
            raise ValueError(f"unknown normalizer option(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{k: v for k, v in d.items() if k in known})


def _is_punct_or_symbol(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def normalize(text: str, cfg: NormalizerConfig = NormalizerConfig()) -> str:
    """Normalize `text`: Unicode form, lower case, punctuation to spaces, whitespace collapsed.

    Hyphens and other punctuation between words become word breaks ("twenty-one" ->
    "twenty one"); control characters become spaces; the result is stripped. The function
    is idempotent: ``normalize(normalize(x, cfg), cfg) == normalize(x, cfg)``.
    """
    if cfg.unicode_form:
        text = unicodedata.normalize(cfg.unicode_form, text)
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    text = text.translate(_APOSTROPHES)
    if cfg.lowercase:
        text = text.lower()
        if cfg.unicode_form:  # lower-casing can undo the normal form (e.g. "İ" -> "i" + dot)
            text = unicodedata.normalize(cfg.unicode_form, text)
    if cfg.remove_punctuation:
        if cfg.keep_apostrophes:
            text = _INNER_APOSTROPHE.sub(_PLACEHOLDER, text)
        text = "".join(" " if _is_punct_or_symbol(ch) else ch for ch in text)
        text = text.replace(_PLACEHOLDER, "'")
    if cfg.collapse_whitespace:
        return " ".join(text.split())
    return text.strip()


def text_normalizer(name: str = "toolkit", cfg: "NormalizerConfig | None" = None) -> Callable[[str], str]:
    """The rewrite `name` (one of NORMALIZERS) applies; toolkit uses `cfg` (default: the default options)."""
    if name == "toolkit":
        return partial(normalize, cfg=cfg or NormalizerConfig())
    if name == "whisper":
        return _whisper_english()
    if name == "none":
        return lambda text: text
    raise ValueError(f"unknown text normalizer {name!r}; choose from {', '.join(NORMALIZERS)}")


@cache
def _whisper_english() -> Callable[[str], str]:
    from whisper_normalizer.english import EnglishTextNormalizer  # PyPI's packaging of Whisper's normalizer

    return EnglishTextNormalizer()
