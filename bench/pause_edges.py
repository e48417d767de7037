"""Word times at the edges of pauses: recordings joined with silence between them, transcribed with word times
(`asr transcribe --word-timestamps`'s path), the first word of each recording against its speech onset and the
last word against its speech offset.

    python bench/pause_edges.py recipes/kathleen/exp/whisper_tiny/zeroshot/model.pt \
        recipes/kathleen/data/general_english/test.jsonl --json bench/pause_edges.json

A Whisper window holds several stretches of speech, and attention has no frame for silence: the word before a pause
tends to run on into it and the word after one to start early. Each recording's onset and offset are where its
10-ms frames first and last come within 35 dB of its loudest (clean read speech: the reference, within a frame or
two). Recordings are joined in order, `--pause` seconds apart, into files of at most `--seconds`. A recording's
words are those whose middle falls within it (half a pause either side).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_transformer.data.audio import SAMPLE_RATE, load_utterance  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.inference.recognizer import Recognizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounded_search import cpu_name  # noqa: E402
from repo_paths import command_line, in_repository, report  # noqa: E402

FRAME = 160  # samples: 10 ms
RANGE_DB = 35.0


def speech_edges(wave: np.ndarray) -> tuple[float, float]:
    """(onset, offset) in seconds: the first and last 10-ms frame within RANGE_DB of the loudest."""
    frames = wave[: len(wave) // FRAME * FRAME].reshape(-1, FRAME)
    level = 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > level.max() - RANGE_DB)
    return loud[0] * FRAME / SAMPLE_RATE, (loud[-1] + 1) * FRAME / SAMPLE_RATE


def joined_files(waves: list[np.ndarray], pause: float, seconds: float):
    """→ [(audio, [(onset, offset) of each recording in it])], recordings in order, each file ≤ `seconds`."""
    gap = np.zeros(round(pause * SAMPLE_RATE), np.float32)
    files, parts, edges, at = [], [], [], 0.0
    for wave in waves:
        length = len(wave) / SAMPLE_RATE
        if parts and at + pause + length > seconds:
            files.append((np.concatenate(parts), edges))
            parts, edges, at = [], [], 0.0
        if parts:
            parts.append(gap)
            at += pause
        onset, offset = speech_edges(wave)
        parts.append(wave)
        edges.append((at + onset, at + offset))
        at += length
    files.append((np.concatenate(parts), edges))
    return files


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a model package")
    p.add_argument("manifest", help="recordings of one sentence or a few, in order")
    p.add_argument("--pause", type=float, default=1.5, help="seconds of silence between recordings")
    p.add_argument("--seconds", type=float, default=28.0, help="the longest joined file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args(argv)
    rec = Recognizer(args.model, device="cpu", threads=args.threads)
    waves = [load_utterance(u) for u in read_manifest(args.manifest)]
    starts, ends, missed = [], [], 0
    files = joined_files(waves, args.pause, args.seconds)
    for audio, edges in files:
        words = [w for s in rec.transcribe(audio, word_timestamps=True)["segments"] for w in s["words"]]
        for onset, offset in edges:
            mine = [w for w in words if onset - args.pause / 2 <= (w["start"] + w["end"]) / 2 <= offset + args.pause / 2]
            if not mine:
                missed += 1
                continue
            starts.append(mine[0]["start"] - onset)
            ends.append(mine[-1]["end"] - offset)
    starts, ends = np.array(starts), np.array(ends)
    result = {"command": command_line("pause_edges.py", argv or sys.argv[1:]),
              "model": in_repository(args.model), "manifest": in_repository(args.manifest),
              "recordings": len(waves), "files": len(files), "pause": args.pause, "without_words": missed}
    for name, errors in (("first_start", starts), ("last_end", ends)):
        result.update({f"{name}_median": round(float(np.median(np.abs(errors))), 3),
                       f"{name}_bias": round(float(np.mean(errors)), 3),
                       f"{name}_within_0.2": round(100 * float((np.abs(errors) <= 0.2).mean()), 1),
                       f"{name}_within_0.5": round(100 * float((np.abs(errors) <= 0.5).mean()), 1)})
    result.update(cpu=cpu_name(), threads=args.threads)
    return report(result, args.json)


if __name__ == "__main__":
    main()
