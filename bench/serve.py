"""Serving: throughput and latency of `asr serve` under concurrent clients, against decoding one file at a time.

    python bench/serve.py recipes/synthetic/exp/small/model.pt recipes/synthetic/data/test.jsonl \
        --clients 1,4,16,64 --requests 64 --json bench/serve.json

The server runs in its own process on a free port with `--threads` threads, as `asr serve` does; each client
thread sends the manifest's files (in turn, `--requests` in all per level) to POST /v1/audio/transcriptions
(response_format text) and waits for each answer before the next. Reported per number of clients: requests/s and
audio seconds per second, latency percentiles (p50/p95/p99, seconds from sending to the last byte of the
answer), the server's batch sizes (from /metrics: how many requests it decoded together) and its peak resident
memory. The baseline decodes the same files one at a time with `Recognizer.transcribe` in this process, with the
same threads. Every answer is checked against that baseline's text (a mismatch is counted, and reported).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.inference.recognizer import Recognizer  # noqa: E402
from asr_transformer.threads import cpu_threads  # noqa: E402
from bounded_search import cpu_name  # noqa: E402
from repo_paths import command_line  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, threads: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "asr_transformer", "serve", "--model", f"m={model}", "--port",
                             str(port), "--threads", str(threads), "--device", "cpu", "--max-queue", "1000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=1):
                return proc, base
        except OSError:
            if proc.poll() is not None:
                raise SystemExit("the server stopped at start")
            time.sleep(0.2)
    raise SystemExit("the server did not start")


def post(base: str, audio: bytes) -> tuple[str, float]:
    boundary = "bench-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="response_format"\r\n\r\ntext\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n').encode()
    body += audio + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(f"{base}/v1/audio/transcriptions", data=body,
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as r:
        text = r.read().decode().strip()
    return text, time.perf_counter() - started


def batch_sizes(base: str) -> dict[int, int]:
    with urllib.request.urlopen(f"{base}/metrics") as r:
        lines = r.read().decode().splitlines()
    return {int(line.split('"')[1]): int(line.split()[-1]) for line in lines if line.startswith("asr_batches_total{")}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--requests", type=int, default=64, help="Requests per level.")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: all cores).")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    threads = cpu_threads(args.threads)
    utts = read_manifest(args.manifest)
    files = [Path(u.audio).read_bytes() for u in utts]
    seconds = [u.duration for u in utts]
    picks = [i % len(files) for i in range(args.requests)]

    rec = Recognizer(args.model, device="cpu", threads=threads)
    rec.transcribe(files[0])  # warm-up
    started = time.perf_counter()
    expected = {i: rec.transcribe(files[i])["text"] for i in sorted(set(picks))}
    alone = time.perf_counter() - started
    audio_alone = sum(seconds[i] for i in expected)
    rows = [{"clients": 0, "requests/s": len(expected) / alone, "audio s/s": audio_alone / alone}]
    print(f"one at a time: {rows[0]['requests/s']:.2f} requests/s, {rows[0]['audio s/s']:.1f} audio s/s", flush=True)

    proc, base = start_server(args.model, threads)
    try:
        post(base, files[0])  # warm-up
        for clients in (int(c) for c in args.clients.split(",")):
            before = batch_sizes(base)
            started = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                answers = list(pool.map(lambda i: post(base, files[i]), picks))
            wall = time.perf_counter() - started
            after = batch_sizes(base)
            sizes = {n: after.get(n, 0) - before.get(n, 0) for n in after if after.get(n, 0) > before.get(n, 0)}
            latency = np.array([a[1] for a in answers])
            row = {"clients": clients, "requests": len(picks), "requests/s": len(picks) / wall,
                   "audio s/s": sum(seconds[i] for i in picks) / wall,
                   "p50": float(np.percentile(latency, 50)), "p95": float(np.percentile(latency, 95)),
                   "p99": float(np.percentile(latency, 99)),
                   "mean batch": sum(n * c for n, c in sizes.items()) / max(1, sum(sizes.values())),
                   "mismatches": sum(a[0] != expected[i] for a, i in zip(answers, picks))}
            rows.append(row)
            print(json.dumps(row), flush=True)
        peak = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    lone = next((r["p50"] for r in rows if r["clients"] == 1), None)
    result = {"command": command_line("serve.py", sys.argv[1:]), "model": str(args.model),
              "manifest": str(args.manifest), "threads": threads,
              "cpu": cpu_name(), "cores": os.cpu_count(),
              "mean audio seconds": float(np.mean([seconds[i] for i in picks])), "server peak MB": peak,
              "lone request p50": lone, "rows": rows}
    print(f"server peak memory {peak:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
