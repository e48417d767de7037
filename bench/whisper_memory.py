"""Whisper packages: peak memory and time of `asr transcribe` on 11-, 83- and 333-s inputs, and the size of each
file a Whisper user keeps (imported package, fine-tuned package, training checkpoints, with --export its ONNX
exports).

    python bench/whisper_memory.py recipes/kathleen/exp/whisper_tiny/zeroshot/model.pt \
        recipes/kathleen/data/general_english/test.jsonl --files recipes/kathleen/exp/whisper_tiny/model.pt \
        recipes/kathleen/exp/whisper_tiny/checkpoints/epoch_2.pt --json bench/whisper_memory.json

The inputs are other speakers' English: the manifest's `jfk` recording (11 s) and its other recordings joined
with 0.5-s pauses, cycled to 83 and 333 s. Each `asr transcribe` runs in a fresh process (its peak resident
memory from the kernel's rusage), with `--batch-size 2` (what `asr import whisper` now sets: two 30-s windows at
once) and 16 (its default before).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bounded_search import cpu_name  # noqa: E402

LENGTHS = (11, 83, 333)


def inputs(manifest: Path, folder: Path) -> dict[int, Path]:
    """{seconds: a WAV of that length}: the `jfk` recording for 11 s, the others joined for the longer ones."""
    from asr_transformer.data.audio import load_audio
    from asr_transformer.data.manifest import read_manifest

    utts = read_manifest(manifest)
    jfk = next(u for u in utts if u.id == "jfk")
    files = {11: folder / "11s.wav"}
    sf.write(files[11], load_audio(jfk.audio), 16000, subtype="PCM_16")
    pieces, total, pause = [], 0, np.zeros(8000, np.float32)
    for utt in itertools.cycle([u for u in utts if u.id != "jfk"]):
        pieces += [load_audio(utt.audio), pause]
        total += pieces[-2].size + pause.size
        if total >= max(LENGTHS) * 16000:
            break
    audio = np.concatenate(pieces)
    for seconds in LENGTHS[1:]:
        files[seconds] = folder / f"{seconds}s.wav"
        sf.write(files[seconds], audio[: seconds * 16000], 16000, subtype="PCM_16")
    return files


def size(path: Path) -> int:
    """Bytes of a file, or of every file in a folder."""
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file()) if path.is_dir() else path.stat().st_size


def measure(command: list[str]) -> dict:
    """Run `command` in a fresh process → its peak resident memory (MB) and wall time (s)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed: {process.stderr.read().decode()[-2000:]}")
    return {"peak_mb": round(usage.ru_maxrss / 1024), "wall_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", type=Path, help="an imported Whisper package")
    parser.add_argument("manifest", type=Path, help="the general-English manifest (with its jfk recording)")
    parser.add_argument("--files", type=Path, nargs="*", default=[], help="more packages or checkpoints to size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("whisper_memory.json"))
    parser.add_argument("--sizes-only", action="store_true", help="measure the sizes again, keep --json's runs")
    parser.add_argument("--export", action="store_true", help="also size the package's ONNX exports (fp32, int8)")
    args = parser.parse_args()

    from asr_transformer.whisper import WHISPER_BATCH

    asr = str(Path(sys.executable).with_name("asr"))
    runs = json.loads(args.json.read_text())["runs"] if args.sizes_only else []
    with tempfile.TemporaryDirectory() as tmp:
        for seconds, wav in ({} if args.sizes_only else inputs(args.manifest, Path(tmp))).items():
            for batch_size in (WHISPER_BATCH, 16):
                command = [asr, "transcribe", str(wav), "-m", str(args.package), "--threads", str(args.threads),
                           "--batch-size", str(batch_size)]
                runs.append({"input_seconds": seconds, "batch_size": batch_size, **measure(command)})
                print(runs[-1], flush=True)
        sizes = {str(p): round(size(p) / 1e6, 1) for p in [args.package, *args.files]}
        for int8 in (False, True) if args.export else ():
            folder = Path(tmp) / ("onnx_int8" if int8 else "onnx")
            subprocess.run([asr, "export", str(args.package), "--out", str(folder)] + ["--int8"] * int8,
                           check=True, stdout=subprocess.DEVNULL)
            sizes[f"asr export {'--int8 ' * int8}(ONNX folder)"] = round(size(folder) / 1e6, 1)
    command = " ".join(a for a in sys.argv[1:] if a != "--sizes-only")
    report = {"command": "python bench/whisper_memory.py " + command, "package": str(args.package),
              "threads": args.threads, "cpu": cpu_name(), "runs": runs,
              "sizes_mb": sizes}
    args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
