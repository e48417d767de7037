"""The token n-gram LM: Kneser-Ney by hand, normalisation, the numpy training against the dict implementation
it replaced and the definition, ARPA round trip and errors, shallow fusion in beam, joint and rescore, `asr lm`
and `asr decode --lm` end to end."""

import math
import random

import numpy as np
import pytest
import torch

from asr_transformer.decode.ngram import NgramError, NgramLM, train_ngram
from asr_transformer.tokens import BLANK, EOS, MASK, SOS, UNK
from tests.test_decode import make_batch, make_model, opts, tokens_of

V = 8
PIECES = ["<blank>", "<unk>", "<sos>", "<eos>", "<mask>", "▁a", "▁b", "c"]
A, B, C = 5, 6, 7


def test_kneser_ney_by_hand():
    """Bigram KN on "a b", "a c", "b c", worked out on paper (outcomes: <unk>, <eos>, a, b, c).
    Unigrams use continuation counts a:1 b:2 c:2 </s>:2 (sum 7, 4 types; n1=1, n2=3 → D=1/7), so
    p(a) = (1 − 1/7)/7 + (1/7·4/7)·1/5 = 34/245 and p(b) = p(c) = p(</s>) = 69/245, p(<unk>) = 4/245.
    Bigram raw counts 2,1,1,1,2,1,1 (n1=5, n2=2 → D=5/9); after "a": b 1, c 1, so
    p(b | a) = (1 − 5/9)/2 + (5/9·2/2)·69/245 = 835/2205 and p(<unk> | a) = 5/9·4/245 = 20/2205."""
    lm = train_ngram([[A, B], [A, C], [B, C]], V, order=2)
    uni = np.exp(lm.distribution([]))
    assert uni[A].item() == pytest.approx(34 / 245, rel=1e-6)
    for t in (B, C, EOS):
        assert uni[t].item() == pytest.approx(69 / 245, rel=1e-6)
    assert uni[UNK].item() == pytest.approx(4 / 245, rel=1e-6)
    after_a = np.exp(lm.distribution([SOS, A]))
    assert after_a[B].item() == pytest.approx(835 / 2205, rel=1e-6)
    assert after_a[UNK].item() == pytest.approx(20 / 2205, rel=1e-6)
    # a sentence's probability chains the conditionals, <eos> included
    expected = sum(lm.distribution(h)[t].item() for h, t in [([SOS], A), ([SOS, A], B), ([SOS, A, B], EOS)])
    assert lm.sentence_log_prob([A, B]) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_history_is_a_distribution(order):
    rng = random.Random(order)
    sentences = [[rng.choice([A, B, C]) for _ in range(rng.randint(1, 6))] for _ in range(40)]
    lm = train_ngram(sentences, V, order)
    for history in ([SOS], [SOS, A], [SOS, A, B], [SOS, C, C, C], [SOS, B, A, C, A], [SOS, UNK, EOS]):
        p = np.exp(lm.distribution(history))
        assert p.sum().item() == pytest.approx(1.0, abs=1e-5)
        assert p[[BLANK, SOS, MASK]].sum().item() == 0.0  # never an outcome
        assert (p[[UNK, EOS, A, B, C]] > 0).all()  # smoothing leaves nothing impossible


# ----------------------------------------------------------------- training: numpy against references


def _reference_train(sentences, vocab_size, order):
    """Interpolated Kneser-Ney n-gram by n-gram over dicts: `train_ngram` as it was before numpy, kept to check
    that the vectorised estimator gives the same numbers (and the same ARPA text)."""
    from collections import defaultdict

    from asr_transformer.decode.ngram import NOT_PREDICTED, _log_prob

    counts = [defaultdict(int) for _ in range(order + 1)]  # counts[n][gram]
    for sentence in sentences:
        seq = [SOS, *sentence, EOS]
        for i in range(1, len(seq)):
            for n in range(1, min(order, i + 1) + 1):
                counts[n][tuple(seq[i - n + 1:i + 1])] += 1
    adjusted = [{} for _ in range(order + 1)]  # raw at the top order and after <s>, else left neighbours
    adjusted[order] = dict(counts[order])
    for n in range(order - 1, 0, -1):
        left = defaultdict(int)
        for gram in counts[n + 1]:
            left[gram[1:]] += 1
        adjusted[n] = {g: (c if g[0] == SOS else left[g]) for g, c in counts[n].items()}
    outcomes = [i for i in range(vocab_size) if i not in NOT_PREDICTED]
    uniform = math.log(1.0 / len(outcomes))
    prob, backoff = {}, {}
    for n in range(1, order + 1):
        by_history = defaultdict(dict)
        for gram, a in adjusted[n].items():
            by_history[gram[:-1]][gram[-1]] = a
        n1 = sum(1 for a in adjusted[n].values() if a == 1)
        n2 = sum(1 for a in adjusted[n].values() if a == 2)
        discount = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5
        prob[n] = {}
        for h, followers in by_history.items():
            total = sum(followers.values())
            gamma = discount * len(followers) / total
            below = {w: math.exp(_log_prob(prob, backoff, h[1:], w) if n > 1 else uniform)
                     for w in (outcomes if n == 1 else followers)}
            prob[n][h] = {w: math.log(max(followers.get(w, 0) - discount, 0.0) / total + gamma * b)
                          for w, b in below.items()}
            if n > 1:
                backoff[h] = math.log(gamma)
    return NgramLM(order, vocab_size, prob, backoff)


def _reference_arpa(lm, pieces):
    """ARPA text line by line with Python's formatting: the writer as it was before the bulk one."""
    word = lambda i: {UNK: "<unk>", SOS: "<s>", EOS: "</s>"}.get(i) or pieces[i]  # noqa: E731
    entries = {n: sorted((h + (w,), lp) for h, ws in lm.prob[n].items() for w, lp in ws.items())
               for n in range(1, lm.order + 1)}
    if lm.order > 1 and (SOS,) in lm.backoff:
        entries[1] = sorted(entries[1] + [((SOS,), -99.0 * math.log(10))])
    lines = ["\\data\\"] + [f"ngram {n}={len(entries[n])}" for n in entries]
    for n in entries:
        lines += ["", f"\\{n}-grams:"]
        for gram, lp in entries[n]:
            line = f"{lp / math.log(10):.6f}\t{' '.join(word(i) for i in gram)}"
            if n < lm.order and gram in lm.backoff:
                line += f"\t{lm.backoff[gram] / math.log(10):.6f}"
            lines.append(line)
    return "\n".join(lines + ["", "\\end\\", ""])


def _by_definition(sentences, vocab_size, order):
    """p(w | h) straight from the module docstring's formula (interpolated Kneser-Ney, one discount per order),
    every count recounted from the sentences; h of at most order − 1 ids."""
    from collections import Counter
    from functools import cache

    from asr_transformer.decode.ngram import NOT_PREDICTED

    seqs = [[SOS, *s, EOS] for s in sentences]
    raw = Counter(tuple(s[i - n + 1:i + 1]) for s in seqs for i in range(1, len(s))
                  for n in range(1, min(order, i + 1) + 1))
    adjusted = {g: c if len(g) == order or g[0] == SOS else len({x for x in raw if x[1:] == g})
                for g, c in raw.items()}
    discount = {}
    for n in range(1, order + 1):
        values = [a for g, a in adjusted.items() if len(g) == n]
        n1, n2 = values.count(1), values.count(2)
        discount[n] = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5
    outcomes = [i for i in range(vocab_size) if i not in NOT_PREDICTED]

    @cache
    def p(h, w):
        below = p(h[1:], w) if h else 1 / len(outcomes)
        followers = {g[-1]: a for g, a in adjusted.items() if g[:-1] == h}
        if not followers:  # h never seen: the shorter history's p
            return below
        total, d = sum(followers.values()), discount[len(h) + 1]
        return max(followers.get(w, 0) - d, 0) / total + d * len(followers) / total * below

    return p, outcomes, {g[:-1] for g in raw}


CORPORA = {
    "random": [[random.Random(i).choice([UNK, A, B, C, 8, 9]) for _ in range(i % 7)] for i in range(40)],
    "tiny vocabulary": [[A], [A, A], [], [UNK, A]],
    "shorter than the order": [[A], [B], [A, B]],
    "repeated sentences": [[A, B, C]] * 4 + [[C, B]] * 2,
    "<unk>": [[UNK, UNK, A], [A, UNK], [UNK]],
    "one word": [[A]],
}


@pytest.mark.parametrize("corpus", list(CORPORA))
@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_numpy_training_equals_the_references(order, corpus, tmp_path, monkeypatch):
    """train_tables (numpy) against the dict implementation it replaced: the same ARPA text, written a few lines
    at a time, and every log p and back-off to float rounding; and against Kneser-Ney recomputed from its
    definition, p(w | h) by ARPA's back-off rule for every seen history (and some unseen) and outcome."""
    import asr_transformer.decode.ngram as ngram

    monkeypatch.setattr(ngram, "SLICE", 3)
    sentences = CORPORA[corpus]
    vocab = 6 if corpus == "tiny vocabulary" else 10
    pieces = ["<blank>", "<unk>", "<sos>", "<eos>", "<mask>", "▁a", "b", "▁" + "c" * 30, "é", "▁d"][:vocab]
    tables = ngram.train_tables(sentences, vocab, order)
    reference = _reference_train(sentences, vocab, order)
    tables.write_arpa(tmp_path / "lm.arpa", pieces)
    assert (tmp_path / "lm.arpa").read_text(encoding="utf-8") == _reference_arpa(reference, pieces)
    assert tables.ngram_counts() == reference.ngram_counts()
    lm = train_ngram(sentences, vocab, order)
    assert lm.backoff.keys() == reference.backoff.keys()
    assert list(lm.backoff.values()) == pytest.approx([reference.backoff[h] for h in lm.backoff], rel=1e-12)
    for n in range(1, order + 1):
        got = {h + (w,): lp for h, ws in lm.prob[n].items() for w, lp in ws.items()}
        want = {h + (w,): lp for h, ws in reference.prob[n].items() for w, lp in ws.items()}
        assert got.keys() == want.keys()
        assert [got[g] for g in want] == pytest.approx(list(want.values()), rel=1e-12)

    p, outcomes, histories = _by_definition(sentences, vocab, order)
    from asr_transformer.decode.ngram import _log_prob  # ARPA's rule on h as given (no shortening)

    unseen = {(SOS,), (A,), (SOS, B, A)[:order - 1], (C, C)[:order - 1]}  # shortened to at most order − 1
    histories = {h for h in histories | unseen if len(h) < order} | {()}
    for h in histories:
        for w in outcomes:
            assert math.exp(_log_prob(lm.prob, lm.backoff, h, w)) == pytest.approx(p(h, w), rel=1e-9), (h, w)


def test_training_rejects_ids_it_cannot_list():
    for bad in ([[A, SOS, B]], [[A, V]], [[-1]]):
        with pytest.raises(ValueError, match="ids outside"):
            train_ngram(bad, V, 2)
    with pytest.raises(ValueError, match="no sentences"):
        train_ngram([], V, 2)
    with pytest.raises(ValueError, match="order"):
        train_ngram([[A]], V, 0)


def test_arpa_numbers_are_formatted_as_python_formats_them():
    """The bulk formatting of log10 values gives f"{v:.6f}" exactly: near halves of 10⁻⁶ (which Python rounds
    from the exact binary value), exact halves, −0, values that round to ±0, large and infinite ones."""
    from asr_transformer.decode.ngram import _decimals

    rng = np.random.default_rng(0)
    values = np.concatenate([
        -rng.uniform(0, 100, 20000), -rng.exponential(1e-6, 2000), rng.uniform(-1e7, 1e7, 2000),
        rng.integers(-10 ** 7, 10 ** 7, 20000) / 1e6 + 5e-7,  # all near a half
        [0.0, -0.0, -1e-9, 1e-9, 1 / 128, -1 / 128, 5e-7, -5e-7, 99.9999995, 999999.9999995, -99.0, 1e6, -1e15,
         1e300, -math.inf, math.inf]])
    matrix = _decimals(values)
    got = [bytes(row[row != 0]).decode() for row in matrix]
    assert got == [f"{v:.6f}" for v in values.tolist()]
    assert _decimals(np.zeros(0)).shape[0] == 0


def test_an_arpa_read_is_written_back_as_the_reference_writer_writes_it(tmp_path):
    """NgramLM.write_arpa of an LM read from elsewhere (back-offs on some lines only, <s> at -99) writes what the
    line-by-line writer wrote."""
    path = tmp_path / "kenlm.arpa"
    path.write_text(KENLM_STYLE)
    lm = NgramLM.read_arpa(path, None)
    names = [""] * lm.vocab_size
    for w, i in lm.words.items():
        names[i] = w
    lm.write_arpa(tmp_path / "back.arpa", names)
    assert (tmp_path / "back.arpa").read_text() == _reference_arpa(lm, names)


def test_arpa_round_trip_and_errors(tmp_path):
    rng = random.Random(0)
    lm = train_ngram([[rng.choice([A, B, C]) for _ in range(rng.randint(1, 5))] for _ in range(30)], V, 3)
    path = tmp_path / "lm.arpa"
    lm.write_arpa(path, PIECES)
    text = path.read_text()
    assert text.startswith("\\data\\\nngram 1=") and "\\3-grams:" in text and text.rstrip().endswith("\\end\\")
    assert "▁a" in text and "<s>" in text and "</s>" in text
    back = NgramLM.read_arpa(path, PIECES)
    assert back.order == 3
    for history in ([SOS], [SOS, A], [SOS, B, C], [SOS, C, A, A]):
        torch.testing.assert_close(back.distribution(history), lm.distribution(history), atol=1e-4, rtol=0)
    batch = [[SOS, A, B], [SOS, C, C]]
    np.testing.assert_array_equal(back.next_log_probs(batch), np.stack([back.distribution(r) for r in batch]))

    foreign = path.read_text().replace("▁a", "▁zz", 1)
    bad = tmp_path / "foreign.arpa"
    bad.write_text(foreign)
    line = next(i for i, l in enumerate(foreign.splitlines(), 1) if "▁zz" in l)
    with pytest.raises(NgramError, match=rf"foreign.arpa:{line}: word '▁zz' is not a piece"):
        NgramLM.read_arpa(bad, PIECES)
    bad.write_text("hello\n")
    with pytest.raises(NgramError, match="expected"):
        NgramLM.read_arpa(bad, PIECES)


def test_shallow_fusion():
    """β = 0 changes nothing; a heavily weighted LM that knows one sentence makes beam and joint output it;
    rescore adds β·log p_lm of each hypothesis."""
    m = make_model()
    feats, lens = make_batch()
    lm = train_ngram([[A, B, C]], V + 4, order=3)  # the tiny model's vocabulary is 12
    for mode in ("beam", "joint"):
        plain = recognize(m, feats, lens, opts(mode, beam=3, nbest=2))
        zero = recognize(m, feats, lens, opts(mode, beam=3, nbest=2, lm_weight=0.0), lm=lm)
        assert tokens_of(zero) == tokens_of(plain)
        for a, b in zip(zero, plain):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
            assert all("lm" in h.parts for h in a)
        steered = recognize(m, feats, lens, opts(mode, beam=3, lm_weight=50.0, max_len_ratio=1.0), lm=lm)
        assert tokens_of(steered) == [[[A, B, C]]] * 3
    for h in [h for nbest in recognize(m, feats, lens, opts("joint", beam=3, nbest=3, lm_weight=0.7), lm=lm)
              for h in nbest]:
        parts = h.parts
        assert parts["lm"] == pytest.approx(lm.sentence_log_prob(h.tokens), abs=1e-4)
        assert h.score == pytest.approx(0.3 * parts["ctc"] + 0.7 * parts["att"] + 0.7 * parts["lm"], abs=1e-3)
    plain = recognize(m, feats, lens, opts("rescore", beam=3, nbest=3))
    fused = recognize(m, feats, lens, opts("rescore", beam=3, nbest=3, lm_weight=0.5), lm=lm)
    for a, b in zip(plain, fused):
        by_tokens = {tuple(h.tokens): h.score for h in a}
        for h in b:
            assert h.score == pytest.approx(by_tokens[tuple(h.tokens)] + 0.5 * lm.sentence_log_prob(h.tokens), abs=1e-4)


def test_asr_lm_and_decode_with_it(tiny_package, tmp_path):
    """`asr lm` trains on a manifest and a text file; `asr decode --lm` uses it in joint mode and records it;
    `asr lm --words` trains a word LM that `--word-lm` adds; a missing or foreign LM is a one-line error."""
    import json

    from typer.testing import CliRunner

    from asr_transformer.cli import app

    root = tiny_package
    extra = tmp_path / "more.txt"
    extra.write_text("nine eight seven\n\nsix five\n")
    arpa = tmp_path / "lm.arpa"
    run = CliRunner().invoke(app, ["lm", str(root / "test.jsonl"), str(extra), "--tokenizer", str(root / "tok"),
                                   "--out", str(arpa), "--order", "3"])
    assert run.exit_code == 0, run.output
    assert "3-gram LM from 6 sentences" in run.output and arpa.read_text().startswith("\\data\\")
    out = tmp_path / "dec"
    run = CliRunner().invoke(app, ["decode", str(root / "model.pt"), str(root / "test.jsonl"), "--mode", "joint,ctc",
                                   "--beam", "2", "--lm", str(arpa), "--lm-weight", "0.4", "--out", str(out),
                                   "--threads", "1", "--device", "cpu"])
    assert run.exit_code == 0, run.output
    joint = json.loads((out / "joint" / "rtf.json").read_text())
    assert joint["lm"] == str(arpa) and joint["lm_order"] == 3 and joint["options"]["lm_weight"] == 0.4
    assert json.loads((out / "ctc" / "rtf.json").read_text())["lm"] is None  # CTC greedy takes no LM
    run = CliRunner().invoke(app, ["transcribe", str(root / "u0.wav"), "--model", str(root / "model.pt"), "--mode",
                                   "joint", "--beam", "2", "--lm", str(arpa), "--threads", "1", "--device", "cpu"])
    assert run.exit_code == 0, run.output
    # a word LM: built with --words, read by --word-lm (with or without --lm), recorded; the two kinds not mixed up
    words = tmp_path / "words.arpa"
    run = CliRunner().invoke(app, ["lm", str(root / "test.jsonl"), str(extra), "--tokenizer", str(root / "tok"),
                                   "--out", str(words), "--order", "2", "--words"])
    assert run.exit_code == 0, run.output
    assert "word 2-gram LM (" in run.output and {"nine", "eight", "six"} <= set(NgramLM.read_arpa(words, None).words)
    for lm_args in (["--lm", str(arpa)], []):
        out = tmp_path / f"word{len(lm_args)}"
        run = CliRunner().invoke(app, ["decode", str(root / "model.pt"), str(root / "test.jsonl"), "--mode", "joint",
                                       "--beam", "2", *lm_args, "--word-lm", str(words), "--word-lm-weight", "0.2",
                                       "--out", str(out), "--threads", "1", "--device", "cpu"])
        assert run.exit_code == 0, run.output
        rtf = json.loads((out / "rtf.json").read_text())
        assert rtf["word_lm"] == str(words) and rtf["word_lm_order"] == 2 and rtf["word_lm_weight"] == 0.2
        assert rtf["lm"] == (str(arpa) if lm_args else None)
    run = CliRunner().invoke(app, ["transcribe", str(root / "u0.wav"), "--model", str(root / "model.pt"), "--mode",
                                   "joint", "--beam", "2", "--word-lm", str(words), "--threads", "1", "--device", "cpu"])
    assert run.exit_code == 0, run.output
    for flag, lm_file, message in (("--word-lm", arpa, "pieces"), ("--lm", words, "not a piece")):
        run = CliRunner().invoke(app, ["decode", str(root / "model.pt"), str(root / "test.jsonl"), flag, str(lm_file),
                                       "--out", str(tmp_path / "x"), "--threads", "1", "--device", "cpu"])
        assert run.exit_code == 1 and message in run.output and "Traceback" not in run.output
    run = CliRunner().invoke(app, ["lm", str(extra), "--tokenizer", str(tmp_path / "no_tok"), "--out", str(arpa)])
    assert run.exit_code == 1 and "no tokenizer.json" in run.output and "Traceback" not in run.output
    for bad, message in ((tmp_path / "none.arpa", "No such file"), (root / "test.jsonl", "test.jsonl:")):
        run = CliRunner().invoke(app, ["decode", str(root / "model.pt"), str(root / "test.jsonl"), "--lm", str(bad),
                                       "--out", str(tmp_path / "x"), "--threads", "1", "--device", "cpu"])
        assert run.exit_code == 1 and message in run.output and "Traceback" not in run.output


def recognize(*args, **kwargs):
    from asr_transformer.decode.search import recognize as run

    return run(*args, **kwargs)


def test_cache_is_bounded(monkeypatch):
    """Dense distributions are cached per history, and the cache is emptied before it outgrows its budget."""
    import asr_transformer.decode.ngram as ngram

    lm = train_ngram([[A, B, C], [C, B, A]], V, order=3)
    monkeypatch.setattr(ngram, "CACHE_FLOATS", 4 * V)
    want = {h: train_ngram([[A, B, C], [C, B, A]], V, order=3).distribution(h) for h in [(SOS, A), (A, B), (B, C), (C, C)]}
    for h, vec in list(want.items()) * 2:
        torch.testing.assert_close(lm.distribution(h), vec)
        assert len(lm._cache) <= 4


def test_word_lm_scores_each_word_where_it_ends(tmp_path):
    """A word LM fused at word boundaries: a piece that starts a word ("▁…") or <eos> completes the word being
    spelled and gains γ·log p_word(word | earlier words); other pieces gain only the token LM's β·log p. Summing
    the per-step scores along a hypothesis gives `sentence_log_prob` (what rescoring adds), and a word the LM
    does not know is its <unk> and its letters, charged from the step after it leaves the LM's words."""
    from asr_transformer.decode.word_lm import LETTER_LOG_PROB, WordBoundaryLM

    pieces = ["<blank>", "<unk>", "<sos>", "<eos>", "<mask>", "▁", "a", "b", "▁ab"]
    SP, PA, PB, PAB = 5, 6, 7, 8
    words = {"<unk>": UNK, "<s>": SOS, "</s>": EOS, "a": 5, "ab": 6, "b": 7}
    word_lm = train_ngram([[5, 6], [6, 7], [6, 5, 7]], 8, order=2)
    word_lm.write_arpa(tmp_path / "words.arpa", ["<blank>", "<unk>", "<s>", "</s>", "<mask>", "a", "ab", "b"])
    word_lm = NgramLM.read_arpa(tmp_path / "words.arpa", None)
    assert word_lm.words == words
    token_lm = train_ngram([[SP, PA, SP, PA, PB], [PAB, SP, PB]], len(pieces), order=3)
    fused = WordBoundaryLM(pieces, word_lm, 0.7, token_lm, 0.3)
    p_word = lambda h, w: word_lm.distribution(h)[w].item()  # noqa: E731

    # "▁a" spelled so far: a word start (▁ or ▁ab) or <eos> completes "a"; "a" or "b" continues it
    scores = fused.next_log_probs([[SOS, SP, PA]])[0]
    token = token_lm.distribution([SOS, SP, PA])
    for piece in (SP, PAB):
        assert scores[piece].item() == pytest.approx(0.3 * token[piece].item() + 0.7 * p_word([SOS], 5), abs=1e-5)
    for piece in (PA, PB):
        assert scores[piece].item() == pytest.approx(0.3 * token[piece].item(), abs=1e-5)
    assert scores[EOS].item() == pytest.approx(
        0.3 * token[EOS].item() + 0.7 * (p_word([SOS], 5) + p_word([SOS, 5], EOS)), abs=1e-5)
    # the context is the words before: after "▁ab ▁b" the next boundary completes "b" given "ab"
    scores = fused.next_log_probs([[SOS, PAB, SP, PB]])[0]
    assert scores[SP].item() == pytest.approx(0.3 * token_lm.distribution([SOS, PAB, SP, PB])[SP].item()
                                              + 0.7 * p_word([SOS, 6], 7), abs=1e-5)
    # an unknown word ("ba") is <unk> spelled letter by letter, and it is paid for as soon as no LM word begins
    # with it (the look-ahead): from the step after "a" made "ba", every candidate pays, and its end settles
    plain = WordBoundaryLM(pieces, word_lm, 1.0)
    unknown = p_word([SOS], UNK) + 2 * LETTER_LOG_PROB
    assert plain.next_log_probs([[SOS, SP, PB]])[0, PA].item() == 0.0  # "b" begins an LM word
    scores = plain.next_log_probs([[SOS, SP, PB, PA]])[0]
    assert scores[SP].item() == pytest.approx(unknown, abs=1e-5)
    assert scores[PA].item() == pytest.approx(unknown, abs=1e-5)  # "baa" pays for "ba" now ...
    scores = plain.next_log_probs([[SOS, SP, PB, PA, PA]])[0]
    assert scores[PA].item() == pytest.approx(LETTER_LOG_PROB, abs=1e-5)  # ... and one letter more at each step
    assert scores[SP].item() == pytest.approx(LETTER_LOG_PROB, abs=1e-5)
    # the steps add up to the sentence score, <eos> included
    for sentence in ([SP, PA, SP, PA, PB], [PAB, SP, PB, PA], [SP, PB, PA, PA, PB, SP, PA], [SP, PB], []):
        prefix, steps = [SOS], 0.0
        for t in sentence + [EOS]:
            steps += fused.next_log_probs([prefix])[0, t].item()
            prefix.append(t)
        assert fused.sentence_log_prob(sentence) == pytest.approx(steps, abs=1e-4)
    with pytest.raises(ValueError, match="word-level LM"):
        WordBoundaryLM(pieces, token_lm, 1.0)


def test_word_lm_reads_words_from_pieces_with_case_and_punctuation(tmp_path):
    """Whisper's pieces carry case and punctuation ("▁Hello", ","): the word LM scores the normalized words, a
    piece of punctuation alone is no word, and a hyphenated word counts as the words it normalizes to, each paid
    for as it ends."""
    from asr_transformer.decode.word_lm import WordBoundaryLM

    pieces = ["<blank>", "<unk>", "<sos>", "<eos>", "<mask>", "▁Hello", ",", "▁world", ".", "▁-", "▁twenty-one"]
    HELLO, COMMA, WORLD, STOP, DASH, TWENTY_ONE = range(5, 11)
    word_lm = train_ngram([[5, 6], [5, 6, 7, 8], [7, 8]], 9, order=3)
    word_lm.write_arpa(tmp_path / "w.arpa", ["<blank>", "<unk>", "<s>", "</s>", "<mask>", "hello", "world",
                                             "twenty", "one"])
    word_lm = NgramLM.read_arpa(tmp_path / "w.arpa", None)
    lp = word_lm.log_prob
    fused = WordBoundaryLM(pieces, word_lm, 0.5)
    expected = lp([SOS], 5) + lp([SOS, 5], 6) + lp([SOS, 5, 6], EOS)
    assert fused.sentence_log_prob([HELLO, COMMA, WORLD, STOP]) == pytest.approx(0.5 * expected, abs=1e-5)
    assert fused.sentence_log_prob([HELLO, DASH, WORLD]) == pytest.approx(0.5 * expected, abs=1e-5)
    expected = lp([SOS], 7) + lp([SOS, 7], 8) + lp([SOS, 7, 8], EOS)
    assert fused.sentence_log_prob([TWENTY_ONE]) == pytest.approx(0.5 * expected, abs=1e-5)
    # the words a hyphen ends inside one spelling are paid for as they end, not when the spelling does: after
    # "twenty-one" every candidate pays for "twenty", and "one" is settled where the next word starts
    scores = fused.next_log_probs([[SOS, TWENTY_ONE]])[0]
    assert scores[STOP].item() == pytest.approx(0.5 * lp([SOS], 7), abs=1e-5)
    assert scores[HELLO].item() == pytest.approx(0.5 * (lp([SOS], 7) + lp([SOS, 7], 8)), abs=1e-5)


# ------------------------------------------------------------------------------- the binary (array) LM


def _same_scores(old, new, vocab, rng, queries=400, longest=6):
    """log_prob equal to 1e-6 (in fact bit for bit) and the same dense distributions, for random histories that
    mix listed and unseen contexts, <unk> and ids the LM has never seen (back-off chains of every length)."""
    for _ in range(queries):
        h = [SOS] + [rng.randrange(1, vocab) for _ in range(rng.randint(0, longest))]
        w = rng.randrange(0, vocab)
        a, b = old.log_prob(h, w), new.log_prob(h, w)
        assert (a == b) or (math.isinf(a) and math.isinf(b) and a < 0 and b < 0), (h, w, a, b)
        assert abs(a - b) < 1e-6 or math.isinf(a)
        assert np.array_equal(old.distribution(h), new.distribution(h)), h
    batch = [[SOS] + [rng.randrange(1, vocab) for _ in range(4)] for _ in range(16)]
    assert np.array_equal(old.next_log_probs(batch), new.next_log_probs(batch))
    for _ in range(20):
        s = [rng.randrange(5, new.vocab_size) for _ in range(rng.randint(0, 6))]
        assert old.sentence_log_prob(s) == new.sentence_log_prob(s)


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_binary_lm_scores_equal_the_dict_lm(order, tmp_path, monkeypatch):
    """ARPA → BinaryNgramLM (in memory and memory-mapped from its file) scores exactly as NgramLM.read_arpa,
    for a token LM and a word LM (same word ids, in the same order), sections parsed in many small chunks."""
    import asr_transformer.decode.ngram_binary as nb
    from asr_transformer.decode.ngram_binary import BinaryNgramLM, convert_arpa

    monkeypatch.setattr(nb, "CHUNK_CHARS", 100)

    rng = random.Random(order)
    vocab = 14
    lm = train_ngram([[rng.randrange(5, vocab) for _ in range(rng.randint(1, 8))] for _ in range(80)], vocab, order)
    pieces = PIECES[:5] + [f"▁p{i}" for i in range(5, vocab)]
    lm.write_arpa(tmp_path / "lm.arpa", pieces)
    old = NgramLM.read_arpa(tmp_path / "lm.arpa", pieces)
    new = convert_arpa(tmp_path / "lm.arpa", pieces)
    mapped = convert_arpa(tmp_path / "lm.arpa", pieces, tmp_path / "lm.ngram")
    assert isinstance(mapped.arrays["prob1"].base, np.memmap) or mapped.path == str(tmp_path / "lm.ngram")
    for candidate in (new, mapped, BinaryNgramLM.load(tmp_path / "lm.ngram")):
        assert (candidate.order, candidate.vocab_size, candidate.words) == (old.order, old.vocab_size, None)
        assert candidate.ngram_counts() == old.ngram_counts()
        _same_scores(old, candidate, vocab + 2, rng)

    names = ["<blank>", "<unk>", "<s>", "</s>", "<mask>"] + [f"w{i}" for i in range(vocab - 1, 4, -1)]
    lm.write_arpa(tmp_path / "words.arpa", names)
    old = NgramLM.read_arpa(tmp_path / "words.arpa", None)
    new = convert_arpa(tmp_path / "words.arpa", None, tmp_path / "words.ngram")
    assert list(new.words.items()) == list(old.words.items()) and new.vocab_size == old.vocab_size
    _same_scores(old, new, vocab + 2, rng)


KENLM_STYLE = """
\\data\\
ngram 1=6
ngram 2=5
ngram 3=2

\\1-grams:
-1.5\t<unk>\t0
-99\t<s>\t-0.30103
-0.69897\t</s>
-0.60206 x -0.2
-0.9\ty\t-0.1
-1.2\tz

\\2-grams:
-0.30103\t<s> x\t-0.05
-0.5\tx y\t-0.15
-0.4\ty </s>
-0.8\tx z
-0.45\t<s> y

\\3-grams:
-0.1\t<s> x y
-0.2\tx y </s>

\\end\\
"""


def test_binary_lm_reads_a_kenlm_style_arpa(tmp_path):
    """An ARPA as KenLM or SRILM write one: <unk> listed, <s> at -99, back-offs missing on some lines, tabs and
    spaces mixed; the binary LM gives NgramLM's scores, and those follow ARPA's back-off rule by hand."""
    from asr_transformer.decode.ngram_binary import convert_arpa

    path = tmp_path / "kenlm.arpa"
    path.write_text(KENLM_STYLE)
    old, new = NgramLM.read_arpa(path, None), convert_arpa(path, None)
    assert list(new.words.items()) == list(old.words.items())
    X, Y, Z = new.words["x"], new.words["y"], new.words["z"]
    assert new.ngram_counts() == old.ngram_counts() == [5, 5, 2]
    ln = lambda v: v * 2.302585092994046  # noqa: E731
    assert new.log_prob([SOS, X], Y) == pytest.approx(ln(-0.1))  # listed 3-gram
    assert new.log_prob([Z, X], Y) == pytest.approx(ln(-0.5))  # "z x" is no context: p(y | x)
    assert new.log_prob([SOS, X], Z) == pytest.approx(ln(-0.05 - 0.8))  # b(<s> x) + p(z | x)
    assert new.log_prob([SOS, Y], Z) == pytest.approx(ln(-0.1 - 1.2))  # b(<s> y) absent, b(y) + p(z)
    assert new.log_prob([X, Z], UNK) == pytest.approx(ln(-1.5))  # x z and z have no back-off: weight 1
    assert new.log_prob([X, Z], 99) == float("-inf")  # not a word id at all
    _same_scores(old, new, new.vocab_size + 2, random.Random(0), longest=3)
    assert new.distribution([SOS])[UNK].item() == pytest.approx(ln(-0.30103 - 1.5), abs=1e-5)


def test_binary_lm_falls_back_to_the_reference_reader(tmp_path):
    """Text the fast parser does not expect (a duplicated n-gram, an `ngram` line inside a section, CRLF line
    ends) reads as NgramLM reads it; malformed text gives NgramLM's error, naming the line."""
    from asr_transformer.decode.ngram_binary import convert_arpa

    odd = KENLM_STYLE.replace("-0.4\ty </s>\n", "-0.4\ty </s>\n-0.35\ty </s>\nngram 9=1\n").replace("\n", "\r\n")
    path = tmp_path / "odd.arpa"
    path.write_bytes(odd.encode())
    old, new = NgramLM.read_arpa(path, None), convert_arpa(path, None)
    assert new.log_prob([SOS, new.words["y"]], EOS) == old.log_prob([SOS, old.words["y"]], EOS)
    _same_scores(old, new, new.vocab_size + 1, random.Random(1), longest=3)
    for text, message in ((KENLM_STYLE.replace("-0.5\tx y", "-0.5\tx q"), r"bad.arpa:17: word 'q'"),
                          (KENLM_STYLE.replace("-0.5\tx y", "oops\tx y"), "bad.arpa:17: not a number"),
                          (KENLM_STYLE.replace("-0.5\tx y\t-0.15", "-0.5 x"), "bad.arpa:17: a 2-gram line"),
                          ("hello\n", "expected")):
        (tmp_path / "bad.arpa").write_text(text)
        with pytest.raises(NgramError, match=message):
            convert_arpa(tmp_path / "bad.arpa", None)


def test_decoding_with_the_binary_lm_is_unchanged(tmp_path):
    """beam, joint and rescore give the same hypotheses and scores with the binary LM as with the dict LM; so
    does a word LM fused at word boundaries."""
    from asr_transformer.decode.ngram_binary import convert_arpa, from_ngram
    from asr_transformer.decode.word_lm import WordBoundaryLM

    m = make_model()
    feats, lens = make_batch()
    pieces = PIECES + [f"p{i}" for i in range(V, V + 4)]  # the tiny model's vocabulary is 12
    train_ngram([[A, B, C], [C, 9, A], [B, B, 10, 11]], V + 4, order=3).write_arpa(tmp_path / "lm.arpa", pieces)
    old = NgramLM.read_arpa(tmp_path / "lm.arpa", pieces)
    new = convert_arpa(tmp_path / "lm.arpa", pieces, tmp_path / "lm.ngram")
    for mode in ("beam", "joint", "rescore"):
        want = recognize(m, feats, lens, opts(mode, beam=3, nbest=3, lm_weight=0.8), lm=old)
        got = recognize(m, feats, lens, opts(mode, beam=3, nbest=3, lm_weight=0.8), lm=new)
        assert tokens_of(got) == tokens_of(want)
        assert [[h.score for h in n] for n in got] == [[h.score for h in n] for n in want]
    words = train_ngram([[5, 6], [6, 7, 5], [7, 7]], 8, order=2)
    words.write_arpa(tmp_path / "w.arpa", ["<blank>", "<unk>", "<s>", "</s>", "<mask>", "a", "b", "c"])
    old_w, new_w = NgramLM.read_arpa(tmp_path / "w.arpa", None), convert_arpa(tmp_path / "w.arpa", None)
    assert from_ngram(old_w).words == new_w.words
    word_pieces = ["<blank>", "<unk>", "<sos>", "<eos>", "<mask>", "▁a", "▁b", "c", "▁c", "a", "b", "▁"]
    fused = [WordBoundaryLM(word_pieces, w, 0.6, t, 0.3) for w, t in ((old_w, old), (new_w, new))]
    want = recognize(m, feats, lens, opts("joint", beam=3, nbest=3, lm_weight=1.0), lm=fused[0])
    got = recognize(m, feats, lens, opts("joint", beam=3, nbest=3, lm_weight=1.0), lm=fused[1])
    assert tokens_of(got) == tokens_of(want)
    assert [[h.score for h in n] for n in got] == [[h.score for h in n] for n in want]


def test_read_lm_caches_large_lms(tmp_path, monkeypatch):
    """read_lm converts a large ARPA (or a package's gzip ARPA) once into the cache and memory-maps it after;
    a changed file converts again; a binary file is read directly; ASR_LM_CACHE=off caches nothing."""
    import os

    import asr_transformer.decode.ngram_binary as nb
    from asr_transformer.decode.ngram import pack_arpa
    from asr_transformer.decode.search import DecodeError, read_lm

    class Tok:
        vocab_size = V

        @staticmethod
        def pieces(ids):
            return [PIECES[i] for i in ids]

    monkeypatch.setattr(nb, "CACHE_MIN_BYTES", 0)
    monkeypatch.setenv("ASR_LM_CACHE", str(tmp_path / "cache"))
    rng = random.Random(3)
    lm = train_ngram([[rng.choice([A, B, C]) for _ in range(rng.randint(1, 6))] for _ in range(30)], V, 3)
    arpa = tmp_path / "lm.arpa"
    lm.write_arpa(arpa, PIECES)
    ref = NgramLM.read_arpa(arpa, PIECES)
    first = read_lm(arpa, Tok, words=False)
    assert len(list((tmp_path / "cache").iterdir())) == 1 and first.path.startswith(str(tmp_path / "cache"))
    again = read_lm(arpa, Tok, words=False)
    assert again.path == first.path
    _same_scores(ref, again, V, rng, longest=4)
    packed = read_lm(pack_arpa(arpa), Tok, words=False, where="model.pt:lm.arpa")
    assert len(list((tmp_path / "cache").iterdir())) == 2
    _same_scores(ref, packed, V, rng, longest=4)
    os.utime(arpa, ns=(1, 1))  # a changed file is converted again
    assert read_lm(arpa, Tok, words=False).path != first.path
    nb.convert_arpa(arpa, PIECES, tmp_path / "lm.ngram")
    direct = read_lm(tmp_path / "lm.ngram", Tok, words=False)
    assert direct.path == str(tmp_path / "lm.ngram")
    with pytest.raises(DecodeError, match="does not fit"):
        read_lm(tmp_path / "lm.ngram", Tok, words=True)
    monkeypatch.setenv("ASR_LM_CACHE", "off")
    assert read_lm(arpa, Tok, words=False).path is None


FOURGRAM = """\\data\\
ngram 1=5
ngram 2=2
ngram 3=1
ngram 4=1

\\1-grams:
-1.5\t<unk>
-99\t<s>\t-0.3
-0.7\t</s>
-0.6\tx\t-0.2
-0.9\ty\t-0.1

\\2-grams:
-0.3\t<s> x\t-0.05
-0.5\tx y\t-0.15

\\3-grams:
-0.1\t<s> x y\t-0.02

\\4-grams:
-0.01\t<s> x y </s>

\\end\\
"""


def test_a_history_shorter_than_the_order_is_used_whole(tmp_path):
    """A 4-gram LM after `<s> x` scores with that whole history (the listed 3-gram), not with `x` alone — in every
    query of both LM kinds."""
    from asr_transformer.decode.ngram_binary import convert_arpa

    path = tmp_path / "four.arpa"
    path.write_text(FOURGRAM)
    ln = lambda v: v * 2.302585092994046  # noqa: E731
    for lm in (NgramLM.read_arpa(path, None), convert_arpa(path, None)):
        X, Y = lm.words["x"], lm.words["y"]
        assert lm.log_prob([SOS, X], Y) == pytest.approx(ln(-0.1))
        assert lm.log_prob([SOS, X, Y], EOS) == pytest.approx(ln(-0.01))
        assert lm.distribution([SOS, X])[Y].item() == pytest.approx(ln(-0.1), abs=1e-5)
        assert lm.next_log_probs([[SOS, X]])[0, Y].item() == pytest.approx(ln(-0.1), abs=1e-5)
        assert lm.sentence_log_prob([X, Y]) == pytest.approx(ln(-0.3 - 0.1 - 0.01))
