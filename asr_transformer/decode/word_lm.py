"""A word n-gram LM fused into a decoder of characters or sub-words, at word boundaries.

A character LM sees a few words back at most; a word LM sees whole words, but the decoder emits pieces. As in
Hori et al. 2018 (multi-level LMs for open-vocabulary end-to-end recognition), the word LM is consulted when a
word ends: a piece that begins a new word (its sentencepiece form starts with "▁"), or <eos>, completes the
word before it, and that candidate gains  γ·log p_word(word | the words before it)  (<eos> also gains
γ·log p_word(</s> | …)). A word the LM does not know is its <unk> spelled letter by letter: its price is
log p_word(<unk> | …) + n·log(1/27) for its n letters (a uniform letter model, the simplest of the spelling models of
Hori et al.), so that gluing pieces into one long unknown word, which paid <unk> once, costs what it spells.

Look-ahead: a word is priced where it ends, but a hypothesis must not ride free until then (with pieces as short as
Whisper's, the search would keep a word going and outrun every hypothesis that pays for its real words). So from the
step after its spelling leaves every LM word's prefixes, a hypothesis pays its unknown word's price so far at every
step; the words a hyphen or apostrophe inside one spelling ends ("shoulder-to-shoulder") are paid for as they end;
and the word end settles the difference. The total over a sentence is unchanged (`sentence_log_prob`). Every other
candidate gains nothing from the word LM.

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

from bisect import bisect_left
import math

import numpy as np

from asr_transformer.decode.ngram import NgramLM
from asr_transformer.text import NormalizerConfig, normalize
from asr_transformer.tokens import EOS, MASK, SOS, UNK

WORD_START = "▁"  # sentencepiece's mark of a piece that begins a word
_CACHE_ROWS = 1 << 16  # prefix states kept between calls before the cache is emptied
LETTER_LOG_PROB = -math.log(27)  # an unknown word's spelling: each letter one of 26 or the word's end


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
        self._ids: dict[str, tuple] = {}  # spelled word → `_word_ids`: normalized once, not at every step
        self._sorted = sorted(w for w in word_lm.words if w)  # the LM's words, for the look-ahead's prefix test

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
                done = done + self._word_ids(current)[0]
                current = piece[len(WORD_START):]
            else:
                current += piece
            self._state[prefix[:end]] = (done, current)
        return done, current

    def _word_ids(self, spelled: str) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
        """The LM's ids of the word(s) `spelled` is once normalized (none for punctuation alone; <unk> if unknown),
        the letters of each that its price counts (an unknown word's), and whether the last may still become an LM
        word if more is spelled (an LM word begins with it)."""
        found = self._ids.get(spelled)
        if found is None:
            if len(self._ids) > _CACHE_ROWS:
                self._ids.clear()
            words = normalize(spelled, self.normalizer).split()
            ids = tuple(self.word_lm.words.get(w, UNK) for w in words)
            letters = tuple(len(w) if i == UNK else 0 for w, i in zip(words, ids))
            open_end = True
            if words:
                i = bisect_left(self._sorted, words[-1])
                open_end = i < len(self._sorted) and self._sorted[i].startswith(words[-1])
            found = self._ids[spelled] = (ids, letters, open_end)
        return found

    def _word_scores(self, done: tuple[int, ...], current: str) -> tuple[float, float, float]:
        """log p_word of finishing `current` after `done`, of finishing it and then </s>, and what a hypothesis
        spelling `current` has paid for it so far (the look-ahead: its normalized words but the last, which a
        hyphen or an apostrophe ended, and the last too once no LM word begins with it)."""
        history = (SOS,) + done
        ids, letters, open_end = self._word_ids(current)
        lp = paid = 0.0
        for word, n in zip(ids, letters):
            paid = lp
            lp += self.word_lm.log_prob(history, word) + n * LETTER_LOG_PROB
            history = history + (word,)
        if not open_end:
            paid = lp
        return lp, lp + self.word_lm.log_prob(history, EOS), paid

    # -------------------------------------------------------------------------- the LM interface

    def next_log_probs(self, histories: Sequence[Sequence[int]]) -> np.ndarray:
        """histories: N rows of token ids starting with <sos> → weighted LM score of each next token (N, V)
        float32."""
        if self.token_lm is not None and self.token_weight != 0.0:
            out = np.float32(self.token_weight) * self.token_lm.next_log_probs(histories)
        else:
            out = np.zeros((len(histories), self.vocab_size), np.float32)
        scores = np.float32(self.word_weight) * np.array([self._row_scores(tuple(row)) for row in histories],
                                                         np.float32).reshape(-1, 3)
        out = out + scores[:, 2:]  # the look-ahead's charge for the latest piece, on every candidate
        out = out + np.where(self.starts_word, scores[:, :1], np.float32(0.0))  # word ends, then </s>
        out[:, EOS] += scores[:, 1]
        return out

    def _row_scores(self, prefix: tuple) -> tuple[float, float, float]:
        """For the hypothesis `prefix`: (ending its word, ending it and the sentence, both less what it has paid
        for the word; what it pays now for its latest piece)."""
        done, current = self._words(prefix)
        end, end_sentence, paid = self._word_scores(done, current)
        paid_before = 0.0
        if len(prefix) > 1 and not self.pieces[prefix[-1]].startswith(WORD_START):  # the piece continued the word
            paid_before = self._word_scores(*self._words(prefix[:-1]))[2]
        return end - paid, end_sentence - paid, paid - paid_before

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
