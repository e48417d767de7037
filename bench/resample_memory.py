"""Peak memory and time of resampling to 16 kHz: torchaudio's gcd path ("before") against `resample` ("after").

    nice -n 19 .venv/bin/python bench/resample_memory.py

For 1 s, 10 s and 60 s of noise at each rate, each measurement runs in its own process (one thread): the peak
RSS growth during the call (Linux's VmHWM, reset before the call, − VmRSS; the input is made first; pages an
earlier allocation left mapped are not counted again, so a few MB are noise) and the best of up to 3 times. For
the windowed-sinc path the table also shows tracemalloc's peak of one more call ("traced"): every byte numpy
allocates (input copy, output, chunks); torch's allocations are invisible to tracemalloc, so torchaudio's rows
leave it out.

"before" is `torchaudio.functional.resample(x, rate // g, 16000 // g)` with g = gcd(rate, 16000), as `resample`
did for every rate; where its estimated peak (2.1 × its float64 kernel, 16000/g × (rate/g + 2 · width) taps)
passes 2 GB it is not run, and the row says so. "after" is `asr_transformer.data.audio.resample` (the same
torchaudio call for the common rates, the Kaiser-windowed sinc for the others). Writes `--json` (default
bench/resample_memory.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
from pathlib import Path

from asr_transformer.data.audio import block_reach

RATES = [8000, 11025, 22050, 44100, 48000, 96000, 22051, 7919, 44101, 15984]  # 15,984: 999/1000, the
SECONDS = [1, 10, 60]                                                        # largest ratio torchaudio still gets
SKIP_BYTES = 2 * 2**30  # "before" is not run where its estimated peak passes this
PEAK_PER_KERNEL_BYTE = 2.1  # torchaudio's peak / its float64 kernel's size (measured at 1,009 and 3,001 Hz)

CHILD = """
import json, math, re, sys, time, tracemalloc
import numpy as np, torch
torch.set_num_threads(1)
import torchaudio.functional as AF
from asr_transformer.data.audio import resample
which, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
g = math.gcd(rate, 16000)

def run(x):
    if which == "before":
        return AF.resample(torch.from_numpy(x), rate // g, 16000 // g).numpy()
    return resample(x, rate, 16000)

def timed(x):
    t0 = time.perf_counter()
    y = run(x)
    return y, time.perf_counter() - t0

def kb(field):
    return int(re.search(field + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))

x = np.random.default_rng(0).normal(0, 0.1, int(rate * seconds)).astype(np.float32)
run(x[:rate // 10])  # imports and first-call allocations before the baseline
open("/proc/self/clear_refs", "w").write("5")  # the peak RSS (VmHWM) starts again from the current RSS
before = kb("VmRSS")
y, first = timed(x)
peak = kb("VmHWM") - before
times = [first] + [timed(x)[1] for _ in range(2 if first < 2 else 0)]
tracemalloc.start()
run(x)
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"peak_mb": peak / 1024, "traced_mb": traced / 2**20, "seconds": min(times), "samples_out": len(y)}))
"""


def kernel_bytes(rate: int) -> int:
    """Bytes of torchaudio's float64 kernel for rate → 16 kHz: new/g phases × (orig/g + 2 · width) taps."""
    g = math.gcd(rate, 16000)
    down, up = rate // g, 16000 // g
    width = math.ceil(6 * down / (0.99 * min(down, up)))
    return up * (down + 2 * width) * 8


def measure(which: str, rate: int, seconds: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, which, str(rate), str(seconds)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("resample_memory.json"))
    args = parser.parse_args()
    rows = []
    print(f"{'rate':>6} {'audio':>5} | {'before MB':>10} {'before s':>9} | {'after MB':>9} {'traced MB':>9} "
          f"{'after s':>8}   (MB: peak RSS growth)")
    for rate in RATES:
        for seconds in SECONDS:
            row = {"rate": rate, "seconds": seconds, "kernel_mb": kernel_bytes(rate) / 2**20}
            estimate = PEAK_PER_KERNEL_BYTE * kernel_bytes(rate)
            if estimate > SKIP_BYTES:
                row["before"] = f"skipped: estimated peak {estimate / 2**30:.1f} GB"
            else:
                row["before"] = measure("before", rate, seconds)
            row["after"] = measure("after", rate, seconds)
            rows.append(row)
            b, a = row["before"], row["after"]
            before = (f"{b['peak_mb']:10.1f} {b['seconds']:9.4f}" if isinstance(b, dict)
                      else f"{'skipped, ~' + format(estimate / 2**30, '.1f') + ' GB':>20}")
            traced = f"{a['traced_mb']:9.1f}" if block_reach(rate, 16000) is None else f"{'':9}"
            print(f"{rate:>6} {seconds:>4}s | {before} | {a['peak_mb']:9.1f} {traced} {a['seconds']:8.4f}", flush=True)
    args.json.write_text(json.dumps({"cpu": platform.processor() or platform.machine(), "threads": 1,
                                     "skip_above_bytes": SKIP_BYTES, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
