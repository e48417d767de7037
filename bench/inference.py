"""fp32 against int8, and the PyTorch package against its ONNX export: WER, CER, RTF and size on disk.

    python bench/inference.py recipes/kathleen/exp/phone --manifest recipes/kathleen/data/test.jsonl

Runs `asr` as a user would, one decoding at a time (each in its own process), into `EXP/decode_<set>_*`
folders that `recipes/results.py` reports beside the recipe's own rows:

    <set>_int8_lm           the package's own setup (mode, beam, weights, LMs), encoder and decoder int8
    <set>_rescore           attention rescoring of the CTC n-best (the mode an export runs), no LM: fp32 …
    <set>_rescore_int8      … with the package's Linear layers int8 (`--precision int8`)
    <set>_onnx_rescore      … the ONNX export (`asr export`) with onnxruntime
    <set>_onnx_int8_rescore … the int8 ONNX export (`asr export --int8`)

The fp32 row of the package's own setup is the recipe's `decode_<set>_lm`. The summary (and each command)
goes to `--json` (default bench/inference.json). RTF = decoding time (encoder and search; features apart) /
audio seconds; the decodings run one after another, so run this on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path


def run(command: list[str]) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("exp", type=Path, help="An experiment folder holding model.pt (`asr package`).")
    parser.add_argument("--manifest", type=Path, required=True, help="The manifest to decode (a test set).")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("inference.json"))
    args = parser.parse_args()
    asr = str(Path(sys.executable).with_name("asr"))
    exp, name = args.exp, args.manifest.stem
    package = exp / "model.pt"
    threads = ["--threads", str(args.threads)]
    run([asr, "export", str(package), "--out", str(exp / "onnx")])
    run([asr, "export", str(package), "--out", str(exp / "onnx_int8"), "--int8"])
    runs = {
        f"{name}_lm": None,  # the recipe's own decoding, fp32
        f"{name}_int8_lm": [str(package), "--precision", "int8"],
        f"{name}_rescore": [str(package), "--mode", "rescore", "--no-lm"],
        f"{name}_rescore_int8": [str(package), "--mode", "rescore", "--no-lm", "--precision", "int8"],
        f"{name}_onnx_rescore": [str(exp / "onnx"), "--mode", "rescore"],
        f"{name}_onnx_int8_rescore": [str(exp / "onnx_int8"), "--mode", "rescore"],
    }
    rows = {}
    for label, options in runs.items():
        folder = exp / f"decode_{label}"
        command = None
        if options is not None:
            command = [asr, "decode", options[0], str(args.manifest), *options[1:], *threads, "--out", str(folder)]
            t0 = time.perf_counter()
            run(command)
            print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
        elif not (folder / "result.json").exists():
            run([asr, "score", str(folder)])
        result = json.loads((folder / "result.json").read_text())
        rtf = json.loads((folder / "rtf.json").read_text())
        rows[label] = {"wer": result["wer"], "cer": result["cer"], "rtf": rtf["rtf"], "mode": rtf["mode"],
                       "precision": rtf["precision"], "runtime": rtf.get("runtime", "pytorch"),
                       "model_mb": rtf.get("model_mb", round(package.stat().st_size / 1e6, 2)),
                       "threads": rtf["threads"], "command": " ".join(["asr", *command[1:]]) if command else "the recipe"}
        print(f"  {label}: WER {100 * result['wer']:.2f} %, CER {100 * result['cer']:.2f} %, RTF {rtf['rtf']:.4f}",
              flush=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    args.json.write_text(json.dumps({"exp": str(exp), "manifest": str(args.manifest), "cpu": cpu,
                                     "threads": args.threads, "runs": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
