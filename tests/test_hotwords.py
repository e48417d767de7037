"""Hotwords: the context graph's scores (brute force), the list formats, spelling phrases in a model's units, and
biasing in every search that keeps alternatives (planted word, distractors, batched = one at a time)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from asr_transformer.decode.context import ContextGraph
from asr_transformer.decode.ctc_prefix import ctc_prefix_beam_search
from asr_transformer.decode.hotwords import HotwordError, context_graph, parse_option, read_hotwords, spellings


def occurrences_bonus(phrases: dict[tuple, float], y: list[int]) -> float:
    """Σ over every phrase occurrence in y (overlapping ones too) of score · length."""
    return sum(s * len(p) * sum(tuple(y[i:i + len(p)]) == p for i in range(len(y) - len(p) + 1))
               for p, s in phrases.items())


def test_a_hypothesis_earns_exactly_the_phrases_it_contains():
    """Brute force over random graphs and sequences: the bonuses of the steps and of the end add up to the bonus
    of the phrases the sequence contains, whatever it started and left."""
    rng = random.Random(0)
    for _ in range(400):
        vocab = rng.randint(2, 6)
        phrases: dict[tuple, float] = {}
        for _ in range(rng.randint(1, 5)):
            p = tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 4)))
            phrases[p] = max(phrases.get(p, 0.0), rng.choice([0.5, 1.0, 2.0, 3.5]))
        graph = ContextGraph([(list(p), s) for p, s in phrases.items()], vocab)
        y = [rng.randrange(vocab) for _ in range(rng.randint(0, 12))]
        assert graph.score(y) == pytest.approx(occurrences_bonus(phrases, y), abs=1e-4)


def test_a_partial_match_is_paid_while_it_runs_and_given_back_when_it_fails():
    graph = ContextGraph([([1, 2, 3], 2.0)], vocab_size=10)
    state, bonuses = graph.start(1), []
    for token in (1, 2, 9):
        state, bonus = graph.step(state, np.array([[token]]))
        state, bonuses = state[:, 0], bonuses + [bonus.item()]
    assert bonuses == [2.0, 2.0, -4.0]  # the failed start earns nothing
    state = graph.step(graph.start(1), np.array([[1]]))[0][:, 0]
    assert graph.finish(state).item() == -2.0  # ended inside the phrase: its part back
    assert graph.score([1, 2, 3]) == 6.0 and graph.score([1, 2]) == 0.0 and graph.score([7, 1, 2, 3, 1]) == 6.0


def test_batched_steps_equal_one_at_a_time_in_numpy_and_torch():
    graph = ContextGraph([([1, 2], 1.0), ([2, 3, 4], 1.5), ([4], 0.5)], vocab_size=6)
    states = np.array([0, 1, 2, 3, 4])
    tokens = np.array([[0, 1, 2, 3, 4, 5]] * 5)
    nxt, bonus = graph.step(states, tokens)
    for i in range(5):
        n1, b1 = graph.step(states[i:i + 1], tokens[i:i + 1])
        assert np.array_equal(n1[0], nxt[i]) and np.array_equal(b1[0], bonus[i])
    t_nxt, t_bonus = graph.step(torch.from_numpy(states), torch.from_numpy(tokens))  # the tables copied to torch
    assert isinstance(t_nxt, torch.Tensor) and np.array_equal(t_nxt.numpy(), nxt)
    assert np.array_equal(t_bonus.numpy(), bonus) and np.array_equal(graph.finish(torch.from_numpy(states)).numpy(),
                                                                     graph.finish(states))


def test_list_formats_and_their_errors(tmp_path):
    path = tmp_path / "hot.txt"
    path.write_text("Kathleen\t3\n\n# names\nSaint Petersburg\n")
    assert read_hotwords(path) == ["Kathleen\t3", "Saint Petersburg"]
    path.write_text("ok\nbad\tthree\n")
    with pytest.raises(HotwordError, match=r"hot\.txt:2: score 'three' is not a number"):
        read_hotwords(path)
    path.write_text("neg\t-1\n")
    with pytest.raises(HotwordError, match=r"hot\.txt:1: score -1 must be"):
        read_hotwords(path)
    with pytest.raises(HotwordError, match="absent.txt"):
        read_hotwords(tmp_path / "absent.txt")
    assert parse_option("new york:2.5") == "new york\t2.5"
    assert parse_option("Kathleen") == "Kathleen"
    assert parse_option("at 10:30 am") == "at 10:30 am"  # not a score: part of the phrase
    with pytest.raises(HotwordError, match="empty phrase"):
        parse_option(":3")


def test_phrases_are_spelled_in_the_models_units(tiny_package, tmp_path):
    from asr_transformer.data.phones import train_phone_tokenizer
    from asr_transformer.data.tokenizer import load_tokenizer

    chars = load_tokenizer(tiny_package / "tok")
    assert spellings(chars, "One, TWO!") == [chars.encode("one two")]
    with pytest.raises(HotwordError, match="characters this model cannot write"):
        spellings(chars, "quiz")
    lexicon = tmp_path / "lexicon.dict"
    lexicon.write_text("the  DH AH0\nthe(2)  DH IY0\ncat  K AE1 T\n")
    phones, _ = train_phone_tokenizer(["the cat"], tmp_path / "ptok", lexicon)
    both = spellings(phones, "the cat")
    assert len(both) == 2 and phones.encode("the cat") in both  # both pronunciations of "the"
    with pytest.raises(HotwordError, match="no pronunciation of 'dog'"):
        spellings(phones, "the dog")
    graph = context_graph(chars, ["one\t3", "two"], default_score=1.0)
    assert graph.score(chars.encode("one")) == pytest.approx(3.0 * len(chars.encode("one")))
    assert context_graph(chars, [], 1.0) is None


def _ctc(frames: list[dict[int, float]], vocab: int = 8) -> torch.Tensor:
    """Per frame {token: probability} (the rest of the mass on blank) → log-probs (1, T, V)."""
    x = torch.full((len(frames), vocab), 1e-4)
    for t, probs in enumerate(frames):
        for token, p in probs.items():
            x[t, token] = p
        x[t, 0] = max(1e-4, 1 - sum(probs.values()))
    return (x / x.sum(-1, keepdim=True)).log().unsqueeze(0)


def test_a_listed_word_the_model_nearly_missed_is_recognized():
    """CTC prefers 5 6 over 5 7; listing 5 7 turns it around; a list of distractors alone changes nothing."""
    log_probs = _ctc([{5: 0.9}, {6: 0.55, 7: 0.4}, {}])
    lengths = torch.tensor([3])
    assert ctc_prefix_beam_search(log_probs, lengths, 4)[0][0].tokens == [5, 6]
    listed = ContextGraph([([5, 7], 1.0)], 8)
    best = ctc_prefix_beam_search(log_probs, lengths, 4, context=listed)[0][0]
    assert best.tokens == [5, 7] and best.parts["context"] == pytest.approx(2.0)
    distractors = ContextGraph([([3, 4], 1.0), ([4, 3, 2], 1.0), ([2], 1.0)], 8)
    assert ctc_prefix_beam_search(log_probs, lengths, 4, context=distractors)[0][0].tokens == [5, 6]


def test_every_biased_search_batched_equals_one_at_a_time(tiny_package):
    """beam, joint, ctc_beam and rescore with hotwords: a batch of utterances of different lengths gives each the
    hypotheses it gets alone."""
    from asr_transformer.config import DecodeConfig
    from asr_transformer.decode.search import recognize
    from asr_transformer.inference.recognizer import Recognizer

    rec = Recognizer(tiny_package / "model.pt", device="cpu", threads=1, hotwords=["one two\t1.5", "six"])
    g = torch.Generator().manual_seed(0)
    feats = [torch.randn(n, 80, generator=g) for n in (90, 61, 120)]
    padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    lens = torch.tensor([f.size(0) for f in feats])
    for mode in ("beam", "joint", "ctc_beam", "rescore"):
        opts = DecodeConfig(mode=mode, beam=4, nbest=2)
        batch = recognize(rec.model, padded, lens, opts, context=rec.context)
        for i, f in enumerate(feats):
            alone = recognize(rec.model, f.unsqueeze(0), lens[i:i + 1], opts, context=rec.context)[0]
            assert [h.tokens for h in batch[i]] == [h.tokens for h in alone], mode
            assert [h.score for h in batch[i]] == pytest.approx([h.score for h in alone], abs=1e-3), mode


def test_hotwords_steer_every_biased_search_and_greedy_says_it_cannot(tiny_package):
    """A random model writes a listed phrase when its bonus is large, in every mode that can be biased; a greedy
    mode with hotwords is said once as a warning."""
    import numpy as np

    from asr_transformer.inference.recognizer import HotwordWarning, Recognizer

    wave = np.random.default_rng(0).standard_normal(12000).astype(np.float32) * 0.1
    for mode in ("beam", "joint", "ctc_beam", "rescore"):
        plain = Recognizer(tiny_package / "model.pt", threads=1, mode=mode, beam=4)
        biased = plain.with_hotwords(["one two\t6"])
        assert "one two" not in plain.recognize_arrays([wave])[0]
        assert "one two" in biased.recognize_arrays([wave])[0], mode
        assert plain.context is None and biased.model is plain.model
    with pytest.warns(HotwordWarning, match="do not bias greedy"):
        Recognizer(tiny_package / "model.pt", threads=1, mode="greedy", hotwords=["one"])


def test_command_line_options_and_a_packages_list(tiny_package, tmp_path):
    """--hotwords FILE and --hotword in asr transcribe, asr decode and asr package (which stores the list as the
    package's default); a bad line or a phrase the model cannot write is one line naming it."""
    import json

    import numpy as np
    import soundfile as sf
    from typer.testing import CliRunner

    from asr_transformer.cli import app
    from asr_transformer.package import read_package

    def asr(*args):
        return CliRunner().invoke(app, [str(a) for a in args])

    wave = np.random.default_rng(0).standard_normal(12000).astype(np.float32) * 0.1
    sf.write(tmp_path / "a.wav", wave, 16000)
    common = ["--model", tiny_package / "model.pt", "--threads", "1", "--mode", "ctc_beam"]
    plain = asr("transcribe", tmp_path / "a.wav", *common)
    (tmp_path / "hot.txt").write_text("one two\t6\n")
    from_file = asr("transcribe", tmp_path / "a.wav", *common, "--hotwords", tmp_path / "hot.txt")
    from_option = asr("transcribe", tmp_path / "a.wav", *common, "--hotword", "one two:6")
    assert plain.exit_code == from_file.exit_code == from_option.exit_code == 0
    assert "one two" not in plain.stdout and "one two" in from_file.stdout and from_file.stdout == from_option.stdout
    (tmp_path / "bad.txt").write_text("fine\none\tlots\n")
    bad = asr("transcribe", tmp_path / "a.wav", *common, "--hotwords", tmp_path / "bad.txt")
    assert bad.exit_code == 1 and "bad.txt:2: score 'lots' is not a number" in bad.output
    unwritable = asr("transcribe", tmp_path / "a.wav", *common, "--hotword", "quiz")
    assert unwritable.exit_code == 1 and "'quiz': has characters this model cannot write" in unwritable.output
    stored = asr("package", tiny_package / "model.pt", "--out", tmp_path / "hot.pt", "--mode", "ctc_beam",
                 "--hotwords", tmp_path / "hot.txt", "--hotword", "six")
    assert stored.exit_code == 0, stored.output
    assert read_package(tmp_path / "hot.pt")["config"]["decode"]["hotwords"] == ["one two\t6", "six"]
    decoded = asr("decode", tmp_path / "hot.pt", tiny_package / "test.jsonl", "--out", tmp_path / "dec",
                  "--threads", "1", "--no-score")
    assert decoded.exit_code == 0, decoded.output
    texts = [json.loads(line)["text"] for line in (tmp_path / "dec/hyp.jsonl").read_text().splitlines()]
    assert any("one two" in t for t in texts)
    refused = asr("package", tiny_package / "model.pt", "--out", tmp_path / "no.pt", "--hotword", "quiz")
    assert refused.exit_code == 1 and "quiz" in refused.output and not (tmp_path / "no.pt").exists()
