"""English sentences for the kathleen LM, from free texts that Debian packages.

The recipe's own text is its 1,136 training sentences; `english_words.py` adds how English words
are spelt, but not which word follows which. This writes real English sentences, one a line, from
three Debian packages (fetched with `apt-get download`, which needs no root, or read from --debs):

- `fortunes`: fortune-mod's cookie files (quotations, jokes, verse; attributions dropped);
- `wordnet-base`: WordNet 3.0's glosses and example sentences (Princeton's WordNet licence);
- `dict-gcide`: the GNU Collaborative International Dictionary of English (Webster's 1913 and
  WordNet; GPL): its quotations from English literature.

Nothing of them is copied into the project; they are read where the recipe runs. The ARCTIC
prompts come from old English books too, so every sentence that shares five words in a row with a
text of an --exclude manifest (the dev and test prompts) is left out, and the count is reported.

    python local/english_text.py --exclude data/dev.jsonl data/test.jsonl --out data/english_text.txt
"""

from __future__ import annotations

import argparse
import gzip
import io
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

from english_words import WORD  # this folder's: what the kathleen normalizer keeps

PACKAGES = {  # package → the files read from it
    "fortunes": "./usr/share/games/fortunes/",
    "wordnet-base": "./usr/share/wordnet/data.",
    "dict-gcide": "./usr/share/dictd/gcide.dict.dz",
}
SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
MIN_WORDS = 4
EXCLUDE_NGRAM = 5


def words(text: str) -> list[str]:
    return WORD.findall(text.lower().replace("\u2019", "'"))


def ngrams(w: list[str]):
    """The runs of EXCLUDE_NGRAM words in `w`, as tuples."""
    return (tuple(w[i:i + EXCLUDE_NGRAM]) for i in range(len(w) - EXCLUDE_NGRAM + 1))


def sentences(text: str):
    """The sentences (and clauses after ';' or ':') of `text` of at least MIN_WORDS words, normalized."""
    for part in SENTENCE_END.split(" ".join(text.split())):
        w = words(part)
        if len(w) >= MIN_WORDS:
            yield " ".join(w)


def deb_files(deb: Path, prefix: str):
    """(name, bytes) of the files under `prefix` in the data archive of the Debian package `deb`."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb}: not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(data):  # ar members: a 60-byte header, then the data, padded to even size
        name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + size % 2
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise ValueError(f"{deb}: {name} is zstd-compressed; unpack it with dpkg-deb -x instead")
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                for member in tar:
                    if member.isfile() and member.name.startswith(prefix):
                        yield member.name, tar.extractfile(member).read()
            return
    raise ValueError(f"{deb}: no data.tar member")


def fortunes(name: str, text: str):
    if "." in Path(name).name or Path(name).name == "ascii-art":  # .dat indexes, .u8 copies; pictures
        return
    for cookie in text.split("\n%\n"):
        yield from sentences(re.sub(r"\n\s*--.*", "", cookie, flags=re.S))  # without "-- Author"


def wordnet(name: str, text: str):
    for line in text.splitlines():
        if not line.startswith(" ") and "|" in line:  # data lines end in "| gloss; "example"; ..."
            for part in line.split("|", 1)[1].split(";"):
                w = words(part)
                if len(w) >= MIN_WORDS:
                    yield " ".join(w)


def gcide(name: str, data: bytes):
    """The quotations: blocks indented 12 spaces between "[1913 Webster]"-style source lines, without
    their "--Author." (the definitions, 3 million more words, left dev WER where it was)."""
    for block in re.split(r"\n\s*\[[^\]]*\]\s*\n", gzip.decompress(data).decode("utf-8", "ignore")):
        lines = [line for line in block.splitlines() if line.strip()]
        if lines and all(line.startswith(" " * 12) for line in lines):
            yield from sentences(re.sub(r"--\s*[A-Z][\w. ]*$", "", " ".join(lines)))


def read_package(package: str, deb: Path):
    for name, data in deb_files(deb, PACKAGES[package]):
        if package == "dict-gcide":
            yield from gcide(name, data)
        elif package == "fortunes":
            yield from fortunes(name, data.decode("utf-8", "ignore"))
        else:
            yield from wordnet(name, data.decode("utf-8", "ignore"))


def find_debs(debs: Path | None, cache: Path) -> dict[str, Path]:
    """The .deb of every package: from `debs`, else downloaded into `cache` with apt-get."""
    def found_in(folder: Path) -> dict[str, list[Path]]:
        return {p: sorted(folder.glob(f"{p}_*.deb")) for p in PACKAGES}

    where = debs or cache
    found = found_in(where)
    missing = [p for p, hits in found.items() if not hits]
    if missing and debs is None:
        if shutil.which("apt-get") is None:
            sys.exit(f"local/english_text.py needs the Debian packages {', '.join(missing)}: no apt-get here, so "
                     "download them elsewhere and pass --debs DIR, or run make with ENGLISH_TEXT=0")
        cache.mkdir(parents=True, exist_ok=True)
        run = subprocess.run(["apt-get", "download", *missing], cwd=cache, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"apt-get download {' '.join(missing)} failed:\n{run.stderr.strip()}\n"
                     "(pass --debs DIR with the .deb files, or run make with ENGLISH_TEXT=0)")
        found = found_in(cache)
        missing = [p for p, hits in found.items() if not hits]
    if missing:
        sys.exit(f"no {', '.join(f'{p}_*.deb' for p in missing)} in {where}")
    return {p: hits[-1] for p, hits in found.items()}


def excluded_ngrams(manifests: list[Path]) -> set[tuple[str, ...]]:
    """Every run of EXCLUDE_NGRAM words in the texts of `manifests`."""
    from asr_transformer.data.manifest import ManifestError, read_manifest

    grams = set()
    for path in manifests:
        try:
            texts = [u.text for u in read_manifest(path)]
        except ManifestError as e:
            sys.exit(str(e))
        for w in map(words, texts):
            grams.update(ngrams(w))
    return grams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--exclude", type=Path, nargs="*", default=[],
                        help="manifests whose texts must not be in the output (the dev and test sets)")
    parser.add_argument("--debs", type=Path, help="a folder holding the three .deb files (default: apt-get download)")
    parser.add_argument("--cache", type=Path, default=Path("data/debs"), help="where apt-get downloads them")
    args = parser.parse_args()
    from asr_transformer.fileio import atomic_open

    held_out = excluded_ngrams(args.exclude)
    seen, dropped, counts = set(), 0, {}
    with atomic_open(args.out) as f:
        for package, deb in find_debs(args.debs, args.cache).items():
            kept = 0
            try:
                texts = list(read_package(package, deb))
            except (ValueError, OSError, EOFError, tarfile.TarError, lzma.LZMAError, zlib.error) as e:
                sys.exit(f"{deb}: {e}" if str(deb) not in str(e) else str(e))
            for s in texts:
                if s in seen:
                    continue
                seen.add(s)
                if any(g in held_out for g in ngrams(s.split())):
                    dropped += 1
                    continue
                f.write(s + "\n")
                kept += 1
            counts[deb.name] = kept
    print(f"{args.out}: " + ", ".join(f"{n} sentences from {d}" for d, n in counts.items())
          + f"; {dropped} left out for sharing {EXCLUDE_NGRAM} words in a row with {', '.join(map(str, args.exclude))}")


if __name__ == "__main__":
    main()
