"""Decoding a phone model into words: the lexicon as a constraint, a word n-gram LM at word ends.

A phone model (data/phones.py) emits ``▁`` before each word and then its phones. `LexiconLM` keeps, for every
hypothesis, the words it has finished and where its current word stands in a prefix tree of the lexicon's
pronunciations (those of the word LM's words). A phone is allowed only where it continues some pronunciation;
``▁`` and <eos> only where a pronunciation ends, and they gain  γ·log p_word(w | the words before it)  for the
best word w with that pronunciation (homophones: the LM's choice after the words before), <eos> also
γ·log p_word(</s> | …). So the search only ever spells words of the lexicon — the LM's vocabulary — and the
word LM ranks them, as lexicon-based CTC decoders (wav2letter, Kaldi's TLG) do. The one exception is a last
resort: <eos> inside a word costs NO_WORD, so that a search held to its length limit mid-word still ends. A phone n-gram LM over the
model's tokens, when given, adds β·log p_token of every token.

It offers the interface the decoders use for an LM (`next_log_probs`, `sentence_log_prob`) with the weights
applied, so they fuse it with weight 1; `transcript` gives a hypothesis' words with the homophones it chose.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from asr_transformer.decode.ngram import NgramLM
from asr_transformer.tokens import EOS, MASK, SOS, UNK

NEG_INF = float("-inf")
NO_WORD = -1.0e4  # <eos> inside a word that spells none yet: a last resort, so that a search cut short still ends
ROOT, DEAD = 0, -1  # the prefix tree's root (between words), and a phone sequence no pronunciation starts with
_CACHE_ROWS = 1 << 17


class LexiconLM:
    """Lexicon constraint + word LM (weight γ) + optional token LM (weight β) for a `PhoneTokenizer`'s model.

    Args:
        tokenizer: the model's PhoneTokenizer (its pieces, `word_start` id and `pronounce`).
        word_lm: an NgramLM read with `NgramLM.read_arpa(path, None)`; its words make the lexicon.
    """

    def __init__(self, tokenizer, word_lm: NgramLM, word_weight: float,
                 token_lm: NgramLM | None = None, token_weight: float = 0.0):
        if word_lm.words is None:
            raise ValueError("word_lm must be a word-level LM (`asr lm --words`)")
        self.word_lm, self.word_weight = word_lm, float(word_weight)
        self.token_lm, self.token_weight = token_lm, float(token_weight)
        self.tokenizer, self.vocab_size, self.word_start = tokenizer, tokenizer.vocab_size, tokenizer.word_start
        ids = {p: i for i, p in enumerate(tokenizer.pieces(range(tokenizer.vocab_size)))}
        self.children: list[dict[int, int]] = [{}]  # node → {phone id: child node}
        self.ends: list[list[int]] = [[]]  # node → word ids whose pronunciation ends there
        for word, wid in word_lm.words.items():
            for pron in tokenizer.pronounce(word) if wid > EOS else []:
                node = ROOT
                for phone in pron:
                    child = self.children[node].get(ids[phone])
                    if child is None:
                        child = self.children[node][ids[phone]] = len(self.children)
                        self.children.append({})
                        self.ends.append([])
                    node = child
                if wid not in self.ends[node]:
                    self.ends[node].append(wid)
        self.spelling = {i: w for w, i in word_lm.words.items()}
        self._state: dict[tuple, tuple[tuple[int, ...], int]] = {}
        self._best: dict[tuple, tuple[float, int, float]] = {}

    @property
    def words(self) -> int:
        """Distinct words the search can spell."""
        return len({w for ends in self.ends for w in ends})

    # -------------------------------------------------------------------------- prefix → words + tree node

    def _best_word(self, done: tuple[int, ...], node: int) -> tuple[float, int, float]:
        """(log p_word of the likeliest word ending at `node` after `done`, that word, the same then </s>)."""
        key = (done[max(0, len(done) - (self.word_lm.order - 1)):] if self.word_lm.order > 1 else (), node)
        best = self._best.get(key)
        if best is None:
            history = (SOS,) + key[0]
            lp, word = max((self.word_lm.log_prob(history, w), w) for w in self.ends[node])
            best = (lp, word, lp + self.word_lm.log_prob(history + (word,), EOS))
            if len(self._best) > _CACHE_ROWS:
                self._best.clear()
            self._best[key] = best
        return best

    def _walk(self, prefix: tuple) -> tuple[tuple[int, ...], int]:
        """(word ids finished in `prefix` (<sos> first), its node in the tree), extended token by token from
        the longest prefix already known: during a beam search, the prefix one token shorter."""
        known = len(prefix)
        while known > 1 and prefix[:known] not in self._state:
            known -= 1
        state = self._state.get(prefix[:known], ((), ROOT))
        if len(self._state) + len(prefix) - known > _CACHE_ROWS:
            self._state.clear()
        for end in range(known + 1, len(prefix) + 1):
            done, node = state
            token = prefix[end - 1]
            if token == self.word_start:
                if node != ROOT:  # a word ends: the likeliest with its pronunciation, <unk> if it has none
                    done = done + (self._best_word(done, node)[1] if node != DEAD and self.ends[node] else UNK,)
                state = (done, ROOT)
            else:
                state = (done, self.children[node].get(token, DEAD) if node != DEAD else DEAD)
            self._state[prefix[:end]] = state
        return state

    # -------------------------------------------------------------------------- the LM interface

    def next_log_probs(self, histories: Sequence[Sequence[int]]) -> np.ndarray:
        """histories: N rows of token ids starting with <sos> → weighted LM score of each next token (N, V)
        float32; -inf where the lexicon forbids the token."""
        out = np.full((len(histories), self.vocab_size), NEG_INF, np.float32)
        for row, prefix in enumerate(histories):
            done, node = self._walk(tuple(prefix))
            if node != ROOT:
                out[row, EOS] = NO_WORD  # replaced below where a word ends
            if node == DEAD:
                continue
            if len(prefix) == 1:  # a hypothesis starts with the first word's ▁
                out[row, self.word_start] = 0.0
                continue
            out[row, list(self.children[node])] = 0.0
            if self.ends[node]:
                lp, _, then_end = self._best_word(done, node)
                out[row, self.word_start] = self.word_weight * lp
                out[row, EOS] = self.word_weight * then_end
        if self.token_lm is not None and self.token_weight != 0.0:
            out = out + np.float32(self.token_weight) * self.token_lm.next_log_probs(histories)
        return out

    def sentence_log_prob(self, tokens: Sequence[int]) -> float:
        """The weighted LM score of the whole hypothesis `tokens` followed by <eos> (-inf outside the lexicon)."""
        prefix, total = [SOS], 0.0
        for token in [*map(int, tokens), EOS]:
            total += float(self.next_log_probs([prefix])[0, token])
            prefix.append(token)
        return total

    def transcript(self, tokens: Sequence[int]) -> str:
        """The words of a hypothesis, each homophone as this LM chose it; phones that spell no word of the LM (a
        search cut short, or a rescored CTC n-best entry outside the lexicon) as the lexicon's nearest word."""
        tokens = [t for t in map(int, tokens) if t > MASK]
        done, _ = self._walk((SOS, *tokens, self.word_start))  # one word id per word of split_words
        return " ".join(self.spelling[w] if w != UNK else self.tokenizer.spoken_word(phones)
                        for w, phones in zip(done, self.tokenizer.split_words(tokens)))
