"""The work of joint CTC/attention decoding with a word LM on familiar, long and unfamiliar audio, with the search's
bounds off and on (config.DecodeConfig: ctc_window, beam_threshold, end_detect).

    python bench/bounded_search.py                      # recipes/kathleen's phone package and dev set
    nice -n -5 python bench/bounded_search.py --threads 2 --repeats 3 --json bench/bounded_search.json

Audio (16 kHz; each item decoded alone, batch 1, so every set costs what one utterance of it costs):
    in-domain   --utts Kathleen dev utterances (the speaker and prompts the model knows)
    long        one utterance of the next Kathleen dev utterances concatenated with 0.3 s pauses (--long-seconds)
    random      one utterance of "random speech" (--random-seconds): random 0.2-0.8 s fragments of FSDD recordings
                (other speakers, resampled to 16 kHz) and of Kathleen audio played backwards or cut into 50 ms
                slices put in random order
    other       --other utterances of the FSDD speakers: 6 random digits of one speaker each (unfamiliar voices)

Settings: `off` (ctc_window=0, beam_threshold=0, end_detect=0, split_seconds=0: every CTC frame, no pruning, no
end detection, long utterances searched whole), `on` (DecodeConfig's defaults for these four; a package made
before they existed, or with other values, may store others: they are printed) and `on-whole` (`on` but
split_seconds=0: what the bounds within one search do alone). Everything else is the package's decoding setup
(joint, with its word LM). WER where the words are known (in-domain, long, other: FSDD's digits).

RTF = (encoder + search seconds) / audio seconds, features excluded; CPU RTF the same with the process's CPU
seconds (all its threads), which other jobs on a shared machine disturb less than wall time. The machine may be
shared, so the sets and settings are timed interleaved, in the same process, `--repeats` times, and each RTF is
the median over the repeats; the ratios to in-domain compare RTFs of the same repeat. Machine-independent counts (the same on any
machine) come beside them, per second of audio: decoder steps, running hypotheses expanded, candidates scored
and (candidate, frame) terms of the CTC prefix scores.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from repo_paths import in_repository  # bench/repo_paths.py

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETS = ("in-domain", "long", "random", "other")
OFF = dict(ctc_window=0.0, beam_threshold=0.0, end_detect=0.0, split_seconds=0.0)
SETTINGS = ("off", "on", "on-whole")
DIGITS = "zero one two three four five six seven eight nine".split()
RATE = 16000


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _fsdd(folder: Path) -> dict[str, list[Path]]:
    """FSDD recordings by speaker ({digit}_{speaker}_{take}.wav)."""
    by_speaker: dict[str, list[Path]] = {}
    for path in sorted(glob.glob(str(folder / "*.wav"))):
        by_speaker.setdefault(Path(path).stem.split("_")[1], []).append(Path(path))
    return by_speaker


def _read16k(path: Path) -> np.ndarray:
    import soundfile as sf

    from asr_transformer.data.audio import resample

    wave, rate = sf.read(str(path), dtype="float32", always_2d=True)
    return resample(wave.mean(1), rate, RATE)


def _random_speech(kathleen: list[np.ndarray], fsdd: list[Path], seconds: float, rng) -> np.ndarray:
    """Random fragments of FSDD recordings and of Kathleen audio reversed or sliced and shuffled."""
    pieces, total = [], 0
    while total < seconds * RATE:
        kind = rng.integers(3)
        if kind == 0:
            wave = _read16k(fsdd[rng.integers(len(fsdd))])
        else:
            wave = kathleen[rng.integers(len(kathleen))]
            if kind == 1:
                wave = wave[::-1]
            else:
                cut = RATE // 20
                slices = [wave[i:i + cut] for i in range(0, len(wave), cut)]
                wave = np.concatenate([slices[i] for i in rng.permutation(len(slices))])
        n = int(rng.uniform(0.2, 0.8) * RATE)
        start = rng.integers(max(1, len(wave) - n))
        pieces.append(np.ascontiguousarray(wave[start:start + n], dtype=np.float32))
        total += len(pieces[-1])
    return np.concatenate(pieces)


def build_sets(args, rng) -> dict[str, tuple[list[np.ndarray], list[str] | None]]:
    """name → (waves, their transcripts or None)."""
    from asr_transformer.data.audio import load_utterance
    from asr_transformer.data.manifest import read_manifest

    utts = read_manifest(args.manifest)
    waves = [load_utterance(u) for u in utts]
    pause = np.zeros(int(0.3 * RATE), np.float32)
    long, words, total = [], [], 0
    for u, wave in zip(utts[args.utts:], waves[args.utts:]):
        long += [wave, pause]
        words.append(u.text)
        total += len(wave) + len(pause)
        if total >= args.long_seconds * RATE:
            break
    fsdd = _fsdd(Path(args.fsdd))
    speakers = sorted(fsdd)
    other, digits = [], []
    for i in range(args.other):
        paths = rng.choice(fsdd[speakers[i % len(speakers)]], 6)
        other.append(np.concatenate([_read16k(p) for p in paths]))
        digits.append(" ".join(DIGITS[int(p.stem.split("_")[0])] for p in paths))
    random = _random_speech(waves, [p for ps in fsdd.values() for p in ps], args.random_seconds, rng)
    return {"in-domain": (waves[:args.utts], [u.text for u in utts[:args.utts]]),
            "long": ([np.concatenate(long)], [" ".join(words)]), "random": ([random], None), "other": (other, digits)}


def decode(rec, waves: list[np.ndarray], options) -> tuple[tuple[float, float], dict, list[str]]:
    """Decode each wave alone → ((wall, CPU) seconds of encoder + search, the search's work, texts)."""
    import torch

    from asr_transformer.decode.search import recognize

    lm, weight = rec._fused()
    opts = replace(options, lm_weight=weight)
    wall, cpu, stats, texts = 0.0, 0.0, {}, []
    for wave in waves:
        feats = rec.features(wave)
        start, start_cpu = time.perf_counter(), time.process_time()
        hyps = recognize(rec.model, feats.unsqueeze(0), torch.tensor([feats.size(0)]), opts, lm=lm, stats=stats)
        wall, cpu = wall + time.perf_counter() - start, cpu + time.process_time() - start_cpu
        texts.append(rec.text(hyps[0][0].tokens))
    return (wall, cpu), stats, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "recipes/kathleen/exp/phone/model.pt"))
    ap.add_argument("--manifest", default=str(ROOT / "recipes/kathleen/data/dev.jsonl"))
    ap.add_argument("--fsdd", default=str(ROOT.parent / "shared/data/fsdd/recordings"))
    ap.add_argument("--utts", type=int, default=20, help="in-domain utterances")
    ap.add_argument("--long-seconds", type=float, default=45.0)
    ap.add_argument("--random-seconds", type=float, default=45.0)
    ap.add_argument("--other", type=int, default=16, help="utterances of the FSDD speakers")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=str(ROOT / "bench/bounded_search.json"))
    args = ap.parse_args()

    from asr_transformer.config import DecodeConfig
    from asr_transformer.inference.recognizer import Recognizer

    rec = Recognizer(args.model, device="cpu", threads=args.threads)
    sets = build_sets(args, np.random.default_rng(args.seed))
    audio = {name: sum(len(w) for w in waves) / RATE for name, (waves, _) in sets.items()}
    on = replace(rec.options, **{key: getattr(DecodeConfig(), key) for key in OFF})
    stored = {key: getattr(rec.options, key) for key in OFF}
    print(f"bounds on: {({key: getattr(on, key) for key in OFF})}; the package stores {stored}")
    settings = {"off": replace(rec.options, **OFF), "on": on, "on-whole": replace(on, split_seconds=0.0)}
    decode(rec, sets["in-domain"][0][:2], rec.options)  # warm-up: first touches of the LM, allocator
    rtf = {(n, s, clock): [] for n in SETS for s in settings for clock in ("wall", "cpu")}
    work, texts = {}, {}
    for repeat in range(args.repeats):
        for name in SETS:
            for setting, options in settings.items():
                (wall, cpu), stats, out = decode(rec, sets[name][0], options)
                rtf[name, setting, "wall"].append(wall / audio[name])
                rtf[name, setting, "cpu"].append(cpu / audio[name])
                work[name, setting], texts[name, setting] = stats, out
                print(f"repeat {repeat + 1}: {name:9s} {setting:8s} RTF {wall / audio[name]:.3f} "
                      f"CPU RTF {cpu / audio[name]:.3f}", flush=True)
    result = report(args, rec, settings, audio, rtf, work, texts, {name: refs for name, (_, refs) in sets.items()})
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")


def report(args, rec, settings, audio, rtf, work, texts, refs) -> dict:
    """Print the table and return the JSON record."""
    from asr_transformer.scoring import score
    from asr_transformer.text import NormalizerConfig

    rows = []
    print(f"\n{cpu_name()}, {args.threads} threads; mode {rec.options.mode}, beam {rec.options.beam}, "
          f"word LM {rec.lms.get('word_lm')}; RTF = median of {args.repeats} interleaved repeats")
    print(f"{'set':9s} {'audio s':>7s} {'setting':8s} {'RTF':>6s} {'×in-dom':>7s} {'CPU RTF':>7s} {'×in-dom':>7s} "
          f"{'steps/s':>7s} {'hyps/s':>7s} "
          f"{'cands/s':>8s} {'ctc terms/s':>11s} {'WER %':>6s} {'same text':>9s}")
    for name in SETS:
        for setting in SETTINGS:
            median, ratio = {}, {}
            for clock in ("wall", "cpu"):
                median[clock] = statistics.median(rtf[name, setting, clock])
                ratio[clock] = statistics.median(a / b for a, b in zip(rtf[name, setting, clock],
                                                                        rtf["in-domain", setting, clock]))
            per_s = {k: v / audio[name] for k, v in work[name, setting].items()}
            same = sum(a == b for a, b in zip(texts[name, "off"], texts[name, setting]))
            wer = None if refs[name] is None else 100 * score(
                [(str(i), r, h) for i, (r, h) in enumerate(zip(refs[name], texts[name, setting]))], NormalizerConfig()).wer
            row = {"set": name, "setting": setting, "audio_seconds": round(audio[name], 2),
                   "utterances": len(texts[name, setting]), "rtf": round(median["wall"], 4),
                   "rtf_runs": [round(r, 4) for r in rtf[name, setting, "wall"]],
                   "rtf_vs_in_domain": round(ratio["wall"], 3), "cpu_rtf": round(median["cpu"], 4),
                   "cpu_rtf_runs": [round(r, 4) for r in rtf[name, setting, "cpu"]],
                   "cpu_rtf_vs_in_domain": round(ratio["cpu"], 3),
                   "per_audio_second": {k: round(v, 1) for k, v in per_s.items()},
                   "wer": None if wer is None else round(wer, 2),
                   "texts_same_as_off": f"{same}/{len(texts[name, 'off'])}"}
            rows.append(row)
            print(f"{name:9s} {audio[name]:7.1f} {setting:8s} {row['rtf']:6.3f} {row['rtf_vs_in_domain']:7.2f} "
                  f"{row['cpu_rtf']:7.3f} {row['cpu_rtf_vs_in_domain']:7.2f} "
                  f"{per_s.get('steps', 0):7.1f} {per_s.get('hypotheses', 0):7.0f} {per_s.get('candidates', 0):8.0f} "
                  f"{per_s.get('ctc_terms', 0):11.0f} {'-' if wer is None else f'{wer:.1f}':>6s} "
                  f"{row['texts_same_as_off']:>9s}")
    return {"cpu": cpu_name(), "threads": args.threads, "nice": os.nice(0), "model": in_repository(args.model),
            "manifest": in_repository(args.manifest), "decoding": {k: v for k, v in vars(rec.options).items()},
            "on": {key: getattr(settings["on"], key) for key in OFF}, "off": OFF, "repeats": args.repeats, "seed": args.seed, "rows": rows}


if __name__ == "__main__":
    main()
