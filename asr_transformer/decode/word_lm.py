"""A word n-gram LM fused into a decoder of characters or sub-words, at word boundaries.

A character LM sees a few words back at most; a word LM sees whole words, but the decoder emits pieces. As in
Hori et al. 2018 (multi-level LMs for open-vocabulary end-to-end recognition), the word LM is consulted when a
word ends: a piece that begins a new word (its sentencepiece form starts with "▁"), or <eos>, completes the
word before it, and that candidate gains  γ·log p_word(word | the words before it)  (<eos> also gains
γ·log p_word(</s> | …)). Every other candidate gains nothing from the word LM. A word the LM does not know
is its <unk>, so the LM's unknown-word probability is the price of a word outside its vocabulary.

A word is looked up as the LM's text was normalized (`normalizer`: lower case, punctuation removed), so pieces
that carry case and punctuation, as Whisper's do ("▁Hello" then ","), find the LM's "hello"; a word the normalizer
splits ("twenty-one") is scored as the words it becomes, and one it erases (a lone "-") is not scored at all.
The token-level LM, when there is one, keeps scoring every piece (weight β), so the total LM term is

    β·log p_token(c | prefix) + γ·[c ends a word]·log p_word(that word | earlier words)

`WordBoundaryLM` offers the interface the decoders use for an LM (`next_log_probs`, `sentence_log_prob`)
with the weights already applied, so the decoders fuse it with weight 1.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from asr_transformer.decode.ngram import NgramLM
from asr_transformer.text import NormalizerConfig, normalize
from asr_transformer.tokens import EOS, MASK, SOS, UNK

WORD_START = "▁"  # sentencepiece's mark of a piece that begins a word
_CACHE_ROWS = 1 << 16  # prefix states kept between calls before the cache is emptied


class WordBoundaryLM:
    """Token LM (weight β, optional) + word LM at word boundaries (weight γ); see the module docstring.

    Args:
        pieces: id → the piece's text, "▁" marking a word start (the tokenizer's `word_pieces`).
        word_lm: an NgramLM read with `NgramLM.read_arpa(path, None)` (its `words` set).
        token_lm: an NgramLM over the same pieces, or None.
        normalizer: how the word LM's text was normalized (the tokenizer's).
    """

    def __init__(self, pieces: Sequence[str], word_lm: NgramLM, word_weight: float,
                 token_lm: NgramLM | None = None, token_weight: float = 0.0,
                 normalizer: NormalizerConfig = NormalizerConfig()):
        if word_lm.words is None:
            raise ValueError("word_lm must be a word-level LM (`asr lm --words`), not one over a tokenizer's pieces")
        self.word_lm, self.word_weight, self.normalizer = word_lm, float(word_weight), normalizer
        self.token_lm, self.token_weight = token_lm, float(token_weight)
        self.vocab_size = len(pieces)
        self.pieces = [p if i > MASK else "" for i, p in enumerate(pieces)]
        self.starts_word = np.array([p.startswith(WORD_START) for p in self.pieces])  # (V,)
        self._state: dict[tuple, tuple[tuple[int, ...], str]] = {}
        self._ids: dict[str, tuple[int, ...]] = {}  # spelled word → its LM ids: normalized once, not every step

    # -------------------------------------------------------------------------- prefix → words

    def _words(self, prefix: tuple) -> tuple[tuple[int, ...], str]:
        """(ids of the finished words of `prefix` (<sos> first), the word being spelled), extended piece by
        piece from the longest cached prefix: during a beam search that is the prefix one piece shorter."""
        known = len(prefix)
        while known > 1 and prefix[:known] not in self._state:
            known -= 1
        done, current = self._state.get(prefix[:known], ((), ""))
        if len(self._state) + len(prefix) - known > _CACHE_ROWS:
            self._state.clear()
        for end in range(known + 1, len(prefix) + 1):
            piece = self.pieces[prefix[end - 1]]
            if piece.startswith(WORD_START):
                done = done + self._word_ids(current)
                current = piece[len(WORD_START):]
            else:
                current += piece
            self._state[prefix[:end]] = (done, current)
        return done, current

    def _word_ids(self, spelled: str) -> tuple[int, ...]:
        """The LM's ids of the word(s) `spelled` is once normalized (none for punctuation alone; <unk> if unknown)."""
        ids = self._ids.get(spelled)
        if ids is None:
            if len(self._ids) > _CACHE_ROWS:
                self._ids.clear()
            ids = self._ids[spelled] = tuple(self.word_lm.words.get(w, UNK)
                                             for w in normalize(spelled, self.normalizer).split())
        return ids

    def _word_scores(self, done: tuple[int, ...], current: str) -> tuple[float, float]:
        """log p_word of finishing `current` after `done`, and of finishing it and then </s>."""
        history = (SOS,) + done
        lp = 0.0
        for word in self._word_ids(current):
            lp += self.word_lm.log_prob(history, word)
            history = history + (word,)
        return lp, lp + self.word_lm.log_prob(history, EOS)

    # -------------------------------------------------------------------------- the LM interface

    def next_log_probs(self, histories: Sequence[Sequence[int]]) -> np.ndarray:
        """histories: N rows of token ids starting with <sos> → weighted LM score of each next token (N, V)
        float32."""
        if self.token_lm is not None and self.token_weight != 0.0:
            out = np.float32(self.token_weight) * self.token_lm.next_log_probs(histories)
        else:
            out = np.zeros((len(histories), self.vocab_size), np.float32)
        scores = np.float32(self.word_weight) * np.array([self._word_scores(*self._words(tuple(row)))
                                                          for row in histories], np.float32).reshape(-1, 2)
        out = out + np.where(self.starts_word, scores[:, :1], np.float32(0.0))  # word ends, then </s>
        out[:, EOS] += scores[:, 1]
        return out

    def sentence_log_prob(self, tokens: Sequence[int]) -> float:
        """The weighted LM score of the whole hypothesis `tokens` followed by <eos>."""
        total = 0.0
        if self.token_lm is not None and self.token_weight != 0.0:
            total += self.token_weight * self.token_lm.sentence_log_prob(tokens)
        prefix = (SOS,)
        for t in tokens:
            if self.pieces[int(t)].startswith(WORD_START):
                total += self.word_weight * self._word_scores(*self._words(prefix))[0]
            prefix = prefix + (int(t),)
        return total + self.word_weight * self._word_scores(*self._words(prefix))[1]
