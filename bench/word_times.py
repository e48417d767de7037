"""Word times from the decoder's attention (dynamic time warping, as openai-whisper times words) against the CTC
forced alignment of the same words, on a model that has both heads.

    python bench/word_times.py recipes/synthetic/exp/small/model.pt recipes/synthetic/data/test.jsonl \
        --json bench/word_times.json

Each utterance is decoded once (the package's mode); its words are timed both ways (`decode.align` with the CTC
head, `decode.attention_align` with the decoder's cross-attention: the package's alignment heads, or every head of
the upper half of the decoder's layers). Reported: the mean and median absolute difference of word starts and
ends (seconds), their mean signed difference (attention − CTC: the bias), and the share of words whose start and end both agree within 0.1 s and 0.2 s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_transformer.data.audio import load_utterance  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.inference.recognizer import Recognizer  # noqa: E402
from asr_transformer.inference.segmenter import Segment  # noqa: E402
from asr_transformer.inference.transcribe import _words  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounded_search import cpu_name  # noqa: E402
from repo_paths import command_line, in_repository, report  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a model package with a CTC head and an attention decoder")
    p.add_argument("manifest")
    p.add_argument("--limit", type=int, default=0, help="the first N utterances only")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args(argv)
    rec = Recognizer(args.model, device="cpu", threads=args.threads)
    utts = read_manifest(args.manifest)[: args.limit or None]
    starts, ends = [], []
    for utt in utts:
        wave = load_utterance(utt)
        segment = Segment(0.0, len(wave) / 16000, wave, 0.0)
        [hyp], [log_probs] = rec.decode_waves_with_ctc([wave])
        _, [attention] = rec.decode_waves_with_attention([wave])
        text = " ".join(rec.text(hyp.tokens).split())
        ctc = _words(rec, segment, hyp.tokens, text, log_probs)
        att = _words(rec, segment, hyp.tokens, text, attention)
        for a, c in zip(att, ctc):
            if a["probability"] is not None and c["probability"] is not None:
                starts.append(a["start"] - c["start"])
                ends.append(a["end"] - c["end"])
    bias = (float(np.mean(starts)), float(np.mean(ends)))
    starts, ends = np.abs(starts), np.abs(ends)
    both = np.maximum(starts, ends)
    result = {"command": command_line("word_times.py", argv or sys.argv[1:]),
              "model": in_repository(args.model), "manifest": in_repository(args.manifest), "utterances": len(utts),
              "words": int(starts.size), "start_mean": round(float(starts.mean()), 3),
              "start_median": round(float(np.median(starts)), 3), "start_bias": round(bias[0], 3), "end_mean": round(float(ends.mean()), 3),
              "end_median": round(float(np.median(ends)), 3), "end_bias": round(bias[1], 3),
              "within_0.1": round(100 * float((both <= 0.1).mean()), 1),
              "within_0.2": round(100 * float((both <= 0.2).mean()), 1), "cpu": cpu_name(), "threads": args.threads}
    return report(result, args.json)


if __name__ == "__main__":
    main()
