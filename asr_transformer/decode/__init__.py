"""Decoding: from encoder output to token sequences, every mode batched over utterances.

Read in this order: greedy.py (autoregressive greedy) → ctc_prefix.py (CTC prefix scores, CTC prefix
beam search) → beam.py (attention beam search, optionally joint with CTC, optionally fused with an n-gram
LM from ngram.py) → maskctc.py (Mask-CTC, non-autoregressive) → search.py (`recognize`, one entry point for
every mode; `read_lm` and `fusion_lm`, the LMs it fuses). `recognizer.Recognizer` decodes manifests and files with them.
align.py times each word of a hypothesis by CTC forced alignment (`asr transcribe --word-timestamps`).

Every search returns, per utterance, a list of `Hypothesis` (n-best, best first).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hypothesis:
    """One decoding result: token ids (no <sos>/<eos>) and its score (a log-probability, plus the
    length bonus where the mode uses one; see `search.recognize` for what each mode's score is)."""

    tokens: list[int]
    score: float
    parts: dict[str, float] = field(default_factory=dict)  # e.g. {"ctc": …, "att": …} where known


def average_log_prob(h: Hypothesis) -> float:
    """A hypothesis' attention log-probability per token, <eos> counted (whisper's avg_logprob); its score per
    token where it has no attention part (the ctc mode's)."""
    return h.parts.get("att", h.score) / (len(h.tokens) + 1)
