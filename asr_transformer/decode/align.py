"""CTC forced alignment and word timestamps.

Given a segment's CTC log-probabilities and the tokens already decoded, `ctc_align` finds the single most
probable frame-by-frame path that spells exactly those tokens (Viterbi through the CTC topology: optional
blanks between tokens, and a blank needed between two equal tokens), so each token gets the frames it was
emitted on. `word_timestamps` groups the tokens into words (a word starts at a ``▁``-marked token: a
sentencepiece piece ``▁the``, a character model's ``▁``, a phone model's ``▁`` word-start token), pairs the
groups with the words of the segment's text, and turns frames into seconds.

A token's time is the stretch of audio its encoder frames stand for; a word runs from its first token's first
frame to its last token's last frame. A bare ``▁`` token is left out of its word's time: it is emitted in the
pause before the word. The word's probability is the mean, over its tokens, of each token's mean CTC posterior
on its frames.

No PyTorch here (numpy only), so an ONNX export (inference/exported.py) aligns too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asr_transformer.frames import SUBSAMPLING_LAYERS
from asr_transformer.tokens import BLANK, MASK

WORD_START = "▁"


# ------------------------------------------------------------------------------------------- Viterbi


def ctc_align(log_probs: np.ndarray, tokens: list[int], blank: int = BLANK) -> tuple[np.ndarray, float] | None:
    """The best CTC path through `log_probs` that collapses to `tokens`.

    Args:
        log_probs: (T, V) per-frame log-probabilities of one utterance (its valid frames only).
        tokens: (L,) the token ids to align (no blanks).
    Returns:
        (which (T,) int64: for each frame the position in `tokens` it emits, -1 for a blank frame;
        score: the path's summed log-probability), or None when no path exists (the tokens need more
        frames than T: one per token, plus one blank between each pair of equal neighbours).
    """
    log_probs = np.asarray(log_probs, dtype=np.float64)
    T, L = log_probs.shape[0], len(tokens)
    if T < L + sum(a == b for a, b in zip(tokens, tokens[1:])):
        return None
    if T == 0:
        return np.zeros(0, np.int64), 0.0
    labels = np.full(2 * L + 1, blank, np.int64)  # states: blank, token 0, blank, token 1, …, blank
    labels[1::2] = tokens
    S = labels.size
    can_skip = np.zeros(S, bool)  # a token state reachable from the token two states back (no blank between)
    can_skip[3::2] = labels[3::2] != labels[1:-2:2]
    emit = log_probs[:, labels]  # (T, S)
    score = np.full(S, -np.inf)
    score[:2] = emit[0, :2]
    came_from = np.zeros((T, S), np.int8)  # states moved: 0 stay, 1 from the previous state, 2 skip a blank
    for t in range(1, T):
        candidates = np.stack([score, _shifted(score, 1), np.where(can_skip, _shifted(score, 2), -np.inf)])  # (3, S)
        came_from[t] = candidates.argmax(0)
        score = candidates.max(0) + emit[t]
    state = S - 1 if L == 0 or score[S - 1] >= score[S - 2] else S - 2
    if not np.isfinite(score[state]):
        return None
    best = float(score[state])
    states = np.empty(T, np.int64)
    for t in range(T - 1, -1, -1):
        states[t] = state
        state -= int(came_from[t, state])  # int: an int8 would make `state` int8, which overflows past 127 states
    which = np.where(states % 2 == 1, (states - 1) // 2, -1)
    return which, best


def _shifted(score: np.ndarray, k: int) -> np.ndarray:
    """(S,) → (S,): state s gets the score of state s − k (-inf where there is none)."""
    out = np.full_like(score, -np.inf)
    out[k:] = score[:score.size - k]
    return out


def token_frames(which: np.ndarray, count: int) -> list[tuple[int, int]]:
    """`ctc_align`'s per-frame token positions (T,) → each token's (first frame, last frame), `count` of them."""
    frames = np.arange(which.size)
    spans = []
    for k in range(count):
        mine = frames[which == k]
        spans.append((int(mine[0]), int(mine[-1])))
    return spans


# ------------------------------------------------------------------------------------------- frames → seconds


@dataclass(frozen=True)
class FrameClock:
    """Where encoder frames lie in the audio: frame t is centred at `first + t·shift` seconds of the audio that
    was encoded, and stands for `shift` seconds around that."""

    first: float
    shift: float

    @classmethod
    def of(cls, features, subsampling: int) -> "FrameClock":
        """From a FeatureConfig (frame length and shift) and the encoder's subsampling factor (4, 6 or 8; 2: Whisper's
        padded Conv1d front-end over its centred STFT frames, so encoder frame t is centred on feature frame 2t)."""
        hop = features.frame_shift_ms / 1000
        if subsampling == 2:
            return cls(first=0.0, shift=2 * hop)
        span = 1  # feature frames one encoder frame sees: the conv layers' receptive field
        for kernel, stride in reversed(SUBSAMPLING_LAYERS[subsampling]):
            span = (span - 1) * stride + kernel
        return cls(first=(span - 1) / 2 * hop + features.frame_length_ms / 2000, shift=subsampling * hop)

    def start(self, frame: int) -> float:
        return self.first + (frame - 0.5) * self.shift

    def end(self, frame: int) -> float:
        return self.first + (frame + 0.5) * self.shift


# ------------------------------------------------------------------------------------------- words


def word_groups(pieces: list[str], ids: list[int]) -> list[list[int]]:
    """Tokens → the positions of each word's tokens. A word starts at a piece beginning with ``▁``; a bare ``▁``
    piece only marks the start, and special ids (<unk> …) are left out, as the tokenizers' text leaves them out.
    Words with no token left are dropped."""
    groups: list[list[int]] = [[]]
    for k, (piece, token) in enumerate(zip(pieces, ids)):
        if piece.startswith(WORD_START):
            groups.append([])
        if token > MASK and piece != WORD_START:
            groups[-1].append(k)
    return [g for g in groups if g]


def word_timestamps(log_probs: np.ndarray, tokens: list[int], pieces: list[str], words: list[str],
                    clock: FrameClock, offset: float, bounds: tuple[float, float]) -> list[dict]:
    """The words of one segment with their times: [{"word", "start", "end", "probability"}].

    Args:
        log_probs: (T, V) the segment's CTC log-probabilities (valid frames only).
        tokens: the decoded hypothesis (L,); pieces: its tokenizer pieces (L,).
        words: the segment's text, split at spaces: one word per token group (`word_groups`).
        clock: where encoder frames lie; offset: the file time (s) at which the encoded audio starts.
        bounds: (start, end), the segment's speech in the file (s); word times are kept within it.
    When the tokens cannot be aligned (more tokens than frames allow) or their groups do not pair one to one
    with `words`, the words share the segment evenly, in order, with probability None.
    """
    if not words:
        return []
    groups = word_groups(pieces, tokens)
    aligned = ctc_align(log_probs, tokens) if len(groups) == len(words) else None
    if aligned is None:
        return _spread(words, bounds)
    spans = token_frames(aligned[0], len(tokens))
    posteriors = np.exp(np.asarray(log_probs, dtype=np.float64))
    out = []
    for word, group in zip(words, groups):
        first, last = spans[group[0]][0], spans[group[-1]][1]
        start = min(max(offset + clock.start(first), bounds[0]), bounds[1])
        end = min(max(offset + clock.end(last), start), bounds[1])
        probability = np.mean([posteriors[spans[k][0]:spans[k][1] + 1, tokens[k]].mean() for k in group])
        out.append({"word": word, "start": round(start, 3), "end": round(end, 3),
                    "probability": round(float(probability), 4)})
    return out


def _spread(words: list[str], bounds: tuple[float, float]) -> list[dict]:
    """The fallback: `words` sharing `bounds` in equal parts, probability None."""
    start, end = bounds
    step = (end - start) / len(words)
    return [{"word": w, "start": round(start + i * step, 3), "end": round(start + (i + 1) * step, 3),
             "probability": None} for i, w in enumerate(words)]
