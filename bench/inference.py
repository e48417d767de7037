"""A package against its exports: WER, CER, RTF, size on disk and peak memory, each in the package's own decoding.

    python bench/inference.py recipes/synthetic/exp/small/model.pt recipes/synthetic/data/test.jsonl \
        --json bench/inference_synthetic.json

Runs `asr` as a user would, one decoding at a time, each in its own process (its peak resident memory read from
the process' own rusage), into folders beside the package (`--out`, default `<package's folder>/inference_<set>`):

    package        the package as it decodes by default (its mode, beam, weights, LMs), fp32, PyTorch
    package_int8   the same with its Linear layers int8 (`--precision int8`)
    export         the ONNX export (`asr export`), onnxruntime, in the package's mode with its LMs
    export_int8    the int8 ONNX export (`asr export --int8`)

Each row says how many utterances' transcripts equal the package's. RTF = decoding time (encoder and search;
features apart) / audio seconds; the decodings run one after another, so run this on an otherwise idle machine.
`recipes/results.py` puts the rows in RESULTS.md (Export table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounded_search import cpu_name  # noqa: E402
from repo_paths import command_line, in_repository, report  # noqa: E402


def run(command: list[str]) -> int:
    """Run `command` (its output kept quiet); → its peak resident memory in MB."""
    print("+", " ".join(command), flush=True)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return round(usage.ru_maxrss / 1024)


def folder_mb(path: Path) -> float:
    return round(path.stat().st_size / 1e6 if path.is_file() else sum(f.stat().st_size for f in path.iterdir()) / 1e6, 2)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package", type=Path, help="A model package (`asr package`, `asr import whisper`).")
    parser.add_argument("manifest", type=Path, help="The manifest to decode (a test set).")
    parser.add_argument("--out", type=Path, help="Where the exports and decodings go.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("inference.json"))
    args = parser.parse_args(argv)
    asr = str(Path(sys.executable).with_name("asr"))
    out = args.out or args.package.parent / f"inference_{args.manifest.stem}"
    out.mkdir(parents=True, exist_ok=True)
    run([asr, "export", str(args.package), "--out", str(out / "onnx"), "--force"])
    run([asr, "export", str(args.package), "--out", str(out / "onnx_int8"), "--int8", "--force"])
    runs = {"package": [str(args.package)], "package_int8": [str(args.package), "--precision", "int8"],
            "export": [str(out / "onnx")], "export_int8": [str(out / "onnx_int8")]}
    rows, reference = {}, None
    for label, (model, *options) in runs.items():
        folder = out / label
        command = [asr, "decode", model, str(args.manifest), *options, "--threads", str(args.threads),
                   "--out", str(folder)]
        t0 = time.perf_counter()
        peak = run(command)
        result = json.loads((folder / "result.json").read_text())
        whisper = json.loads((folder / "result_whisper.json").read_text()) if (folder / "result_whisper.json").exists() else {}
        rtf = json.loads((folder / "rtf.json").read_text())
        texts = {r["id"]: r["text"] for r in map(json.loads, (folder / "hyp.jsonl").read_text().splitlines())}
        reference = reference or texts
        rows[label] = {"wer": result["wer"], "cer": result["cer"], "wer_whisper": whisper.get("wer"),
                       "rtf": rtf["rtf"], "mode": rtf["mode"], "lm": rtf.get("lm"), "word_lm": rtf.get("word_lm"),
                       "precision": rtf["precision"], "runtime": rtf["runtime"], "size_mb": folder_mb(Path(model)),
                       "peak_mb": peak, "same_as_package": sum(texts.get(k) == v for k, v in reference.items()),
                       "utterances": len(reference), "threads": rtf["threads"],
                       "command": " ".join(["asr", *[in_repository(c) for c in command[1:]]])}
        print(f"  {label}: WER {100 * result['wer']:.2f} %, RTF {rtf['rtf']:.4f}, peak {peak} MB, "
              f"{rows[label]['same_as_package']}/{len(reference)} as the package ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    return report({"command": command_line("inference.py", argv if argv is not None else sys.argv[1:]),
                   "package": in_repository(args.package), "manifest": in_repository(args.manifest),
                   "threads": args.threads, "cpu": cpu_name(), "runs": rows}, args.json)


if __name__ == "__main__":
    main()
