"""English text for the kathleen LM: lines of words drawn by how often each word occurs in English.

The recipe's only real text is its 1,136 training sentences, so a character LM of them knows the
spellings of a few thousand words. This adds the spellings (and frequencies) of the 60,000 most
common English words from wordfreq's frequency list (Speer 2022; data CC BY-SA 4.0), which holds
word frequencies and no sentences, so no test prompt can be in it. The lines are not sentences:
words follow each other at random, so what the LM learns from them is how words are spelt and how
often they come, not which word follows which.

    python local/english_words.py --words 1000000 --out data/english_words.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib.metadata import version

import numpy as np

WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")  # what the kathleen normalizer keeps: letters and inner apostrophes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=1_000_000, help="words to draw")
    parser.add_argument("--vocabulary", type=int, default=60_000, help="draw from the N most frequent words")
    parser.add_argument("--per-line", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        import wordfreq
    except ImportError:
        sys.exit("local/english_words.py needs wordfreq: pip install wordfreq "
                 "(or pip install -e '.[lm-text]'), or run make with ENGLISH_WORDS=0")
    from asr_transformer.fileio import atomic_open

    words = [w for w in wordfreq.top_n_list("en", args.vocabulary) if WORD.fullmatch(w)]
    freq = np.array([wordfreq.word_frequency(w, "en") for w in words])
    draws = np.random.default_rng(args.seed).choice(len(words), size=args.words, p=freq / freq.sum())
    with atomic_open(args.out) as f:
        for i in range(0, args.words, args.per_line):
            f.write(" ".join(words[j] for j in draws[i:i + args.per_line]) + "\n")
    print(f"{args.out}: {args.words} words drawn from the {len(words)} most frequent (wordfreq {version('wordfreq')})")


if __name__ == "__main__":
    main()
