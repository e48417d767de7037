"""Transcribing a file (voice detector, segments, windows) against decoding it whole: the same words?

    python bench/transcribe_vs_decode.py recipes/kathleen/exp/whisper_tiny/zeroshot/model.pt \
        recipes/kathleen/data/general_english/test.jsonl --json bench/transcribe_vs_decode.json

Each file of the manifest (clips under 30 s) is decoded whole, as `asr decode` does, and transcribed as `asr
transcribe` does (`Recognizer.transcribe`: the voice detector's segments, merged into 30-s windows for a model
without a CTC head). Both are scored against the manifest's texts with the toolkit's and Whisper's normalizers;
the files whose two texts differ are counted and listed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from asr_transformer.data.audio import load_utterance  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.inference.recognizer import Recognizer  # noqa: E402
from asr_transformer.scoring import score  # noqa: E402
from asr_transformer.text import NormalizerConfig, text_normalizer  # noqa: E402
from bounded_search import cpu_name  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rec = Recognizer(args.model, threads=args.threads)
    utts = read_manifest(args.manifest)
    started = time.perf_counter()
    whole = rec.recognize_arrays([load_utterance(u) for u in utts])
    decode_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transcribed = [rec.transcribe(u.audio)["text"] for u in utts]
    transcribe_seconds = time.perf_counter() - started
    rows = {}
    for name, normalizer in (("toolkit", NormalizerConfig()), ("whisper", text_normalizer("whisper"))):
        for way, texts in (("decode", whole), ("transcribe", transcribed)):
            report = score([(u.id, u.text, t) for u, t in zip(utts, texts)], normalizer)
            rows[f"{way} {name}"] = {"wer": 100 * report.wer, "cer": 100 * report.cer}
    differ = [{"id": u.id, "decode": a, "transcribe": b} for u, a, b in zip(utts, whole, transcribed) if a != b]
    result = {"model": str(args.model), "manifest": str(args.manifest), "files": len(utts), "cpu": cpu_name(),
              "threads": torch.get_num_threads(), "scores": rows,
              "decode_seconds": decode_seconds, "transcribe_seconds": transcribe_seconds,
              "differ": len(differ), "differences": differ}
    for key, row in rows.items():
        print(f"{key:20s} WER {row['wer']:.2f}  CER {row['cer']:.2f}")
    print(f"{len(differ)} of {len(utts)} files differ")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
