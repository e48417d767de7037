"""Contextual biasing (hotwords): WER, B-WER, U-WER and the listed words' recall, precision and F1, with and without
a biasing list, as icefall and the LibriSpeech biasing lists measure it.

    python bench/hotwords.py recipes/synthetic/exp/small/model.pt recipes/synthetic/data/test.jsonl \
        --train recipes/synthetic/data/train.jsonl --json bench/hotwords_synthetic.json

Each utterance gets its own list: the words of its reference seen fewer than `--rare-below` times in the training
transcripts (`--train`), plus `--distractors` other words drawn from the pool of rare words (the training words
seen fewer than `--rare-below` times, and the other utterances' listed words; fewer when the pool is smaller), all
of them words the model can write (a phone model: words its lexicon has). Every utterance is decoded alone, without a list and with its list
(`Recognizer.with_hotwords`), in the package's mode or `--mode`, with each of `--scores` (the bonus per token);
`--stream CHUNK_MS` decodes through `StreamingRecognizer` instead (a streaming model; finals in `--mode`).

Metrics (words normalized as `asr score` normalizes them; an alignment of reference and hypothesis):
    B-WER   errors on listed words: substitutions and deletions of reference words in the list, and insertions
            of hypothesis words in the list, over the reference's listed words
    U-WER   the same for the words not in the list, over the reference's other words
    recall  listed reference words recognized (aligned as correct) / listed reference words
    precision  those / hypothesis words in the list;  F1 their harmonic mean
RTF: the decoding time (features included) over the audio duration, one utterance at a time on `--threads`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_transformer.data.audio import load_utterance  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.decode.hotwords import HotwordError, spellings  # noqa: E402
from asr_transformer.inference.recognizer import Recognizer  # noqa: E402
from asr_transformer.scoring import C, D, I, S, align  # noqa: E402
from asr_transformer.text import NormalizerConfig, normalize  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounded_search import cpu_name  # noqa: E402
from repo_paths import in_repository  # noqa: E402

PLAIN = NormalizerConfig()


def words(text: str) -> list[str]:
    return normalize(text, PLAIN).split()


def biasing_lists(refs: list[list[str]], train_counts: Counter, rare_below: int, distractors: int,
                  writable, seed: int) -> list[list[str]]:
    """Per utterance: its rare words (fewer than `rare_below` in training) and `distractors` other rare words."""
    rare = [sorted({w for w in ref if train_counts[w] < rare_below and writable(w)}) for ref in refs]
    pool = sorted({w for w, n in train_counts.items() if n < rare_below} | {w for r in rare for w in r})
    pool = [w for w in pool if writable(w)]
    rng = random.Random(seed)
    lists = []
    for own in rare:
        others = [w for w in pool if w not in own]
        lists.append(own + rng.sample(others, min(distractors, len(others))))
    return lists


def count_errors(ref: list[str], hyp: list[str], listed: set[str]) -> Counter:
    """B and U errors and words, and the listed words' hits, of one utterance."""
    c = Counter(b_words=sum(w in listed for w in ref), u_words=sum(w not in listed for w in ref),
                hyp_listed=sum(w in listed for w in hyp))
    for op, r, h in align(ref, hyp):
        if op == I:
            c["b_errors" if h in listed else "u_errors"] += 1
        elif op in (S, D):
            c["b_errors" if r in listed else "u_errors"] += 1
        elif op == C and r in listed:
            c["hits"] += 1
    return c


def summary(c: Counter) -> dict:
    recall = c["hits"] / max(1, c["b_words"])
    precision = c["hits"] / max(1, c["hyp_listed"])
    return {"wer": round(100 * (c["b_errors"] + c["u_errors"]) / max(1, c["b_words"] + c["u_words"]), 2),
            "b_wer": round(100 * c["b_errors"] / max(1, c["b_words"]), 2),
            "u_wer": round(100 * c["u_errors"] / max(1, c["u_words"]), 2),
            "recall": round(100 * recall, 2), "precision": round(100 * precision, 2),
            "f1": round(200 * recall * precision / max(1e-9, recall + precision), 2),
            "listed_words": c["b_words"], "other_words": c["u_words"]}


def decode(rec: Recognizer, wave, stream_ms: int, final: str) -> str:
    if not stream_ms:
        return rec.text(rec.decode_waves([wave])[0].tokens)
    from asr_transformer.inference.streaming import StreamingRecognizer

    stream = StreamingRecognizer(rec, chunk_ms=stream_ms, final=final)
    events = stream.feed(wave) + stream.finish()
    return " ".join(e.text for e in events if e.kind == "final")


def run(rec: Recognizer, utts, waves, refs, lists, args, score: float | None) -> dict:
    """One pass over the set: without lists (`score` None) or with each utterance's list at `score`."""
    totals, t0, texts = Counter(), time.perf_counter(), []
    for wave, ref, listed in zip(waves, refs, lists):
        r = rec if score is None else rec.with_hotwords(listed, score)
        text = decode(r, wave, args.stream, args.mode or rec.options.mode)
        texts.append(text)
        totals += count_errors(ref, words(text), set(listed))
    seconds = time.perf_counter() - t0
    audio = sum(len(w) for w in waves) / 16000
    row = {"list": "none" if score is None else "per utterance", "score": score, **summary(totals),
           "rtf": round(seconds / audio, 4)}
    print(json.dumps(row), flush=True)
    return row | {"texts": texts}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a model package")
    p.add_argument("manifest", help="the set to decode")
    p.add_argument("--train", required=True, help="the training manifest, whose word counts say what is rare")
    p.add_argument("--rare-below", type=int, default=2, help="a word seen fewer times in training is rare")
    p.add_argument("--distractors", type=int, default=100, help="other rare words added to each list")
    p.add_argument("--scores", default="", help="bonuses per token to try, e.g. 1,2,3 (default: the package's)")
    p.add_argument("--mode", help="decoding mode (default: the package's)")
    p.add_argument("--stream", type=int, default=0, help="decode through StreamingRecognizer, chunks of this many ms")
    p.add_argument("--limit", type=int, default=0, help="the first N utterances only")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()

    options = {"mode": args.mode} if args.mode else {}
    rec = Recognizer(args.model, device="cpu", threads=args.threads, **options)
    utts = read_manifest(args.manifest)[: args.limit or None]
    refs = [words(u.text) for u in utts]
    train_counts = Counter(w for u in read_manifest(args.train) for w in words(u.text))

    def writable(word: str) -> bool:
        try:
            spellings(rec.tokenizer, word)
            return True
        except HotwordError:
            return False

    lists = biasing_lists(refs, train_counts, args.rare_below, args.distractors, writable, args.seed)
    waves = [load_utterance(u, 16000) for u in utts]
    scores = [float(s) for s in args.scores.split(",") if s] or [rec.options.hotword_score]
    print(f"{len(utts)} utterances, {sum(len(l) for l in lists) / max(1, len(lists)):.0f} listed words each on "
          f"average, {sum(len(set(r) & set(l)) for r, l in zip(refs, lists))} of them in the references", flush=True)
    rows = [run(rec, utts, waves, refs, lists, args, None)]
    rows += [run(rec, utts, waves, refs, lists, args, s) for s in scores]
    result = {"command": "python bench/hotwords.py " + " ".join(sys.argv[1:]), "model": in_repository(args.model),
              "manifest": in_repository(args.manifest), "mode": args.mode or rec.options.mode, "stream": args.stream,
              "rare_below": args.rare_below, "distractors": args.distractors, "utterances": len(utts),
              "list_words": round(sum(len(l) for l in lists) / max(1, len(lists)), 1),
              "threads": torch.get_num_threads(), "cpu": cpu_name(),
              "rows": [{k: v for k, v in r.items() if k != "texts"} for r in rows],
              "examples": [{"ref": " ".join(ref), "without": a, "with": b}
                           for ref, a, b in zip(refs, rows[0]["texts"], rows[-1]["texts"]) if a != b][:10]}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"→ {args.json}")


if __name__ == "__main__":
    main()
