"""Loading an n-gram LM: the dict reader (NgramLM.read_arpa) against the binary one (decode/ngram_binary.py).

    .venv/bin/python bench/lm_load.py [ARPA] [--tokenizer DIR] [--queries 200000] [--out bench/lm_load.json]

ARPA defaults to the Kathleen recipe's word 4-gram LM; --tokenizer reads it as a token LM over those pieces
(omit it for a word LM). Each measurement runs in a fresh process, so resident memory (VmRSS after loading,
VmHWM the peak, from /proc/self/status) is that reader's alone: the old reader's load, the ARPA → binary
conversion, and the binary file's memory-mapped load. Lookups per second: `log_prob` of random (history, word)
pairs — histories taken from the LM's own n-grams, words random — with the binary LM's memo emptied between
queries; the two readers' answers are compared (they must be equal).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repo_paths import in_repository  # bench/repo_paths.py

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "recipes" / "kathleen" / "data" / "words_4gram_text.arpa"


def _status() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024  # MB
    return out


def _pieces(tokenizer: str | None):
    if not tokenizer:
        return None
    from asr_transformer.data.tokenizer import load_tokenizer

    tok = load_tokenizer(Path(tokenizer))
    return tok.pieces(range(tok.vocab_size))


def _queries(arpa: str, count: int, seed: int = 0) -> list[tuple[list[str], str]]:
    """n (history words, word) pairs: histories from the file's n-grams (order-1 words), words random."""
    rng = random.Random(seed)
    grams, words, n = [], [], 0
    with open(arpa, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("\\") and line.endswith("-grams:"):
                n = int(line[1:-len("-grams:")])
                continue
            fields = line.split()
            if n == 0 or len(fields) < n + 1:
                continue
            if n == 1:
                words.append(fields[1])
            grams.append(fields[1:n + 1])
    return [(["<s>"] + rng.choice(grams), rng.choice(words)) for _ in range(count)]


def _lookups(lm, queries, ids) -> tuple[float, list[float]]:
    encoded = [([ids.get(w, 1) for w in h], ids.get(w, 1)) for h, w in queries]
    memo = getattr(lm, "_memo", None)
    start = time.perf_counter()
    out = []
    for h, w in encoded:
        out.append(lm.log_prob(h, w))
        if memo is not None:
            memo.clear()
    return len(encoded) / (time.perf_counter() - start), out


def child(part: str, arpa: str, binary: str, tokenizer: str | None, nq: int, result: str) -> None:
    from asr_transformer.decode.ngram import NgramLM
    from asr_transformer.decode.ngram_binary import BinaryNgramLM, convert_arpa

    pieces = _pieces(tokenizer)
    base = _status()["VmRSS"]
    start = time.perf_counter()
    if part == "old":
        lm = NgramLM.read_arpa(arpa, pieces)
    elif part == "convert":
        lm = convert_arpa(arpa, pieces, binary)
    else:
        lm = BinaryNgramLM.load(binary)
    seconds = time.perf_counter() - start
    mem = _status()
    row = {"seconds": seconds, "rss_mb": mem["VmRSS"] - base, "peak_mb": mem["VmHWM"], "base_mb": base}
    if part in ("old", "load") and nq:
        ids = lm.words if lm.words is not None else {p: i for i, p in enumerate(pieces)}
        row["lookups_per_s"], values = _lookups(lm, _queries(arpa, nq), ids)
        row["rss_after_lookups_mb"] = _status()["VmRSS"] - base
        Path(result + ".values").write_text(json.dumps([v if math.isfinite(v) else None for v in values]))
    Path(result).write_text(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arpa", nargs="?", default=str(DEFAULT))
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--queries", type=int, default=200_000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "lm_load.json"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--binary", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.arpa, args.binary, args.tokenizer, args.queries, args.result)
    if not Path(args.arpa).exists():
        sys.exit(f"{args.arpa}: no such ARPA file (give one as the argument)")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "lm.ngram")
        for part in ("convert", "load", "old"):
            result = os.path.join(tmp, f"{part}.json")
            cmd = [sys.executable, __file__, args.arpa, "--child", part, "--binary", binary, "--result", result,
                   "--queries", str(args.queries)] + (["--tokenizer", args.tokenizer] if args.tokenizer else [])
            subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
            rows[part] = json.loads(Path(result).read_text())
            print(f"  {part}: {rows[part]['seconds']:.2f} s", flush=True)
        file_mb = os.path.getsize(binary) / 2**20
        old_values = json.loads(Path(os.path.join(tmp, "old.json.values")).read_text())
        new_values = json.loads(Path(os.path.join(tmp, "load.json.values")).read_text())
    same = all((a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 1e-6)
               for a, b in zip(old_values, new_values))
    report = {"arpa": in_repository(args.arpa), "arpa_mb": os.path.getsize(args.arpa) / 2**20, "binary_mb": file_mb,
              "queries": args.queries, "identical_log_probs": same, **rows}
    print(f"\n{args.arpa} ({report['arpa_mb']:.0f} MB ARPA, {file_mb:.0f} MB binary)")
    print(f"{'':28}{'seconds':>9}{'RSS MB':>9}{'peak MB':>9}{'lookups/s':>11}")
    for name, key in (("old: NgramLM.read_arpa", "old"), ("new: ARPA → binary", "convert"),
                      ("new: BinaryNgramLM.load", "load")):
        r = rows[key]
        lps = f"{r['lookups_per_s']:>11,.0f}" if "lookups_per_s" in r else f"{'':>11}"
        print(f"{name:28}{r['seconds']:9.2f}{r['rss_mb']:9.0f}{r['peak_mb']:9.0f}{lps}")
    print(f"log-probs of {args.queries} lookups identical (≤ 1e-6): {same}")
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
