"""Phone units: the lexicon reader, the phone tokenizer, and decoding phones into words (LexiconLM)."""

import json

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.data.lexicon import LexiconError, pronunciations, read_lexicon
from asr_transformer.data.phones import train_phone_tokenizer
from asr_transformer.data.tokenizer import load_tokenizer, tokenizer_from_bytes
from asr_transformer.decode.ngram import NgramLM, train_ngram
from asr_transformer.tokens import EOS, SOS, UNK

LEXICON = """;;; a CMUdict-style excerpt
the  DH AH0
the(2)  DH IY0
cat  K AE1 T
cats  K AE1 T S
sat  S AE1 T
on  AA1 N
mat  M AE1 T
two  T UW1
to  T UW1   # homophones
too  T UW1
boss  B AO1 S
"""
TEXTS = ["The cat sat on the mat.", "Two cats sat", "to the cat", "to the boss's mat"]


@pytest.fixture
def lexicon(tmp_path):
    path = tmp_path / "lexicon.dict"
    path.write_text(LEXICON)
    return path


def test_read_lexicon_and_possessives(lexicon, tmp_path):
    lex = read_lexicon(lexicon)
    assert lex["the"] == [("dh", "ah"), ("dh", "iy")] and lex["cat"] == [("k", "ae", "t")]
    assert pronunciations("cat's", lex) == [("k", "ae", "t", "s")]  # after a voiceless consonant
    assert pronunciations("boss's", lex) == [("b", "ao", "s", "ih", "z")]  # after a sibilant
    assert pronunciations("two's", lex) == [("t", "uw", "z")] and pronunciations("dog", lex) == []
    bad = tmp_path / "bad.dict"
    bad.write_text("cat K AE1 T\ndog\n")
    with pytest.raises(LexiconError, match=r"bad.dict:2: expected a word and its phones"):
        read_lexicon(bad)
    bad.write_text("cat K AE1 T-\n")
    with pytest.raises(LexiconError, match=r"bad.dict:1: a phone must be letters"):
        read_lexicon(bad)


def test_phone_tokenizer(lexicon, tmp_path):
    tok, unknown = train_phone_tokenizer(TEXTS + ["the dog sat", "a dog"], tmp_path / "tok", lexicon)
    assert dict(unknown) == {"dog": 2, "a": 1}
    pieces = tok.pieces(range(tok.vocab_size))
    assert pieces[:6] == ["<blank>", "<unk>", "<sos>", "<eos>", "<mask>", "▁"]
    # the lexicon's phones, and those a possessive's ending adds ("ih z")
    assert pieces[6:] == sorted({"dh", "ah", "iy", "k", "ae", "t", "s", "aa", "n", "m", "uw", "b", "ao", "ih", "z"})
    ids = tok.encode("The cat's mat!")
    assert tok.pieces(ids) == ["▁", "dh", "ah", "▁", "k", "ae", "t", "s", "▁", "m", "ae", "t"]
    assert tok.decode([SOS, *ids, EOS]) == "the cats mat"  # "cat's" sounds as "cats", the lexicon's word
    assert tok.encode("the dog") == tok.encode("the")[:3] + [tok.word_start, UNK]
    # homophones decode to the one the training texts use most ("to" twice, "two" once, "too" never)
    assert tok.decode(tok.encode("too")) == "to"
    # a phone sequence that is no word: in capitals for scoring (an error), the word fewest phone edits away for
    # people (one edit: "cat"; two: "cats")
    k, ae, t = tok.encode("cat")[1:4]
    s, m = tok.encode("cats")[4], tok.encode("mat")[1]
    assert tok.decode([tok.word_start, k, ae, tok.word_start, k, ae, k]) == "KAE KAEK"
    ids = [tok.word_start, k, ae, tok.word_start, k, ae, k, tok.word_start, k, ae, t, s, s, tok.word_start, k, ae, t]
    assert tok.transcript(ids) == "cat cat cats cat"
    # among words equally near, the one the training texts use most ("mat" twice, "cat" twice but later, "sat" 3 times)
    assert tok.transcript([tok.word_start, m, ae, t, t]) == "mat"
    assert tok.transcript([tok.word_start, s, ae, t, s, s]) == "sat"
    # the same tokenizer from its directory and from a package's bytes
    for again in (load_tokenizer(tmp_path / "tok"), tokenizer_from_bytes(tok.model_bytes, tok.meta())):
        assert again.model_type == "phone" and again.encode("two cats") == tok.encode("two cats")
        assert again.decode(tok.encode("two cats")) == "to cats"


def test_nearest_word_is_the_brute_force_nearest(lexicon, tmp_path):
    """Fewest edits, then the preferred word, over every pronunciation: as a plain dynamic program finds it."""
    import random

    tok, _ = train_phone_tokenizer(TEXTS, tmp_path / "tok", lexicon)

    def distance(a, b):
        row = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            prev, row[0] = row[0], i
            for j, y in enumerate(b, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
        return row[-1]

    prons = list(tok.word_of)  # in order of preference
    phones = sorted({ph for p in prons for ph in p} | {"zh"})  # "zh": a phone no word has
    rng = random.Random(0)
    for _ in range(200):
        query = tuple(rng.choice(phones) for _ in range(rng.randint(1, 9)))
        best = min(range(len(prons)), key=lambda r: (distance(query, prons[r]), r))
        assert tok.nearest_word(query) == tok.word_of[prons[best]], query


def test_training_leaves_out_unpronounceable_utterances(lexicon, tmp_path):
    from asr_transformer.config import DataConfig, FeatureConfig
    from asr_transformer.data.loader import filter_utterances
    from asr_transformer.data.manifest import Utterance

    tok, _ = train_phone_tokenizer(TEXTS, tmp_path / "tok", lexicon)
    utts = [Utterance(id=f"u{i}", audio="x.wav", duration=2.0, text=t) for i, t in enumerate(["the cat", "the dog"])]
    kept, ids, counts = filter_utterances(utts, tok, DataConfig(), FeatureConfig(), 4)
    assert [u.id for u in kept] == ["u0"] and ids == [tok.encode("the cat")]
    assert counts.unpronounceable == 1 and "1 with a word outside the lexicon" in counts.summary()


def _word_lm(tmp_path, sentences):
    """A word bigram LM over `sentences`, written and read back as `asr lm --words` does."""
    words = sorted({w for s in sentences for w in s.split()})
    ids = {w: 5 + i for i, w in enumerate(words)}
    lm = train_ngram([[ids[w] for w in s.split()] for s in sentences], 5 + len(words), order=2)
    lm.write_arpa(tmp_path / "words.arpa", ["<blank>", "<unk>", "<s>", "</s>", "<mask>", *words])
    return NgramLM.read_arpa(tmp_path / "words.arpa", None)


def test_lexicon_lm_spells_only_words_and_scores_them_where_they_end(lexicon, tmp_path):
    """Within a word only phones that continue a pronunciation of an LM word are allowed; ▁ and <eos> only where
    one ends, gaining γ·log p_word of the likeliest word with that pronunciation given the words before."""
    from asr_transformer.decode.lexicon_lm import LexiconLM

    tok, _ = train_phone_tokenizer(TEXTS, tmp_path / "tok", lexicon)
    word_lm = _word_lm(tmp_path, ["the cat sat", "to the cat", "to the dog", "two cats", "the mat", "too"])
    lm = LexiconLM(tok, word_lm, 0.5)
    assert lm.words == 8  # the LM's words with a pronunciation: not "dog"
    p_word = lambda h, w: word_lm.distribution(h)[w].item()  # noqa: E731
    W = word_lm.words
    SP, DH, AH, K, AE, T, S, UW = tok.encode("the")[:3] + tok.encode("cats")[1:] + tok.encode("to")[2:]

    first = lm.next_log_probs([[SOS]])[0]
    assert np.flatnonzero(np.isfinite(first)).tolist() == [SP]  # every hypothesis starts with ▁
    start = lm.next_log_probs([[SOS, SP]])[0]
    allowed = {i for i in np.flatnonzero(np.isfinite(start)).tolist()}
    assert allowed == {DH, K, S, T, tok.encode("mat")[1]}  # the words' first phones
    assert (start[list(allowed)] == 0).all()
    # "▁ dh ah": "the" ends here; "▁ dh" alone is no word, "▁ dh ah dh" leaves the lexicon
    the = lm.next_log_probs([[SOS, SP, DH, AH]])[0]
    assert the[SP].item() == pytest.approx(0.5 * p_word([SOS], W["the"]), abs=1e-5)
    assert the[EOS].item() == pytest.approx(0.5 * (p_word([SOS], W["the"]) + p_word([SOS, W["the"]], EOS)), abs=1e-5)
    assert np.isinf(lm.next_log_probs([[SOS, SP, DH]])[0, SP])
    assert np.isinf(lm.next_log_probs([[SOS, SP, DH, AH, DH]])[0, :EOS]).all()
    # homophones: after <s>, "t uw" is "to", the likeliest there of "to", "two" and "too"
    after_sos = lm.next_log_probs([[SOS, SP, T, UW]])[0, SP].item()
    best = max(p_word([SOS], W[w]) for w in ("to", "two", "too"))
    assert after_sos == pytest.approx(0.5 * best, abs=1e-5)
    assert lm.transcript([SP, T, UW, SP, DH, AH, SP, K, AE, T]) == "to the cat"
    # <eos> where no word ends is a last resort, and phones that spell no word are written as the tokenizer does
    for prefix in ([SOS, SP, DH], [SOS, SP, DH, AH, DH]):
        assert lm.next_log_probs([prefix])[0, EOS].item() == -1e4
    for prefix in ([SOS], [SOS, SP], [SOS, SP, DH, AH, SP]):  # no word begun: never an end
        assert lm.next_log_probs([prefix])[0, EOS].item() == float("-inf")
    assert lm.transcript([SP, DH, AH, SP, DH, AH, DH]) == "the the"  # "dh ah dh": the nearest word, "the"
    # the steps add up to the sentence score, <eos> included
    sentence = [SP, DH, AH, SP, K, AE, T, SP, S, AE, T]
    prefix, steps = [SOS], 0.0
    for t in sentence + [EOS]:
        steps += lm.next_log_probs([prefix])[0, t].item()
        prefix.append(t)
    assert lm.sentence_log_prob(sentence) == pytest.approx(steps, abs=1e-4)
    assert steps == pytest.approx(0.5 * word_lm.sentence_log_prob([W["the"], W["cat"], W["sat"]]), abs=1e-4)


def test_asr_tokenizer_phone_train_and_decode_to_words(lexicon, tmp_path):
    """From the command line: a phone tokenizer (naming the words it cannot pronounce), a model trained on it, and
    joint decoding with a word LM whose every hypothesis is words of that LM."""
    from asr_transformer.data.manifest import Utterance, write_manifest

    runner = CliRunner()
    utts = []
    for i, text in enumerate(TEXTS * 2 + ["the dog sat"]):
        t = np.arange(int(16000 * 1.0)) / 16000
        sf.write(tmp_path / f"u{i}.wav", (0.3 * np.sin(2 * np.pi * (150 + 40 * i) * t)).astype(np.float32), 16000)
        utts.append(Utterance(id=f"u{i}", audio=str(tmp_path / f"u{i}.wav"), duration=1.0, text=text))
    data = tmp_path / "data"
    write_manifest(data / "train.jsonl", utts)
    write_manifest(data / "dev.jsonl", utts[:3])
    run = runner.invoke(app, ["tokenizer", str(data / "train.jsonl"), "--out", str(data / "tokenizer"),
                              "--model-type", "phone", "--lexicon", str(lexicon)])
    assert run.exit_code == 0, run.output
    assert "1 words of the transcripts (1 in all) have no pronunciation" in run.output and "dog" in run.output
    run = runner.invoke(app, ["tokenizer", str(data / "train.jsonl"), "--out", str(tmp_path / "t2"), "--model-type",
                              "phone"])
    assert run.exit_code != 0 and "--lexicon" in run.output
    exp = tmp_path / "exp"
    run = runner.invoke(app, ["train", "--data", str(data), "--exp", str(exp), "--threads", "1", "--device", "cpu",
                              "--set", "model.preset=tiny", "--set", "train.max_epochs=1"])
    assert run.exit_code == 0, run.output
    assert "1 with a word outside the lexicon" in run.output
    assert runner.invoke(app, ["average", str(exp), "--out", str(exp / "model.pt"), "--last", "1"]).exit_code == 0
    _word_lm(tmp_path, ["the cat sat on the mat", "two cats"])
    out = tmp_path / "dec"
    run = runner.invoke(app, ["decode", str(exp / "model.pt"), str(data / "dev.jsonl"), "--mode", "joint,ctc",
                              "--beam", "3", "--word-lm", str(tmp_path / "words.arpa"), "--threads", "1",
                              "--device", "cpu", "--out", str(out)])
    assert run.exit_code == 0, run.output
    vocabulary = {"the", "cat", "sat", "on", "mat", "two", "cats"}
    hyps = [json.loads(line) for line in (out / "joint" / "hyp.jsonl").read_text().splitlines()]
    ended = [h for h in hyps if h["score"] > -1e4]  # the others were cut short by the length limit, mid-word
    assert len(hyps) == 3 and ended and all(h["text"] and set(h["text"].split()) <= vocabulary for h in ended)
    assert json.loads((out / "ctc" / "result.json").read_text())["num_utterances"] == 3
    # `asr transcribe` takes the same path: speech-like bursts (a steady tone is silence to its segmenter)
    t = np.arange(16000 * 2) / 16000
    burst = 0.3 * np.sin(2 * np.pi * 180 * t) * (np.sin(2 * np.pi * 3 * t) > 0) * (t > 0.4) * (t < 1.6)
    sf.write(tmp_path / "talk.wav", burst.astype(np.float32), 16000)
    run = runner.invoke(app, ["transcribe", str(tmp_path / "talk.wav"), "--model", str(exp / "model.pt"), "--beam", "3",
                              "--word-lm", str(tmp_path / "words.arpa"), "--threads", "1", "--device", "cpu",
                              "--vad", "energy"])  # bursts of a tone: speech to levels, not to Silero
    assert run.exit_code == 0, run.output
    words = run.output.split()
    lexicon_words = {line.split()[0].split("(")[0] for line in LEXICON.splitlines()[1:]}
    assert words and set(words) <= lexicon_words  # words only, also where a search was cut short mid-word
