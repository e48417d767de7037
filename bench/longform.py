"""Long recordings: test utterances joined into recordings of several minutes, with pauses, level changes and real
non-speech sounds between them, transcribed as a user would (`Recognizer.transcribe`, word times on) with each
voice detector.

    python bench/longform.py recipes/kathleen/exp/whisper_tiny/zeroshot/model.pt \
        recipes/kathleen/data/test.jsonl --sounds recipes/kathleen/data/sounds --json bench/longform.json

Each recording takes the manifest's utterances in order (never training ones: give a test manifest) until it holds
`--minutes` of audio. Before each utterance: a pause of 0.4–2.5 s of faint noise (−60 dBFS), and before every
third one a non-speech insert of 2–6 s made of the `--sounds` files (alarms, bells, phones, test signals, …, at
speech level) or, every other time, generated noise (white or brown) as loud as the speech. Each utterance gets a
gain of −12 to +6 dB. Reported per detector: WER and CER of the whole recordings' text (toolkit and Whisper's
normalizer), the words written inside non-speech (a word whose middle lies in an insert: invented), the words of
the reference missing from the hypothesis (deletions), and the real-time factor.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_transformer.data.audio import SAMPLE_RATE, load_audio, load_utterance  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounded_search import cpu_name  # noqa: E402
from repo_paths import command_line, in_repository, report  # noqa: E402


AUDIO = (".oga", ".ogg", ".wav", ".flac", ".mp3", ".opus")  # the --sounds files read


def _level(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)) + 1e-9)


def _noise(rng, seconds: float, kind: str) -> np.ndarray:
    n = round(seconds * SAMPLE_RATE)
    white = rng.standard_normal(n)
    if kind == "brown":
        white = np.cumsum(white)
        white -= np.convolve(white, np.ones(801) / 801, mode="same")  # no drift below ~20 Hz
    return (white / _level(white)).astype(np.float32)


def build(utts, sounds: list[np.ndarray], minutes: float, seed: int = 0):
    """→ [(audio, reference text, [(start, end) of each non-speech insert])]."""
    rng = np.random.default_rng(seed)
    recordings, parts, texts, inserts, at = [], [], [], [], 0
    speech_level = np.median([_level(load_utterance(u)) for u in utts[:20]])
    for k, utt in enumerate(utts):
        pause = rng.uniform(0.4, 2.5)
        parts.append((10 ** (-60 / 20) * _noise(rng, pause, "white")).astype(np.float32))
        at += parts[-1].size
        if k % 3 == 2:
            if sounds and k % 2 == 0:
                insert, length = [], 0
                while length < rng.uniform(2, 6) * SAMPLE_RATE:
                    clip = sounds[int(rng.integers(len(sounds)))]
                    insert.append(clip / _level(clip) * speech_level)
                    length += clip.size
                insert = np.concatenate(insert)
            else:
                insert = speech_level * _noise(rng, rng.uniform(2, 6), ("white", "brown")[k % 2])
            insert = np.clip(insert, -1, 1).astype(np.float32)
            inserts.append((at / SAMPLE_RATE, (at + insert.size) / SAMPLE_RATE))
            parts += [insert, (10 ** (-60 / 20) * _noise(rng, 0.5, "white")).astype(np.float32)]
            at += insert.size + parts[-1].size
        wave = load_utterance(utt) * 10 ** (rng.uniform(-12, 6) / 20)
        parts.append(np.clip(wave, -1, 1).astype(np.float32))
        texts.append(utt.text)
        at += wave.size
        if at >= minutes * 60 * SAMPLE_RATE or k == len(utts) - 1:
            recordings.append((np.concatenate(parts), " ".join(texts), inserts))
            parts, texts, inserts, at = [], [], [], 0
    return recordings


def measure(model: str, recordings, vad: str, threads: int, max_window: float | None = None) -> dict:
    """Transcribe every recording with `vad` (and `max_window`, when given) → the scores and counts described in
    the module docstring."""
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.scoring import score
    from asr_transformer.text import NormalizerConfig, text_normalizer

    rec = Recognizer(model, device="cpu", threads=threads, vad=vad,
                     **({} if max_window is None else {"max_window": max_window}))
    refs, hyps, invented, seconds, audio = [], [], 0, 0.0, 0.0
    for wave, reference, inserts in recordings:
        start = time.perf_counter()
        result = rec.transcribe(wave, word_timestamps=True)
        seconds += time.perf_counter() - start
        audio += wave.size / SAMPLE_RATE
        refs.append(reference)
        hyps.append(result["text"])
        for segment in result["segments"]:
            for w in segment.get("words", []):
                middle = (w["start"] + w["end"]) / 2
                invented += any(a <= middle <= b for a, b in inserts)
    row = {"vad": vad, "max_window": rec.options.max_window, "rtf": round(seconds / audio, 4),
           "invented_words": invented}
    pairs = [(str(i), r, h) for i, (r, h) in enumerate(zip(refs, hyps))]
    for name, normalizer in (("toolkit", NormalizerConfig()), ("whisper", text_normalizer("whisper"))):
        scored = score(pairs, normalizer)
        row[f"wer_{name}"], row[f"cer_{name}"] = round(100 * scored.wer, 2), round(100 * scored.cer, 2)
        row[f"deleted_{name}"], row[f"inserted_{name}"] = scored.words.dele, scored.words.ins
    row["reference_words"] = scored.words.ref_len
    return row


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a model package")
    p.add_argument("manifest", help="a test manifest: its utterances are joined in order")
    p.add_argument("--sounds", type=Path, help="a folder of non-speech recordings (any format soundfile reads)")
    p.add_argument("--minutes", type=float, default=7.5, help="length of each recording (the last one: what is left)")
    p.add_argument("--vads", default="energy,silero", help="detectors to compare, comma-separated")
    p.add_argument("--max-windows", default="", help="Whisper: window lengths to compare, comma-separated seconds "
                   "(0: the model's whole window; default: the package's)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    sounds = [load_audio(f) for f in sorted(args.sounds.iterdir()) if f.suffix in AUDIO] if args.sounds else []
    recordings = build(read_manifest(args.manifest), sounds, args.minutes)
    result = {"command": command_line("longform.py", argv or sys.argv[1:]),
              "model": in_repository(args.model), "manifest": in_repository(args.manifest),
              "recordings": len(recordings), "minutes": round(sum(w.size for w, _, _ in recordings) / SAMPLE_RATE / 60, 1),
              "inserts": sum(len(i) for _, _, i in recordings), "sounds": len(sounds),
              "rows": [], "cpu": cpu_name(), "threads": args.threads}
    windows = [float(w) for w in args.max_windows.split(",") if w] or [None]
    for vad in args.vads.split(","):
        for window in windows:
            result["rows"].append(measure(args.model, recordings, vad, args.threads, window))
            print(json.dumps(result["rows"][-1]), flush=True)
    return report(result, args.json)


if __name__ == "__main__":
    main()
