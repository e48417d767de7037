"""CTC forced alignment (decode/align.py): the Viterbi path against brute force, word grouping, frame times,
and the fallbacks when a hypothesis cannot be aligned."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from asr_transformer.config import FeatureConfig
from asr_transformer.decode.align import FrameClock, ctc_align, token_frames, word_groups, word_timestamps
from asr_transformer.tokens import BLANK, UNK


def collapse(path) -> list[int]:
    """A CTC path → its tokens: merge repeats, drop blanks."""
    return [int(s) for i, s in enumerate(path) if s != BLANK and (i == 0 or s != path[i - 1])]


def random_log_probs(rng, T: int, V: int) -> np.ndarray:
    x = rng.normal(size=(T, V)) * 2
    return x - np.log(np.exp(x).sum(1, keepdims=True))


@pytest.mark.parametrize("seed", range(40))
def test_viterbi_equals_brute_force_over_all_paths(seed):
    rng = np.random.default_rng(seed)
    T, V = int(rng.integers(1, 7)), int(rng.integers(2, 4))
    log_probs = random_log_probs(rng, T, V)
    tokens = [int(t) for t in rng.integers(1, V, size=int(rng.integers(0, 4)))]
    valid = [p for p in itertools.product(range(V), repeat=T) if collapse(p) == tokens]
    aligned = ctc_align(log_probs, tokens)
    if not valid:
        assert aligned is None
        return
    which, score = aligned
    best = max(sum(log_probs[t, s] for t, s in enumerate(p)) for p in valid)
    assert score == pytest.approx(best)
    path = [tokens[k] if k >= 0 else BLANK for k in which]
    assert collapse(path) == tokens
    assert sum(log_probs[t, s] for t, s in enumerate(path)) == pytest.approx(score)
    positions = [int(k) for i, k in enumerate(which) if k >= 0 and (i == 0 or k != which[i - 1])]
    assert positions == list(range(len(tokens)))  # each token once, in order


def test_repeated_tokens_need_a_blank_between():
    log_probs = np.log(np.full((2, 3), 1 / 3))
    assert ctc_align(log_probs, [1, 1]) is None  # "a a" needs 3 frames
    assert ctc_align(log_probs, [1, 2]) is not None
    assert ctc_align(log_probs[:0], [1]) is None
    which, score = ctc_align(log_probs[:0], [])
    assert which.size == 0 and score == 0.0


def test_token_frames_follow_the_posterior_spikes():
    T, V = 12, 4
    log_probs = np.full((T, V), np.log(0.01))
    log_probs[:, BLANK] = np.log(0.97)
    for frame, token in ((2, 1), (3, 1), (6, 2), (9, 1)):
        log_probs[frame] = np.log(0.01)
        log_probs[frame, token] = np.log(0.97)
    which, _ = ctc_align(log_probs, [1, 2, 1])
    assert token_frames(which, 3) == [(2, 3), (6, 6), (9, 9)]


def test_a_long_hypothesis_aligns_past_127_states():
    tokens = [5 + k % 7 for k in range(150)]  # 301 states: the back-pointers must not wrap around
    log_probs = np.full((400, 16), -20.0)
    spikes = np.linspace(2, 397, len(tokens)).astype(int)
    log_probs[:, BLANK] = 0.0
    log_probs[spikes, BLANK], log_probs[spikes, tokens] = -20.0, 0.0
    which, _ = ctc_align(log_probs, tokens)
    assert [first for first, _ in token_frames(which, len(tokens))] == spikes.tolist()


def test_frame_clock():
    features = FeatureConfig()  # 25 ms frames every 10 ms
    clock = FrameClock.of(features, 4)  # an encoder frame sees 7 feature frames, every 4th
    assert clock.shift == pytest.approx(0.04)
    assert clock.first == pytest.approx(0.03 + 0.0125)
    assert clock.end(0) - clock.start(0) == pytest.approx(0.04)
    assert FrameClock.of(features, 6).first == pytest.approx(0.05 + 0.0125)
    assert FrameClock.of(features, 8).first == pytest.approx(0.07 + 0.0125)
    whisper = FrameClock.of(FeatureConfig(kind="whisper"), 2)  # centred STFT frames, Conv1d front-end ×2
    assert (whisper.first, whisper.shift) == (0.0, pytest.approx(0.02))


def test_word_groups():
    assert word_groups(["▁", "a", "b", "▁", "c"], [5, 6, 7, 5, 8]) == [[1, 2], [4]]  # characters
    assert word_groups(["▁the", "▁ca", "t"], [9, 10, 11]) == [[0], [1, 2]]  # sentencepiece pieces
    assert word_groups(["a", "▁b", "▁"], [6, 7, 5]) == [[0], [1]]  # no ▁ first; a trailing bare ▁
    assert word_groups(["▁", "<unk>", "▁", "a"], [5, UNK, 5, 6]) == [[3]]  # as the text leaves <unk> out


def spiky(T: int, V: int, spikes) -> np.ndarray:
    log_probs = np.full((T, V), np.log(0.01))
    log_probs[:, BLANK] = np.log(1 - 0.01 * (V - 1))
    for frame, token in spikes:
        log_probs[frame] = np.log(0.01)
        log_probs[frame, token] = np.log(1 - 0.01 * (V - 1))
    return log_probs


def test_word_timestamps_in_file_seconds():
    clock = FrameClock(first=0.0, shift=0.04)
    # "▁ a b ▁ a" (ids 5 6 7 5 6): ▁ at frame 1, a at 3, b at 4-5, ▁ at 8, a at 10
    log_probs = spiky(14, 8, [(1, 5), (3, 6), (4, 7), (5, 7), (8, 5), (10, 6)])
    tokens, pieces = [5, 6, 7, 5, 6], ["▁", "a", "b", "▁", "a"]
    words = word_timestamps(log_probs, tokens, pieces, ["ab", "a"], clock, offset=10.0, bounds=(10.0, 10.6))
    assert [w["word"] for w in words] == ["ab", "a"]
    assert words[0]["start"] == pytest.approx(10 + 2.5 * 0.04) and words[0]["end"] == pytest.approx(10 + 5.5 * 0.04)
    assert words[1]["start"] == pytest.approx(10 + 9.5 * 0.04) and words[1]["end"] == pytest.approx(10 + 10.5 * 0.04)
    assert 0.9 < words[0]["probability"] <= 1.0
    # times are kept within the segment's speech
    inside = word_timestamps(log_probs, tokens, pieces, ["ab", "a"], clock, offset=10.0, bounds=(10.2, 10.3))
    assert all(10.2 <= w["start"] <= w["end"] <= 10.3 for w in inside)


def test_unalignable_hypothesis_spreads_the_words_over_the_segment():
    clock = FrameClock(first=0.0, shift=0.04)
    log_probs = spiky(3, 8, [])
    tokens, pieces = [5, 6, 7, 5, 6, 7], ["▁", "a", "b", "▁", "a", "b"]  # 6 tokens, 3 frames
    words = word_timestamps(log_probs, tokens, pieces, ["ab", "ab"], clock, offset=0.0, bounds=(1.0, 2.0))
    assert words == [{"word": "ab", "start": 1.0, "end": 1.5, "probability": None},
                     {"word": "ab", "start": 1.5, "end": 2.0, "probability": None}]
    # words that do not pair with the token groups: the same fallback
    words = word_timestamps(spiky(20, 8, []), tokens, pieces, ["one"], clock, offset=0.0, bounds=(1.0, 2.0))
    assert words == [{"word": "one", "start": 1.0, "end": 2.0, "probability": None}]
    assert word_timestamps(log_probs, [], [], [], clock, offset=0.0, bounds=(1.0, 2.0)) == []


def test_phone_model_words_are_the_lexicons(tmp_path):
    """A phone model's tokens are timed word by word; the words are its text's: the lexicon's word for each
    pronunciation, the nearest word for phones that spell none, a word LM's homophone where one took part."""
    from asr_transformer.data.phones import train_phone_tokenizer

    lexicon = tmp_path / "lexicon.dict"
    lexicon.write_text("the  DH AH0\ncat  K AE1 T\nsat  S AE1 T\ntwo  T UW1\nto  T UW1\n")
    tok, _ = train_phone_tokenizer(["the cat sat", "to the cat"], tmp_path / "tok", lexicon)
    tokens = tok.encode("to the cat")
    tokens[-1] = tok.encode("sat")[1]  # "▁ t uw ▁ dh ah ▁ k ae s": no word's phones, the nearest is "cat"
    assert tok.transcript(tokens) == "to the cat"
    spikes = [(2 * k + 1, t) for k, t in enumerate(tokens)]  # token k on frame 2k + 1
    log_probs = spiky(2 * len(tokens) + 2, tok.vocab_size, spikes)
    clock = FrameClock(first=0.0, shift=0.04)
    for text in (tok.transcript(tokens), "two the cat"):  # the tokenizer's words, or a word LM's homophone
        words = word_timestamps(log_probs, tokens, tok.pieces(tokens), text.split(), clock, offset=0.0,
                                bounds=(0.0, 10.0))
        assert [w["word"] for w in words] == text.split()
        # ▁ on frames 1, 7, 13; the words' phones on 3-5, 9-11, 15-19
        assert [t for w in words for t in (w["start"], w["end"])] == pytest.approx([0.1, 0.22, 0.34, 0.46, 0.58, 0.78])


# ------------------------------------------------------------------------------- attention (DTW) word times


@pytest.mark.parametrize("seed", range(5))
def test_dtw_finds_the_cheapest_monotonic_path(seed):
    """Against every monotonic path from corner to corner of a small cost matrix."""
    from asr_transformer.decode.attention_align import dtw

    rng = np.random.default_rng(seed)
    R, T = 3 + seed % 2, 5
    cost = rng.normal(size=(R, T))

    def paths(i, j):
        if (i, j) == (R - 1, T - 1):
            yield [(i, j)]
            return
        for di, dj in ((1, 1), (1, 0), (0, 1)):
            if i + di < R and j + dj < T:
                for rest in paths(i + di, j + dj):
                    yield [(i, j)] + rest

    best = min(sum(cost[c] for c in p) for p in paths(0, 0))
    rows, cols = dtw(cost)
    steps = set(zip(np.diff(rows).tolist(), np.diff(cols).tolist()))
    assert (rows[0], cols[0], rows[-1], cols[-1]) == (0, 0, R - 1, T - 1) and steps <= {(1, 1), (1, 0), (0, 1)}
    assert cost[rows, cols].sum() == pytest.approx(best)


def test_attention_word_times_follow_where_the_decoder_looked():
    """Rows: BEGIN and three tokens ("▁a", "b", "▁c"), each looking at its own stretch of frames: the word "ab"
    runs from where token "▁a" was written to where "▁c" was, "c" from there to where the end was written."""
    from asr_transformer.decode.attention_align import alignment_matrix, attention_word_timestamps

    weights = np.full((2, 4, 40), 1e-3)
    for row, (a, b) in enumerate([(0, 8), (8, 20), (20, 30), (30, 40)]):
        weights[:, row, a:b] = 1.0
    weights[:, :, 36:] = 0.0  # the last frames are padding: left out
    matrix = alignment_matrix(weights, frames=36)
    assert matrix.shape == (4, 36)
    clock = FrameClock(first=0.0, shift=0.02)
    words = attention_word_timestamps(matrix, np.array([0.9, 0.5, 0.7]), [5, 6, 7], ["▁a", "b", "▁c"], ["ab", "c"],
                                      clock, offset=1.0, bounds=(1.0, 1.7))
    assert [(w["word"], w["start"], w["end"]) for w in words] == [("ab", 1.0, 1.4), ("c", 1.4, 1.6)]
    assert words[0]["probability"] == pytest.approx(0.7) and words[1]["probability"] == pytest.approx(0.7)
    assert attention_word_timestamps(matrix, np.ones(3), [5, 6, 7], ["▁a", "b", "▁c"], ["ab"], clock, 1.0,
                                     (1.0, 1.7))[0]["probability"] is None  # words and tokens that do not pair


def test_long_words_give_their_pauses_back_at_sentence_and_segment_edges():
    """A word longer than twice the median keeps that length: cut from its start when it ends a sentence or the
    segment, from its end when it starts one; a long word inside a sentence is left as it is."""
    from asr_transformer.decode.attention_align import clamp_long_words

    words = ["so", "my", "fellow", "americans.", "ask", "not", "what", "your", "great", "country"]
    spans = [[0.0, 2.0], [2.0, 2.3], [2.3, 2.7], [2.7, 5.0], [5.0, 5.3], [5.3, 6.5], [6.5, 6.8], [6.8, 7.1],
             [7.1, 7.4], [7.4, 9.6]]
    clamp_long_words(spans, words)
    longest = 0.35 * 2  # twice the lengths' median (0.35 s)
    assert sum(spans, []) == pytest.approx(sum([[2.0 - longest, 2.0], [2.0, 2.3], [2.3, 2.7], [2.7, 2.7 + longest],
                                                [5.0, 5.3], [5.3, 6.5], [6.5, 6.8], [6.8, 7.1], [7.1, 7.4],
                                                [7.4, 7.4 + longest]], []))
    slow = [[0.0, 3.0], [3.0, 6.0]]  # every word long: the median caps at 0.7 s, so 1.4 s each
    clamp_long_words(slow, ["slow.", "words"])
    assert sum(slow, []) == pytest.approx([0.0, 1.4, 3.0, 4.4])  # ends of a sentence, of the segment
