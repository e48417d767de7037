"""How a transcript writes numbers (`decode.numbers`): as the model wrote them, as digits, or as words.

Whisper writes "15", "1465" and "3rd"; a corpus may spell them ("fifteen"). That is spelling, not recognition,
so it is a choice of the output rather than something to fine-tune a model for:

    >>> spell_numbers("In 1465 he printed 15 books on the 3rd day.", "words")
    'In fourteen sixty-five he printed fifteen books on the third day.'
    >>> spell_numbers("He printed two hundred and five books.", "digits")
    'He printed 205 books.'

words: whole numbers below a trillion as cardinals ("two hundred and five"), numbers from 1100 to 1999 that
are not a whole hundred as years are read ("fourteen sixty-five"), ordinals ("3rd" → "third"), decimals digit by
digit ("3.25" → "three point two five"), dollars ("$15" → "fifteen dollars"); a thousands separator is read through
("1,000" → "one thousand").
digits: Whisper's English number normalizer (the inverse: words → digits, case and punctuation kept).
"""

from __future__ import annotations

import re
from functools import cache

NUMBER_STYLES = ("", "digits", "words")  # "": as the model wrote them

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand"))
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
            "twelve": "twelfth"}
_NUMBER = re.compile(r"(?<![\w.])(\$)?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(st|nd|rd|th)?(?!\w|\.\d)")


def _below_hundred(n: int) -> str:
    return _ONES[n] if n < 20 else _TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else "")


def _below_thousand(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    if not hundreds:
        return _below_hundred(rest)
    return f"{_ONES[hundreds]} hundred" + (f" and {_below_hundred(rest)}" if rest else "")


def cardinal(n: int) -> str:
    """0 ≤ n < 10¹² in words: 1465 → "one thousand four hundred and sixty-five"."""
    if n < 1000:
        return _below_thousand(n)
    parts = []
    for scale, name in _SCALES:
        if n >= scale:
            parts.append(f"{_below_thousand(n // scale)} {name}")
            n %= scale
    if n:
        parts.append(("and " if n < 100 else "") + _below_thousand(n))
    return " ".join(parts)


def ordinal(n: int) -> str:
    """3 → "third", 21 → "twenty-first"."""
    words = cardinal(n)
    head, sep, last = words.rpartition("-" if "-" in words.split()[-1] else " ")
    last = _ORDINAL.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return head + sep + last


def _year(n: int) -> str:
    return f"{_below_hundred(n // 100)} {_below_hundred(n % 100) if n % 100 >= 10 else 'oh ' + _ONES[n % 100]}"


def _spell(match: re.Match) -> str:
    dollar, digits, decimals, suffix = match[1], match[2], match[3], match[4]
    n = int(digits.replace(",", ""))
    if n >= 10 ** 12 or (suffix and (decimals or dollar)):
        return match[0]
    if suffix:
        return ordinal(n)
    if dollar:  # $15 → fifteen dollars, $3.50 → three dollars and fifty cents
        cents = int((decimals or "0").ljust(2, "0")[:2])
        words = f"{cardinal(n)} dollar{'' if n == 1 else 's'}"
        return words + (f" and {cardinal(cents)} cent{'' if cents == 1 else 's'}" if cents else "")
    if decimals:
        return f"{cardinal(n)} point " + " ".join(_ONES[int(d)] for d in decimals)
    if 1100 <= n <= 1999 and n % 100 and "," not in digits:
        return _year(n)
    return cardinal(n)


@cache
def _digits():
    from whisper_normalizer.english import EnglishNumberNormalizer

    return EnglishNumberNormalizer()


def _as_digits(text: str) -> str:
    """Whisper's number normalizer, which reads lower-case words only: number words are lower-cased first."""
    normalizer = _digits()
    return normalizer(re.sub(r"[A-Za-z]+", lambda m: m[0].lower() if m[0].lower() in normalizer.words else m[0],
                             text))


def spell_numbers(text: str, style: str) -> str:
    """`text` with its numbers written in `style` (one of NUMBER_STYLES)."""
    if style == "words":
        return _NUMBER.sub(_spell, text)
    if style == "digits":
        return _as_digits(text)
    if style:
        raise ValueError(f"numbers: {style!r}; choose digits, words or '' (as the model wrote them)")
    return text
