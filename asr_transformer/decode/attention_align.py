"""Word timestamps from the decoder's cross-attention, by dynamic time warping (as openai-whisper times words).

A model without a CTC head (an imported Whisper) still knows where it listened while it wrote each token: some of
its decoder's cross-attention heads (Whisper ships their list, `model.alignment_heads`; otherwise every head of the
upper half of the layers) look at the encoder frames of the sound being written. The hypothesis is read once more
with teacher forcing (BEGIN, its tokens), which gives, per alignment head, a weight for each (token, frame): row k
is where the decoder looked while writing token k, and the last row while writing the end.

`alignment_matrix` turns those weights into one (rows, frames) matrix: restricted to the frames of the audio (a
Whisper window is padded to 30 s) and renormalized, standardized per head along the tokens (so a head that looks
everywhere counts little), median-filtered along time (width 7), averaged over the heads. `dtw` finds the
monotonic path through it that collects the most weight (each step: next token, next frame, or both). A token's
time is the frame where the path first reaches its row; a word runs from its first token's time to the time of
the token after its last (the end's row for the last word); `clamp_long_words` then takes pauses out of the words
around them.

No PyTorch here (numpy only).
"""

from __future__ import annotations

import numpy as np

from asr_transformer.decode.align import FrameClock, _spread, word_groups

MEDIAN_WIDTH = 7  # frames, as whisper's medfilt_width
MAX_MEDIAN_WORD = 0.7  # seconds: the median word length `clamp_long_words` takes at most, as whisper
SENTENCE_ENDS = (".", "?", "!", "…", "。", "！", "？")


def alignment_matrix(weights: np.ndarray, frames: int, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """(H, R, T) cross-attention weights of the alignment heads (R rows: BEGIN and each token) → (R, frames)."""
    w = np.asarray(weights, dtype=np.float64)[:, :, :max(1, frames)]
    w = w / np.maximum(w.sum(-1, keepdims=True), 1e-12)  # the weights over the audio's own frames
    std = w.std(axis=1, keepdims=True)
    w = (w - w.mean(axis=1, keepdims=True)) / np.maximum(std, 1e-12)
    return median_filter(w, width).mean(0)


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """The median of each `width` neighbours along the last axis (reflected at the ends); width odd."""
    if width <= 1 or x.shape[-1] <= width // 2:
        return x
    pad = width // 2
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1), axis=-1)


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path from (0, 0) to (R − 1, T − 1) through `cost` (R, T), each step moving to the
    next row, the next column or both. → (rows, columns) of the path's cells, in order."""
    R, T = cost.shape
    total = np.full((R + 1, T + 1), np.inf)
    total[0, 0] = 0.0
    for i in range(1, R + 1):
        # total[i, j] = cost[i-1, j-1] + min(total[i-1, j-1], total[i-1, j], total[i, j-1]): the left term makes a
        # running minimum along the row, computed at once with cumulative sums
        from_above = np.minimum(total[i - 1, :-1], total[i - 1, 1:])  # (T,): diagonal or straight down
        sums = np.cumsum(cost[i - 1])
        before = np.concatenate([[0.0], sums[:-1]])
        total[i, 1:] = sums + np.minimum.accumulate(from_above - before)
    rows, cols = [], []
    i, j = R, T
    while i > 0 and j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        moves = (total[i - 1, j - 1], total[i - 1, j], total[i, j - 1])
        step = int(np.argmin(moves))
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    return np.array(rows[::-1]), np.array(cols[::-1])


def attention_word_timestamps(matrix: np.ndarray, token_probs: np.ndarray, tokens: list[int], pieces: list[str],
                              words: list[str], clock: FrameClock, offset: float,
                              bounds: tuple[float, float]) -> list[dict]:
    """The words of one segment with their times: [{"word", "start", "end", "probability"}].

    Args:
        matrix: (L + 1, T') `alignment_matrix` of the hypothesis (rows: BEGIN, then each of its L tokens).
        token_probs: (L,) the decoder's probability of each token; tokens, pieces: the hypothesis (L,) and its
            word pieces ("▁" marks a word start).
        words, clock, offset, bounds: as `align.word_timestamps`.
    Words that do not pair one to one with the token groups share the segment evenly (probability None).
    """
    if not words:
        return []
    groups = word_groups(pieces, tokens)
    if len(groups) != len(words) or matrix.shape[0] != len(tokens) + 1 or matrix.shape[1] == 0:
        return _spread(words, bounds)
    rows, cols = dtw(-matrix)
    first = np.full(len(tokens) + 1, -1)
    for r, c in zip(rows[::-1], cols[::-1]):  # the first frame of each row on the path
        first[r] = c
    spans = []
    for group in groups:
        start = min(max(offset + clock.first + float(first[group[0]]) * clock.shift, bounds[0]), bounds[1])
        end = min(max(offset + clock.first + float(first[group[-1] + 1]) * clock.shift, start), bounds[1])
        spans.append([start, end])
    clamp_long_words(spans, words)
    return [{"word": word, "start": round(start, 3), "end": round(end, 3),
             "probability": round(float(np.mean([token_probs[k] for k in group])), 4)}
            for word, (start, end), group in zip(words, spans, groups)]


def clamp_long_words(spans: list[list[float]], words: list[str]) -> None:
    """Cut the pauses the alignment gives to the words around them, in place (as openai-whisper does).

    Attention has no frame for silence, so the word before a pause tends to last until the next word starts, and
    the word after one to start where the last ended. A word longer than twice the median word length (the
    median taken at most 0.7 s) keeps that length and no more: from its start when it ends a sentence or the
    segment, from its end when it starts the segment or follows a sentence end."""
    lengths = [end - start for start, end in spans if end > start]
    if not lengths:
        return
    longest = 2 * min(MAX_MEDIAN_WORD, float(np.median(lengths)))
    for k, (word, span) in enumerate(zip(words, spans)):
        if span[1] - span[0] <= longest:
            continue
        if k == len(words) - 1 or word.endswith(SENTENCE_ENDS):
            span[1] = span[0] + longest
        elif k == 0 or words[k - 1].endswith(SENTENCE_ENDS):
            span[0] = span[1] - longest
