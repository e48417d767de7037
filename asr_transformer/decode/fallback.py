"""Whisper's temperature fallback: a window the search got wrong in an obvious way is decoded again, hotter.

A window fails when its text repeats itself (the gzip compression ratio of its text above
`compression_ratio_threshold`: a decoder caught in a loop) or when its tokens average a log-probability below
`logprob_threshold` (the model is unsure of what it wrote). Each failed window is decoded again by sampling
(`greedy.sample_search`, the best of `beam` draws) at `temperature + temperature_increment`, then hotter, up to 1.0.
A window that never passes keeps its best try, as faster-whisper does: among the tries that do not loop (all of
them if every one loops), the one of the highest average log-probability.

`no_speech` is Whisper's silence check: the decoder's probability of its no-speech token right after
<|startoftranscript|>, among Whisper's own ids (the window's no-speech probability). A window whose no-speech probability is above
`no_speech_threshold` and whose tokens average a log-probability below `logprob_threshold` gives no text; every
window's best hypothesis carries its probability (`parts["no_speech_prob"]`). A model with a no-speech head
(`ASRModel.no_speech_prob`, trained by `asr no-speech`) gives the same probability from its encoder, and the same
rule applies.

`ctc_silence` is the same check for a model with a CTC head, which has no no-speech token: there CTC's confidence
stands in for it, the posterior of each token of CTC's best path at its surest frame, averaged over the window's
tokens (0 where CTC hears none). A window whose CTC confidence is below `ctc_confidence_threshold` and whose best
hypothesis averages a log-probability below `logprob_threshold` gives no text: a bell or a burst of noise that the
voice detector let through, which the model still writes words for, hesitantly. Every window's best hypothesis
carries its confidence (`parts["ctc_confidence"]`).
"""

from __future__ import annotations

import zlib
from typing import Callable

from asr_transformer.config import DecodeConfig
from asr_transformer.decode import Hypothesis, average_log_prob
from asr_transformer.tokens import NUM_SPECIAL


def compression_ratio(text: str) -> float:
    """Bytes of the text over bytes of its zlib compression (whisper's repetition check: high means looping)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def loops(text: str, opts: DecodeConfig) -> bool:
    return compression_ratio(text) > opts.compression_ratio_threshold


def failed(h: Hypothesis, text: str, opts: DecodeConfig) -> bool:
    """Whether a window's best hypothesis calls for a hotter try."""
    return loops(text, opts) or average_log_prob(h) < opts.logprob_threshold


def temperatures(opts: DecodeConfig) -> list[float]:
    """The temperatures of the tries after the first: the options' temperature plus 1, 2, … increments, to 1.0."""
    if opts.temperature_increment <= 0:
        return []
    steps = int((1.0 - opts.temperature) / opts.temperature_increment + 1e-6)
    return [round(opts.temperature + k * opts.temperature_increment, 6) for k in range(1, steps + 1)]


def fall_back(first: list[list[Hypothesis]], decode_at: Callable[[list[int], float], list[list[Hypothesis]]],
              text_of: Callable[[list[int]], str], opts: DecodeConfig) -> list[list[Hypothesis]]:
    """first: per window its n-best from the first search; decode_at(windows, temperature) → those windows' n-best
    at that temperature; text_of(tokens) → the text the window would give. → per window its n-best: the first's
    where it passed, else the try that passed (or the best try) alone."""
    tries = [[hyps[0]] if hyps else [] for hyps in first]
    todo = [i for i, t in enumerate(tries) if t and failed(t[0], text_of(t[0].tokens), opts)]
    for temperature in temperatures(opts):
        if not todo:
            break
        for i, hyps in zip(todo, decode_at(todo, temperature)):
            tries[i].append(hyps[0])
        todo = [i for i in todo if failed(tries[i][-1], text_of(tries[i][-1].tokens), opts)]
    out = list(first)
    for i, t in enumerate(tries):
        if len(t) == 1:
            continue
        passed = t[-1] if i not in todo else None
        if passed is None:
            fluent = [h for h in t if not loops(text_of(h.tokens), opts)] or t
            passed = max(fluent, key=average_log_prob)
        out[i] = [passed]
    return out


def no_speech(model, enc, enc_lens, results: list[list[Hypothesis]], ids: tuple[int, int],
              opts: DecodeConfig) -> list[list[Hypothesis]]:
    """results: per window its n-best; ids: (<|startoftranscript|>, the no-speech token), toolkit ids. → the same,
    each best hypothesis with parts["no_speech_prob"], and a window judged silent as one empty hypothesis."""
    import torch

    start, token = ids
    enc_mask = torch.arange(enc.size(1), device=enc.device) < enc_lens.to(enc.device).unsqueeze(1)
    logits = model.decoder.after_prompt_token(enc, enc_mask, start)[:, NUM_SPECIAL:]  # over Whisper's own ids
    return no_speech_silence(results, torch.softmax(logits, dim=-1)[:, token - NUM_SPECIAL].tolist(), opts)


def no_speech_silence(results: list[list[Hypothesis]], probs, opts: DecodeConfig) -> list[list[Hypothesis]]:
    """results: per window its n-best; probs: each window's no-speech probability (Whisper's token, `no_speech`,
    or a no-speech head, `ASRModel.no_speech_prob`). → the same, each best hypothesis with parts["no_speech_prob"],
    and a window judged silent as one empty hypothesis."""
    return _silenced(results, "no_speech_prob", [float(p) for p in probs], lambda best, p: p > opts.no_speech_threshold
                     and average_log_prob(best) < opts.logprob_threshold)


def ctc_silence(results: list[list[Hypothesis]], confidence, lengths, opts: DecodeConfig) -> list[list[Hypothesis]]:
    """results: per window its n-best; confidence (B, L) and lengths (B,): CTC's best path per window, each token's
    posterior at its surest frame (`ctc_prefix.ctc_greedy`, `maskctc.greedy_with_confidence`; tensors or arrays).
    → the same, each best hypothesis with parts["ctc_confidence"], and a window judged silent as one empty
    hypothesis."""
    means = [float(confidence[b, :n].mean()) if n else 0.0 for b, n in enumerate(map(int, lengths))]
    return _silenced(results, "ctc_confidence", means, lambda best, mean: bool(best.tokens)
                     and mean < opts.ctc_confidence_threshold and average_log_prob(best) < opts.logprob_threshold)


def _silenced(results: list[list[Hypothesis]], key: str, values: list[float],
              silent: Callable[[Hypothesis, float], bool]) -> list[list[Hypothesis]]:
    """Each window's best hypothesis with parts[key] = its value; a window whose best is `silent` with its value
    as one empty hypothesis (the silence checks above)."""
    out = []
    for hyps, value in zip(results, values):
        if not hyps:
            out.append(hyps)
            continue
        best = hyps[0]
        parts = {**best.parts, key: value}
        if silent(best, value):
            out.append([Hypothesis([], best.score, parts)])
        else:
            out.append([Hypothesis(best.tokens, best.score, parts), *hyps[1:]])
    return out
