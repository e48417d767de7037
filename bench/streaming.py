"""Streaming recognition: WER at several chunk sizes against full context, latency and speed of a stream.

    python bench/streaming.py recipes/kathleen/exp/phone_streaming/model.pt recipes/kathleen/data/dev.jsonl \
        --chunks 320,640 --json recipes/kathleen/exp/phone_streaming/streaming_dev.json

Every utterance of the manifest is streamed on its own through `StreamingRecognizer` (the package's beam, CTC weight
and LMs; finals in the `--final` mode: `rescore`, attention rescoring of the CTC n-best, or e.g. `joint`, the
package's joint search over the utterance), fed in 10-ms blocks as a microphone would give them; the full-context
row decodes the same utterances offline in that mode (the same search without chunks). The
finals of an utterance, joined, are its hypothesis; WER/CER (%) use the toolkit's scoring and normalizer.

Latency, in a simulated real-time stream (audio arrives at its own pace; an event is out when the block that
completed it has arrived plus the compute time `feed` took):
    first partial  from the start of the first token (its first CTC frame) to the first partial holding it;
    final          from the end of the last token of an utterance to its final (at the end of each recording the
                   stream is finished, as `asr transcribe --stream` does at the end of its input);
    final compute  from the arrival of the audio that completed the final's chunk to the final (the encoder of
                   that chunk, the search and the attention rescoring).
RTF: the compute time of all `feed`/`finish` calls over the audio duration, one stream on `--threads` threads.
Medians and 90th percentiles over the utterances.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_transformer.data.audio import load_audio  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.inference.recognizer import Recognizer  # noqa: E402
from asr_transformer.scoring import score  # noqa: E402
from asr_transformer.inference.streaming import StreamingRecognizer  # noqa: E402

BLOCK = 160  # samples fed at a time: 10 ms


def stream_one(rec: Recognizer, audio: np.ndarray, chunk_ms: int, final: str) -> dict:
    """One utterance through a fresh stream → its text and latencies (seconds)."""
    stream = StreamingRecognizer(rec, chunk_ms, final=final)
    events, compute = [], 0.0
    for i in range(0, audio.size, BLOCK):
        t0 = time.perf_counter()
        new = stream.feed(audio[i:i + BLOCK])
        compute += time.perf_counter() - t0
        events += [(min(i + BLOCK, audio.size) / 16000, e) for e in new]
    t0 = time.perf_counter()
    new = stream.finish()
    compute += time.perf_counter() - t0
    events += [(audio.size / 16000, e) for e in new]
    finals = [(t, e) for t, e in events if e.kind == "final"]
    first = next(((t, e) for t, e in events if e.kind == "partial" and e.tokens), None)
    return {
        "text": " ".join(e.text for _, e in finals if e.text),
        "first_partial": None if first is None else first[0] + first[1].latency - first[1].start,
        "final": [t + e.latency - e.end for t, e in finals],
        "final_compute": [e.latency for _, e in finals],
        "compute": compute,
    }


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def summary(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"median_ms": None, "p90_ms": None}
    return {"median_ms": round(1000 * float(np.median(values)), 1),
            "p90_ms": round(1000 * float(np.percentile(values, 90)), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("package")
    ap.add_argument("manifest")
    ap.add_argument("--chunks", default="320,640", help="chunk sizes in ms, comma-separated")
    ap.add_argument("--limit", type=int, default=0, help="the first N utterances only (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--final", default="rescore", help="the finals' decoding mode: rescore (default), joint, beam, …")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    rec = Recognizer(args.package, device="cpu", threads=args.threads, mode=args.final)
    utts = read_manifest(args.manifest)
    utts = utts[:args.limit] if args.limit else utts
    audio = {u.id: load_audio(u.audio, u.offset or 0.0, u.duration if u.offset is not None else None) for u in utts}
    seconds = sum(a.size for a in audio.values()) / 16000
    normalizer = rec.tokenizer.normalizer
    rows = []

    t0 = time.perf_counter()
    texts = {}
    for u in utts:  # full context, offline, one utterance at a time as the streams
        texts[u.id] = rec.recognize_arrays([audio[u.id]])[0]
    full = score([(u.id, u.text, texts[u.id]) for u in utts], normalizer)
    rows.append({"chunk_ms": 0, "wer": round(100 * full.wer, 2), "cer": round(100 * full.cer, 2),
                 "rtf": round((time.perf_counter() - t0) / seconds, 4)})
    print(f"full context: WER {100 * full.wer:.2f} CER {100 * full.cer:.2f}", flush=True)

    for chunk_ms in [int(c) for c in args.chunks.split(",") if c]:
        results = {u.id: stream_one(rec, audio[u.id], chunk_ms, args.final) for u in utts}
        report = score([(u.id, u.text, results[u.id]["text"]) for u in utts], normalizer)
        row = {
            "chunk_ms": chunk_ms, "wer": round(100 * report.wer, 2), "cer": round(100 * report.cer, 2),
            "rtf": round(sum(r["compute"] for r in results.values()) / seconds, 4),
            "first_partial": summary([r["first_partial"] for r in results.values()]),
            "final": summary([v for r in results.values() for v in r["final"]]),
            "final_compute": summary([v for r in results.values() for v in r["final_compute"]]),
        }
        rows.append(row)
        print(f"chunk {chunk_ms} ms: WER {row['wer']:.2f} CER {row['cer']:.2f} RTF {row['rtf']:.4f} "
              f"first partial {row['first_partial']['median_ms']} ms, final {row['final']['median_ms']} ms after "
              f"the speech (compute {row['final_compute']['median_ms']} ms)", flush=True)

    out = {"package": args.package, "manifest": args.manifest, "utterances": len(utts),
           "audio_seconds": round(seconds, 1), "cpu": cpu_name(),
           "threads": torch.get_num_threads(), "final": args.final, "options": {"beam": rec.options.beam,
                                                           "ctc_weight": rec.options.ctc_weight,
                                                           "lms": rec.lms},
           "command": "python " + " ".join(sys.argv), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
