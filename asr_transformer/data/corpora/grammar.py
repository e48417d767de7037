"""A small English grammar for synthetic speech: numbers, digits, letters, dates, times, commands.

Sentences are lower case words without punctuation (apostrophes allowed), 2-10 words long
(about 1-4 s spoken). Every sentence comes from a template whose ``{slot}`` fields are filled
from word lists or number spellers, so the vocabulary is closed (:func:`vocabulary`) and the
output is a deterministic function of the seed: ``generate(n, seed)`` is a prefix of
``generate(n + k, seed)``.

Transcripts are what is written, not how espeak-ng says it: a spelled letter "a" is spoken like
the article, "am" like the verb; the mapping stays consistent, so a model learns it.
"""

from __future__ import annotations

import os
import random
import re
from itertools import islice
from pathlib import Path
from typing import Callable, Iterator

MIN_WORDS, MAX_WORDS = 2, 10

# ---------------------------------------------------------------- number spelling

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
        "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ORDINAL_ONES = ["zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh",
                "eighth", "ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth",
                "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth"]
ORDINAL_TENS = {20: "twentieth", 30: "thirtieth"}


def number_words(n: int) -> str:
    """0 <= n < 1,000,000 in British-style words: 312 -> 'three hundred and twelve'."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number out of range: {n}")
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    if n < 1000:
        head = ONES[n // 100] + " hundred"
        return head if n % 100 == 0 else f"{head} and {number_words(n % 100)}"
    head = number_words(n // 1000) + " thousand"
    rest = n % 1000
    if rest == 0:
        return head
    return f"{head} and {number_words(rest)}" if rest < 100 else f"{head} {number_words(rest)}"


def ordinal_words(n: int) -> str:
    """1 <= n <= 31 as an ordinal: 21 -> 'twenty first'."""
    if n < 20:
        return ORDINAL_ONES[n]
    if n % 10 == 0:
        return ORDINAL_TENS[n]
    return f"{TENS[n // 10]} {ORDINAL_ONES[n % 10]}"


def year_words(year: int) -> str:
    """1950-2039 as spoken: 1984 -> 'nineteen eighty four', 2005 -> 'two thousand and five'."""
    if 2000 <= year < 2010:
        return "two thousand" if year == 2000 else f"two thousand and {ONES[year - 2000]}"
    hi, lo = divmod(year, 100)
    return f"{number_words(hi)} {number_words(lo)}"


# ---------------------------------------------------------------- word lists (slots)

WORDS: dict[str, list[str]] = {
    "month": ["january", "february", "march", "april", "may", "june", "july", "august",
              "september", "october", "november", "december"],
    "weekday": ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"],
    "letter": list("abcdefghijklmnopqrstuvwxyz"),
    "digit": ONES[:10] + ["oh"],
    "room": ["kitchen", "bedroom", "living room", "bathroom", "garage", "office", "hallway",
             "garden"],
    "device": ["lights", "lamp", "fan", "heater", "tv", "radio", "air conditioner",
               "coffee machine"],
    "contact": ["mom", "dad", "john", "sarah", "mike", "emma", "david", "lisa", "anna", "peter",
                "tom", "maria", "my sister", "my brother"],
    "city": ["paris", "london", "tokyo", "berlin", "madrid", "rome", "boston", "chicago",
             "seattle", "toronto", "sydney", "dublin", "new york", "mexico city"],
    "unit": ["minutes", "seconds", "hours"],
    "food": ["milk", "eggs", "bread", "butter", "cheese", "apples", "bananas", "coffee", "tea",
             "rice", "pasta", "orange juice"],
    "genre": ["jazz", "rock", "classical", "pop", "relaxing", "piano"],
    "app": ["calendar", "camera", "email", "settings", "map", "calculator"],
    "place": ["the airport", "the station", "the library", "the hospital", "the park", "home",
              "the museum", "the nearest pharmacy"],
    "task": ["buy milk", "call the bank", "water the plants", "feed the cat", "walk the dog",
             "pay the rent", "take my medicine", "pick up the kids"],
    "when": ["today", "tomorrow", "tonight", "this evening", "this afternoon", "next week",
             "tomorrow morning", "on monday", "on friday"],
    "event": ["meeting", "appointment", "dinner", "lunch", "flight", "class", "party"],
    "thing": ["apples", "chairs", "books", "people", "tickets", "boxes"],
    "onoff": ["on", "off"],
    "updown": ["up", "down"],
    "weather": ["weather", "temperature", "forecast"],
    "adj": ["cold", "warm", "hot", "windy", "sunny", "cloudy"],
    "ampm": ["am", "pm", "in the morning", "in the afternoon", "in the evening", "at night"],
}


def _pick(name: str) -> Callable[[random.Random], str]:
    return lambda rng: rng.choice(WORDS[name])


def _digits(lo: int, hi: int) -> Callable[[random.Random], str]:
    return lambda rng: " ".join(rng.choice(WORDS["digit"]) for _ in range(rng.randint(lo, hi)))


def _letters(lo: int, hi: int) -> Callable[[random.Random], str]:
    return lambda rng: " ".join(rng.choice(WORDS["letter"]) for _ in range(rng.randint(lo, hi)))


def _number(rng: random.Random) -> str:
    """Numbers with a spread of magnitudes: small ones common, thousands rarer."""
    size = rng.choices([20, 100, 1000, 10000], weights=[3, 4, 4, 2])[0]
    return number_words(rng.randrange(1 if size == 20 else 0, size))


def _clock(rng: random.Random) -> str:
    """'half past seven', 'ten forty five', 'quarter to nine', 'six o'clock', 'noon'."""
    hour = rng.randint(1, 12)
    form = rng.choices(["digital", "past", "to", "oclock", "special"], weights=[5, 3, 3, 2, 1])[0]
    if form == "digital":
        minute = rng.randrange(1, 60)
        tail = f"oh {ONES[minute]}" if minute < 10 else number_words(minute)
        return f"{number_words(hour)} {tail}"
    if form == "past":
        what = rng.choice(["half", "quarter", "five", "ten", "twenty", "twenty five"])
        return f"{what} past {number_words(hour)}"
    if form == "to":
        what = rng.choice(["quarter", "five", "ten", "twenty", "twenty five"])
        return f"{what} to {number_words(hour)}"
    if form == "oclock":
        return f"{number_words(hour)} o'clock"
    return rng.choice(["noon", "midnight"])


def _time(rng: random.Random) -> str:
    """A clock time, sometimes with am, pm or part of the day."""
    clock = _clock(rng)
    if clock not in ("noon", "midnight") and rng.random() < 0.4:
        clock += " " + rng.choice(WORDS["ampm"])
    return clock


FILLERS: dict[str, Callable[[random.Random], str]] = {name: _pick(name) for name in WORDS}
FILLERS.update({
    "number": _number,
    "small": lambda rng: number_words(rng.randint(2, 60)),
    "temp": lambda rng: number_words(rng.randint(15, 30)),
    "percent": lambda rng: number_words(rng.choice(range(0, 101, 5))),
    "cents": lambda rng: number_words(rng.randint(1, 99)),
    "digits": _digits(3, 6),
    "pin": _digits(4, 4),
    "phone": _digits(7, 7),
    "letters": _letters(2, 5),
    "initials": _letters(2, 3),
    "ordinal": lambda rng: ordinal_words(rng.randint(1, 31)),
    "year": lambda rng: year_words(rng.randint(1950, 2039)),
    "clock": _clock,
    "time": _time,
})

# ---------------------------------------------------------------- templates per category

TEMPLATES: dict[str, list[str]] = {
    "numbers": [
        "{number}", "{number}", "the number is {number}", "it costs {number} dollars",
        "{number} dollars and {cents} cents", "turn to page {number}", "room number {number}",
        "the total is {number}", "we need {number} more {thing}", "there are {number} {thing}",
        "about {number} people came", "add {number} to the list", "it is {number} miles away",
        "set the volume to {percent} percent", "the battery is at {percent} percent",
    ],
    "digits": [
        "{digits}", "{digits}", "my pin is {pin}", "the code is {digits}", "call {phone}",
        "flight {digits}", "my number is {phone}", "enter {pin}", "order number {digits}",
        "the password is {digits}",
    ],
    "letters": [
        "{letters}", "{letters}", "spell it {letters}", "my initials are {initials}",
        "the letters are {letters}", "it starts with {letter} and {letter}", "gate {letter} {small}",
        "row {letter} seat {small}", "type {letters}",
    ],
    "dates": [
        "the {ordinal} of {month} {year}", "the {ordinal} of {month}", "{month} {ordinal}",
        "{month} {ordinal} {year}", "on {weekday} the {ordinal}", "my birthday is {month} {ordinal}",
        "the meeting is on {weekday} the {ordinal}", "it was in {month} {year}",
        "book a flight for the {ordinal} of {month}", "what day is the {ordinal} of {month}",
        "i was born in {year}", "next {weekday}", "last {weekday} in {month}",
    ],
    "times": [
        "{time}", "{time}", "at {time}", "it is {time}", "wake me up at {time}",
        "set an alarm for {time}", "the {event} is at {time}", "meet me at {time} on {weekday}",
        "the train leaves at {clock}", "the shop opens at {clock}", "see you at {time}",
        "dinner is at {clock} tonight", "move my {event} to {time}",
    ],
    "commands": [
        "turn {onoff} the {room} {device}", "turn {onoff} the {device}", "switch {onoff} the {device}",
        "dim the {room} lights", "turn the volume {updown}", "turn it {updown}",
        "set the {room} temperature to {temp} degrees", "set the heating to {temp} degrees",
        "set a timer for {small} {unit}", "start a {small} minute timer", "cancel the timer",
        "call {contact}", "call {contact} {when}", "send a message to {contact}",
        "text {contact} that i am running late", "remind me to {task}", "remind me to {task} {when}",
        "play some {genre} music", "play {genre} music in the {room}", "play the next song",
        "pause the music", "stop the music", "skip this song", "what is the weather in {city}",
        "what is the {weather} for {when}", "what time is it in {city}", "is it {adj} in {city}",
        "will it rain {when}", "how far is {city} from {city}", "open the {app}", "close the {app}",
        "navigate to {place}", "how do i get to {place}", "take me {when} to {place}",
        "add {food} to my shopping list", "add {food} and {food} to the list",
        "we are out of {food}", "cancel my {event} {when}", "schedule a {event} with {contact} {when}",
        "what is on my calendar {when}", "do i have a {event} {when}", "read my messages",
        "lock the front door", "open the garage door", "good morning", "good night",
        "thank you", "yes please", "no thanks", "never mind", "what can you do",
        "book a table for {small} people", "order a taxi to {place}", "find a flight to {city}",
        "i'd like to go to {city}", "don't forget the {food}", "let's meet in {city} {when}",
    ],
}

WEIGHTS = {"numbers": 15, "digits": 12, "letters": 8, "dates": 13, "times": 15, "commands": 37}

_SLOT = re.compile(r"\{(\w+)\}")


def _fill(template: str, rng: random.Random) -> str:
    return _SLOT.sub(lambda m: FILLERS[m.group(1)](rng), template)


def category_weights(overrides: dict[str, float] | None = None) -> dict[str, float]:
    """WEIGHTS with some categories' weights replaced, e.g. ``{"letters": 24}``."""
    weights = dict(WEIGHTS)
    for name, weight in (overrides or {}).items():
        if name not in WEIGHTS:
            raise ValueError(f"unknown sentence category {name!r}; the grammar has {', '.join(WEIGHTS)}")
        if weight < 0:
            raise ValueError(f"category {name!r}: weight {weight} is negative")
        weights[name] = weight
    if not any(weights.values()):
        raise ValueError("every sentence category has weight 0")
    return weights


def sentences(seed: int = 0, weights: dict[str, float] | None = None) -> Iterator[str]:
    """An endless, deterministic stream of sentences of MIN_WORDS..MAX_WORDS words.

    `weights` replaces some categories' weights (:func:`category_weights`); the default is WEIGHTS.
    """
    rng = random.Random(seed)
    chosen = category_weights(weights)
    categories = list(chosen)
    shares = [chosen[c] for c in categories]
    while True:
        category = rng.choices(categories, weights=shares)[0]
        text = " ".join(_fill(rng.choice(TEMPLATES[category]), rng).split())
        if MIN_WORDS <= len(text.split()) <= MAX_WORDS:
            yield text


def generate(n: int, seed: int = 0) -> list[str]:
    """The first `n` sentences of the stream for `seed`."""
    return list(islice(sentences(seed), n))


def vocabulary() -> set[str]:
    """Every word the grammar can produce (template words, word lists and number words)."""
    words: set[str] = set()
    for templates in TEMPLATES.values():
        for template in templates:
            words.update(_SLOT.sub(" ", template).split())
    for values in WORDS.values():
        for value in values:
            words.update(value.split())
    words.update(ONES + [t for t in TENS if t] + ORDINAL_ONES[1:] + list(ORDINAL_TENS.values()))
    words.update(["hundred", "thousand", "and", "oh", "o'clock", "half", "quarter", "past", "to",
                  "noon", "midnight", "percent"])
    return words


def read_text_file(path: str | os.PathLike) -> list[str]:
    """A user's own sentences, one per line; blank lines and lines starting with '#' skipped.

    Whitespace is collapsed; the text is otherwise kept as written.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: text file not found")
    lines = [" ".join(line.split()) for line in path.read_text(encoding="utf-8").splitlines()]
    texts = [line for line in lines if line and not line.startswith("#")]
    if not texts:
        raise ValueError(f"{path}: no sentences (expected one sentence per line)")
    return texts
