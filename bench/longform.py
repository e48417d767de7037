"""Long recordings: test utterances joined into recordings of several minutes, with pauses, level changes and real
non-speech sounds between them, transcribed as a user would (`Recognizer.transcribe`, word times on) with each
voice detector; and recordings of non-speech alone.

    python bench/longform.py recipes/kathleen/exp/whisper_tiny/zeroshot/model.pt \
        recipes/kathleen/data/test.jsonl --sounds recipes/kathleen/data/sounds --json bench/longform.json

Each recording takes the manifest's utterances in order (never training ones: give a test manifest) until it holds
`--minutes` of audio. Before each utterance: a pause of 0.4–2.5 s of faint noise (−60 dBFS), and before every
third one a non-speech insert of 2–6 s made of the `--sounds` files (alarms, bells, phones, test signals, …, at
speech level) or, every other time, generated noise (white or brown) as loud as the speech. Each utterance gets a
gain of −12 to +6 dB, and every recording a DC offset of 0.01. `--repeats N` places the utterances N times, each
time with other pauses, gains and inserts. `--noise-minutes` more of the same pauses and inserts without any
speech make the non-speech recording.

Reported per detector, each in a fresh process (its peak resident memory): WER and CER of the whole recordings'
text (toolkit and Whisper's normalizer) beside the same utterances decoded one by one (`recognize_arrays`, the
gains applied; once per model), the words written inside non-speech (a word whose middle lies in an insert:
invented, and per hour of the recordings), the words written for the non-speech recording, the reference words
missing from the hypothesis (deletions) and added (insertions), how far the detector's segment edges lie from
each utterance's speech (its onset and offset: `pause_edges.speech_edges`; the median over utterances of the
nearest segment start and end), and the real-time factor.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_transformer.data.audio import AUDIO_EXTENSIONS, SAMPLE_RATE, load_audio, load_utterance  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounded_search import cpu_name  # noqa: E402
from pause_edges import speech_edges  # noqa: E402
from repo_paths import command_line, in_repository, report  # noqa: E402


DC_OFFSET = 0.01


def _level(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)) + 1e-9)


def _noise(rng, seconds: float, kind: str) -> np.ndarray:
    n = round(seconds * SAMPLE_RATE)
    white = rng.standard_normal(n)
    if kind == "brown":
        white = np.cumsum(white)
        white -= np.convolve(white, np.ones(801) / 801, mode="same")  # no drift below ~20 Hz
    return (white / _level(white)).astype(np.float32)


class Recording:
    """Parts of one recording as they are added: pauses, inserts, utterances; their times in seconds."""

    def __init__(self):
        self.parts, self.texts, self.inserts, self.speech, self.waves, self.samples = [], [], [], [], [], 0

    def add(self, audio: np.ndarray) -> tuple[float, float]:
        start = self.samples / SAMPLE_RATE
        self.parts.append(np.clip(audio, -1, 1).astype(np.float32))
        self.samples += audio.size
        return start, self.samples / SAMPLE_RATE

    def done(self) -> dict:
        audio = np.concatenate(self.parts) + np.float32(DC_OFFSET)
        return {"audio": audio, "text": " ".join(self.texts), "inserts": self.inserts, "speech": self.speech,
                "waves": self.waves}


def _pause_and_insert(rec: Recording, rng, k: int, sounds: list[np.ndarray], level: float) -> None:
    """A pause of faint noise, and before every third utterance (k) a non-speech insert at speech level."""
    rec.add(10 ** (-60 / 20) * _noise(rng, rng.uniform(0.4, 2.5), "white"))
    if k % 3 != 2:
        return
    if sounds and k % 2 == 0:
        insert, length = [], 0
        while length < rng.uniform(2, 6) * SAMPLE_RATE:
            clip = sounds[int(rng.integers(len(sounds)))]
            insert.append(clip / _level(clip) * level)
            length += clip.size
        insert = np.concatenate(insert)
    else:
        insert = level * _noise(rng, rng.uniform(2, 6), ("white", "brown")[k % 2])
    rec.inserts.append(rec.add(insert))
    rec.add(10 ** (-60 / 20) * _noise(rng, 0.5, "white"))


def build(utts, sounds: list[np.ndarray], minutes: float, noise_minutes: float = 0.0, seed: int = 0):
    """→ (the recordings of speech, the non-speech recording or None): dicts of audio, text, inserts (start, end),
    speech (onset, offset of each utterance's speech) and waves (each utterance as placed, for one-by-one)."""
    rng = np.random.default_rng(seed)
    level = float(np.median([_level(load_utterance(u)) for u in utts[:20]]))
    recordings, rec = [], Recording()
    for k, utt in enumerate(utts):
        _pause_and_insert(rec, rng, k, sounds, level)
        wave = np.clip(load_utterance(utt) * 10 ** (rng.uniform(-12, 6) / 20), -1, 1).astype(np.float32)
        start, _ = rec.add(wave)
        onset, offset = speech_edges(wave)
        rec.speech.append((start + onset, start + offset))
        rec.texts.append(utt.text)
        rec.waves.append(wave)
        if rec.samples >= minutes * 60 * SAMPLE_RATE or k == len(utts) - 1:
            recordings.append(rec.done())
            rec = Recording()
    if noise_minutes <= 0:
        return recordings, None
    rec, k = Recording(), 0
    while rec.samples < noise_minutes * 60 * SAMPLE_RATE:
        _pause_and_insert(rec, rng, 3 * k + 2, sounds, level)
        k += 1
    return recordings, rec.done()


def _edge_errors(segments: list[tuple[float, float]], speech: list[tuple[float, float]]) -> tuple[list, list]:
    """For each utterance's (onset, offset), the distance to the nearest segment start and end (seconds)."""
    starts, ends = np.array([s for s, _ in segments] or [np.inf]), np.array([e for _, e in segments] or [np.inf])
    return ([float(np.abs(starts - a).min()) for a, _ in speech], [float(np.abs(ends - b).min()) for _, b in speech])


def measure(model: str, recordings: list[dict], silent: dict | None, vad: str, threads: int,
            max_window: float | None = None, options: dict | None = None) -> dict:
    """Transcribe every recording with `vad` (and `max_window`, when given; `options`: more decoding options) →
    the counts and scores the module docstring describes; run in a process of its own, so `peak_mb` is this
    row's."""
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.segmenter import iter_segments, VadOptions

    rec = Recognizer(model, device="cpu", threads=threads, vad=vad, **(options or {}),
                     **({} if max_window is None else {"max_window": max_window}))
    hyps, invented, seconds, audio, starts, ends = [], 0, 0.0, 0.0, [], []
    for recording in recordings:
        wave = recording["audio"]
        start = time.perf_counter()
        result = rec.transcribe(wave, word_timestamps=True)
        seconds += time.perf_counter() - start
        audio += wave.size / SAMPLE_RATE
        hyps.append(result["text"])
        for segment in result["segments"]:
            for w in segment.get("words", []):
                middle = (w["start"] + w["end"]) / 2
                invented += any(a <= middle <= b for a, b in recording["inserts"])
        if vad != "none":  # the detector's own segments, before any merging into windows
            found = [(s.start, s.end) for s in iter_segments(wave, vad=VadOptions.of(rec.options))]
            a, b = _edge_errors(found, recording["speech"])
            starts, ends = starts + a, ends + b
    row = {"vad": rec.options.vad if vad != "auto" else f"auto ({VadOptions.of(rec.options).kind})",
           "windows": None if rec.config.model.ctc else rec.options.max_window, "rtf": round(seconds / audio, 4),
           "invented_words": invented, "invented_per_hour": round(invented / (audio / 3600), 1)}
    if starts:
        row["start_error_median"] = round(float(np.median(starts)), 3)
        row["end_error_median"] = round(float(np.median(ends)), 3)
    if silent is not None:
        text = rec.transcribe(silent["audio"])["text"]
        row["non_speech_minutes"] = round(silent["audio"].size / SAMPLE_RATE / 60, 1)
        row["non_speech_words"] = len(text.split())
    row.update(_scores([r["text"] for r in recordings], hyps))
    row["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return row


def one_by_one(model: str, recordings: list[dict], threads: int, options: dict | None = None) -> dict:
    """The same utterances (as placed: gains applied) decoded one at a time → WER/CER as `measure` scores them."""
    from asr_transformer.inference.recognizer import Recognizer

    rec = Recognizer(model, device="cpu", threads=threads, **(options or {}))
    hyps = [" ".join(rec.recognize_arrays([w])[0] for w in recording["waves"]) for recording in recordings]
    return _scores([r["text"] for r in recordings], hyps)


def _scores(refs: list[str], hyps: list[str]) -> dict:
    from asr_transformer.scoring import score
    from asr_transformer.text import NormalizerConfig, text_normalizer

    row, pairs = {}, [(str(i), r, h) for i, (r, h) in enumerate(zip(refs, hyps))]
    for name, normalizer in (("toolkit", NormalizerConfig()), ("whisper", text_normalizer("whisper"))):
        scored = score(pairs, normalizer)
        row[f"wer_{name}"], row[f"cer_{name}"] = round(100 * scored.wer, 2), round(100 * scored.cer, 2)
        row[f"deleted_{name}"], row[f"inserted_{name}"] = scored.words.dele, scored.words.ins
        row["reference_words"] = scored.words.ref_len
    return row


def decoding_options(pairs: list[str]) -> dict:
    """["name=value", …] → DecodeConfig fields with values of their types (booleans: true/false)."""
    from dataclasses import fields

    from asr_transformer.config import DecodeConfig

    defaults, out = DecodeConfig(), {}
    known = {f.name for f in fields(DecodeConfig)}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in known:
            raise SystemExit(f"--option {pair}: {name!r} is not a decoding option")
        kind = type(getattr(defaults, name))
        out[name] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return out


def _in_own_process(function, *args):
    """`function(*args)` in a fresh process (spawned: nothing of this one's memory), → its result."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a model package")
    p.add_argument("manifest", help="a test manifest: its utterances are joined in order")
    p.add_argument("--sounds", type=Path, help="a folder of non-speech recordings (any format soundfile reads)")
    p.add_argument("--minutes", type=float, default=7.5, help="length of each recording (the last one: what is left)")
    p.add_argument("--noise-minutes", type=float, default=5.0, help="length of the recording without speech (0: none)")
    p.add_argument("--repeats", type=int, default=1, help="place the utterances this many times, each time with "
                   "other pauses, gains and inserts (more recordings: a steadier measure)")
    p.add_argument("--vads", default="energy,silero", help="detectors to compare, comma-separated")
    p.add_argument("--max-windows", default="", help="Whisper: window lengths to compare, comma-separated seconds "
                   "(0: the model's whole window; default: the package's)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a decoding option for every row (a DecodeConfig field), e.g. speech_pad=0.05; repeatable")
    p.add_argument("--one-by-one", action=argparse.BooleanOptionalAction, default=True,
                   help="also decode the utterances one at a time (the figure long-form WER is held to)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    sounds = ([load_audio(f) for f in sorted(args.sounds.iterdir()) if f.suffix.lower() in AUDIO_EXTENSIONS]
              if args.sounds else [])
    options = decoding_options(args.option)
    utts = read_manifest(args.manifest)
    recordings, silent = build(utts, sounds, args.minutes, args.noise_minutes)
    for seed in range(1, args.repeats):
        recordings += build(utts, sounds, args.minutes, seed=seed)[0]
    result = {"command": command_line("longform.py", argv or sys.argv[1:]),
              "model": in_repository(args.model), "manifest": in_repository(args.manifest),
              "recordings": len(recordings),
              "minutes": round(sum(r["audio"].size for r in recordings) / SAMPLE_RATE / 60, 1),
              "inserts": sum(len(r["inserts"]) for r in recordings), "sounds": len(sounds),
              "utterances": sum(len(r["waves"]) for r in recordings), "repeats": args.repeats, "options": options,
              "cpu": cpu_name(), "threads": args.threads}
    if args.one_by_one:
        result["one_by_one"] = _in_own_process(one_by_one, args.model, recordings, args.threads, options)
        print(json.dumps(result["one_by_one"]), flush=True)
    result["rows"], heard = [], [{k: v for k, v in r.items() if k != "waves"} for r in recordings]
    windows = [float(w) for w in args.max_windows.split(",") if w] or [None]
    for vad in args.vads.split(","):
        for window in windows:
            result["rows"].append(_in_own_process(measure, args.model, heard, silent, vad, args.threads,
                                                  window, options))
            print(json.dumps(result["rows"][-1]), flush=True)
    return report(result, args.json)


if __name__ == "__main__":
    main()
