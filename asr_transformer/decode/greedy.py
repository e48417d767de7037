"""Autoregressive greedy decoding and sampling with the attention decoder, batched over utterances.

From <sos>, feed the most probable next token (or one drawn at a temperature) back in until <eos> or the
utterance's length limit (`max_len_ratio` × its encoder frames). The decoder's key/value cache makes each step
cost one position; an utterance that ends leaves the batch (its rows are dropped from the cache), so the rest run on.
"""

from __future__ import annotations

import torch

from asr_transformer.decode import Hypothesis, average_log_prob
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import BLANK, EOS, MASK, SOS

NOT_OUTPUT = (BLANK, SOS, MASK)  # ids the attention decoder never emits (never a training target)


def max_lengths(enc_lens: torch.Tensor, max_len_ratio: float, cap: int | None = None) -> torch.Tensor:
    """Most output tokens (before <eos>) per utterance: ratio × encoder frames, at least 1, at most `cap` (the
    decoder's `max_tokens`: what its position table has room for). (B,) on CPU."""
    limit = (enc_lens.detach().cpu().double() * max_len_ratio).long().clamp(min=1)
    return limit if cap is None else limit.clamp(max=cap)


def mask_not_output(log_probs: torch.Tensor) -> torch.Tensor:
    """Set the log-probabilities of ids the decoder must not emit to -inf. (N, V) → (N, V)."""
    return log_probs.index_fill(-1, torch.tensor(NOT_OUTPUT, device=log_probs.device), float("-inf"))


def greedy_search(model, enc: torch.Tensor, enc_lens: torch.Tensor, max_len_ratio: float = 1.0,
                  temperature: float = 0.0, seeds: list[int] | None = None) -> list[list[Hypothesis]]:
    """Batched greedy attention decoding, or sampling.

    Args:
        model: ASRModel (its `decoder_step`); enc (B, T', D), enc_lens (B,).
        temperature: 0 takes the most probable token; above 0, each row draws from softmax(log p / temperature)
            with a generator of its own, seeded by seeds[b] (default b), so a row's draws do not depend on the
            rows decoded beside it.
    Returns:
        per utterance one Hypothesis: tokens without <sos>/<eos>, score = summed log-probabilities of the
        chosen tokens (including <eos> when it was reached).
    """
    B, dev = enc.size(0), enc.device
    limit = max_lengths(enc_lens, max_len_ratio, model.decoder.max_tokens)
    enc_mask = lengths_to_mask(enc_lens.to(dev), enc.size(1))
    active = torch.arange(B)  # original index of each row (CPU)
    ys = torch.full((B, 1), SOS, dtype=torch.long, device=dev)
    score = torch.zeros(B, device=dev)
    cache = None
    results: list[Hypothesis | None] = [None] * B
    pick = _sampler(temperature, seeds if seeds is not None else range(B), dev) if temperature > 0 else None
    for step in range(int(limit.max())):
        log_probs, cache = model.decoder_step(enc, enc_mask, ys, cache)
        log_probs = mask_not_output(log_probs)
        if pick is None:
            best_lp, best = log_probs.max(-1)  # (N,)
        else:
            best = pick(log_probs, active)
            best_lp = log_probs.gather(1, best.unsqueeze(1)).squeeze(1)
        score = score + best_lp
        ys = torch.cat([ys, best.unsqueeze(1)], 1)
        ended = ((best == EOS).cpu() | (limit[active] <= step + 1))  # one sync per step
        if not ended.any():
            continue
        rows = ended.nonzero().squeeze(1)
        ys_cpu, score_cpu = ys[rows.to(dev)].cpu(), score[rows.to(dev)].cpu()
        for i, r in enumerate(rows.tolist()):
            toks = ys_cpu[i, 1:].tolist()
            if toks and toks[-1] == EOS:
                toks.pop()
            results[int(active[r])] = Hypothesis(toks, float(score_cpu[i]), {"att": float(score_cpu[i])})
        keep = (~ended).nonzero().squeeze(1)
        if keep.numel() == 0:
            break
        keep_dev = keep.to(dev)
        active, ys, score = active[keep], ys[keep_dev], score[keep_dev]
        enc, enc_mask = enc[keep_dev], enc_mask[keep_dev]
        cache = [c[keep_dev] for c in cache]
    return [[h] for h in results]


def _sampler(temperature: float, seeds, dev):
    """(log_probs (N, V), active (N,): each row's original index) → (N,) tokens drawn at `temperature`."""
    generators = [torch.Generator(dev).manual_seed(int(seed)) for seed in seeds]

    def pick(log_probs: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(log_probs.float() / temperature, -1)
        return torch.cat([torch.multinomial(probs[i], 1, generator=generators[int(b)])
                          for i, b in enumerate(active.tolist())])

    return pick


def sample_search(model, enc: torch.Tensor, enc_lens: torch.Tensor, temperature: float, samples: int,
                  max_len_ratio: float = 1.0) -> list[list[Hypothesis]]:
    """`samples` draws per utterance at `temperature` (draw k seeded k), best first by average log-probability
    per token (<eos> counted): whisper's best_of. enc (B, T', D), enc_lens (B,) → per utterance its draws, each
    with parts {"att": summed log-probability, "temperature": temperature}."""
    B = enc.size(0)
    rows = torch.arange(B, device=enc.device).repeat_interleave(samples)
    drawn = greedy_search(model, enc[rows], enc_lens[rows.to(enc_lens.device)], max_len_ratio, temperature,
                          seeds=[k for _ in range(B) for k in range(samples)])
    out = []
    for b in range(B):
        hyps = [Hypothesis(h.tokens, h.score, {"att": h.score, "temperature": temperature})
                for [h] in drawn[b * samples:(b + 1) * samples]]
        out.append(sorted(hyps, key=average_log_prob, reverse=True))
    return out
