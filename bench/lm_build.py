"""Building an n-gram LM from text (`asr lm`): time, peak memory and n-grams of each order.

    .venv/bin/python bench/lm_build.py [--texts T ...] [--tokenizer DIR] [--order 4] [--tokens]
                                       [--arpa OUT] [--compare ARPA] [--out bench/lm_build.json]

By default it runs the Kathleen recipe's word 4-gram command (recipes/kathleen/Makefile, `word_lm`), from the
recipe's folder:

    asr lm data/train.jsonl data/english_text.txt --tokenizer data/tokenizer_phone --order 4 --words --out OUT

in a fresh process: wall-clock and CPU seconds and peak resident memory (ru_maxrss) are that whole command's,
Python's start and imports included; the seconds spent estimating (`train_tables`) and writing the ARPA file
(`ArpaTables.write_arpa`) are timed inside it, the rest being imports and reading and normalizing the texts.
--compare (default: the recipe's data/words_4gram_text.arpa, when OUT is another file) checks the new file
against an earlier one: byte for byte, else every line's words and numbers (largest difference reported).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repo_paths import in_repository  # bench/repo_paths.py

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "kathleen"
TEXTS = ["data/train.jsonl", "data/english_text.txt"]


def child(result: str, args: list[str]) -> None:
    """Run `asr lm args` in this process, timing its estimation and its writing; the times and what it built go
    to `result` (JSON)."""
    from asr_transformer import lm_build
    from asr_transformer.cli import app
    from asr_transformer.decode import ngram

    times, built = {}, []

    def timed(name, fn):
        def run(*a, **k):
            start = time.perf_counter()
            out = fn(*a, **k)
            times[name] = time.perf_counter() - start
            return out
        return run

    ngram.train_tables = timed("estimate_s", ngram.train_tables)
    ngram.ArpaTables.write_arpa = timed("write_s", ngram.ArpaTables.write_arpa)
    build = lm_build.build_lm
    lm_build.build_lm = lambda *a, **k: built.append(build(*a, **k)) or built[-1]
    app(["lm", *args], standalone_mode=False)
    Path(result).write_text(json.dumps({**times, "ngrams": built[0].ngrams, "sentences": built[0].sentences}))


def compare(new: str, old: str) -> dict:
    """Byte-identical, or else the largest difference between the numbers of lines with the same words."""
    if Path(new).read_bytes() == Path(old).read_bytes():
        return {"compared_with": old, "identical": True}
    worst, lines = 0.0, 0
    with open(new, encoding="utf-8") as a, open(old, encoding="utf-8") as b:
        for x, y in zip(a, b, strict=True):
            fx, fy = x.split("\t"), y.split("\t")
            if len(fx) == 1:  # headers
                assert x == y, f"{new} and {old} differ: {x!r} against {y!r}"
                continue
            assert fx[1] == fy[1] and len(fx) == len(fy), f"{new} and {old} list other n-grams: {x!r}, {y!r}"
            worst = max([worst] + [abs(float(u) - float(v)) for u, v in zip(fx[::2], fy[::2])])
            lines += 1
    return {"compared_with": old, "identical": False, "lines": lines, "max_abs_diff_log10": worst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", nargs="+", default=TEXTS, help="relative to --cwd")
    parser.add_argument("--tokenizer", default="data/tokenizer_phone")
    parser.add_argument("--order", type=int, default=4)
    parser.add_argument("--tokens", action="store_true", help="a token LM (default: a word LM, --words)")
    parser.add_argument("--cwd", default=str(RECIPE), help="where the command runs (default: the recipe)")
    parser.add_argument("--arpa", default=None, help="keep the ARPA file here (default: a temporary file)")
    parser.add_argument("--compare", default=str(RECIPE / "data" / "words_4gram_text.arpa"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "lm_build.json"))
    if sys.argv[1:2] == ["--child"]:  # the measured process: --child RESULT then `asr lm`'s arguments
        return child(sys.argv[2], sys.argv[3:])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        arpa = args.arpa or os.path.join(tmp, "lm.arpa")
        lm_args = [*args.texts, "--tokenizer", args.tokenizer, "--order", str(args.order),
                   *([] if args.tokens else ["--words"]), "--out", arpa]
        result = os.path.join(tmp, "result.json")
        load = os.getloadavg()[0]
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, __file__, "--child", result, *lm_args], cwd=args.cwd,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            sys.exit(f"asr lm failed (exit status {os.waitstatus_to_exitcode(status)})")
        row = json.loads(Path(result).read_text())
        shown = [a.replace(tmp, "<temporary folder>") for a in lm_args]  # no machine's paths in the report
        report = {"command": "asr lm " + " ".join(shown), "cwd": in_repository(args.cwd),
                  "wall_s": wall, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
                  "peak_rss_mb": usage.ru_maxrss / 1024, **row, "arpa_mb": os.path.getsize(arpa) / 2**20,
                  "cpus": os.cpu_count(), "load_average_before": load}
        old = Path(args.cwd, args.compare)
        if old.exists() and old.resolve() != Path(args.cwd, arpa).resolve():
            report.update(compare(arpa, str(old)), compared_with=in_repository(old))
    print(f"{report['command']}\n  {wall:.1f} s wall ({usage.ru_utime:.1f} s user, {usage.ru_stime:.1f} s system; "
          f"estimate {row['estimate_s']:.1f} s, write {row['write_s']:.1f} s), peak RSS {report['peak_rss_mb']:.0f} MB")
    print("  " + ", ".join(f"{count} {n}-grams" for n, count in enumerate(row["ngrams"], 1)))
    if "identical" in report:
        print(f"  same as {report['compared_with']}: "
              + ("byte for byte" if report["identical"] else f"to {report['max_abs_diff_log10']:g} (log10)"))
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
