"""The grammar and the espeak-ng synthetic corpus (a handful of utterances, a few seconds)."""

from __future__ import annotations

import re
from itertools import islice
from pathlib import Path

import pytest
import soundfile as sf

from asr_transformer.data.corpora import grammar
from asr_transformer.data.manifest import read_manifest

SPLITS = ("train", "dev", "test")
TINY_HOURS = 12.0 / 3600  # about a dozen seconds of train audio


# ---------------------------------------------------------------- grammar (no espeak needed)


def test_grammar_is_deterministic_and_prefix_stable():
    assert grammar.generate(50, seed=3) == grammar.generate(50, seed=3)
    assert grammar.generate(80, seed=3)[:50] == grammar.generate(50, seed=3)
    assert grammar.generate(50, seed=3) != grammar.generate(50, seed=4)


def test_grammar_sentences_are_clean_and_in_vocabulary():
    vocab = grammar.vocabulary()
    assert 250 <= len(vocab) <= 600, len(vocab)
    sentences = grammar.generate(3000, seed=0)
    used = set()
    for s in sentences:
        assert re.fullmatch(r"[a-z']+( [a-z']+)*", s), s
        assert grammar.MIN_WORDS <= len(s.split()) <= grammar.MAX_WORDS, s
        used.update(s.split())
    assert used <= vocab
    assert len(used) >= 0.9 * len(vocab)  # the whole vocabulary is exercised, not a corner of it
    assert len(set(sentences)) > 0.7 * len(sentences)  # fixed phrases ("good night") repeat


def _has_a_single_letter(sentence: str) -> bool:
    return any(len(word) == 1 for word in sentence.split())


def test_category_weights_change_the_mix_of_sentences():
    only_letters = {name: 0 for name in grammar.WEIGHTS if name != "letters"}
    assert all(_has_a_single_letter(s) for s in islice(grammar.sentences(0, only_letters), 300))
    default = grammar.generate(3000, seed=0)
    assert not all(_has_a_single_letter(s) for s in default)
    assert list(islice(grammar.sentences(0, {}), 3000)) == default  # no override: the grammar's own mix
    more = list(islice(grammar.sentences(0, {"letters": 3 * grammar.WEIGHTS["letters"]}), 3000))
    share = [sum(map(_has_a_single_letter, texts)) / len(texts) for texts in (default, more)]
    assert share[1] > share[0] + 0.1
    for bad, message in (({"letter": 2}, "unknown sentence category 'letter'; the grammar has numbers"),
                         ({"digits": -1}, "negative"),
                         ({name: 0 for name in grammar.WEIGHTS}, "every sentence category has weight 0")):
        with pytest.raises(ValueError, match=message):
            grammar.category_weights(bad)


def test_number_speller():
    assert grammar.number_words(312) == "three hundred and twelve"
    assert grammar.number_words(2405) == "two thousand four hundred and five"
    assert grammar.number_words(7005) == "seven thousand and five"
    assert grammar.ordinal_words(21) == "twenty first"
    assert grammar.year_words(2021) == "twenty twenty one"
    assert grammar.year_words(2005) == "two thousand and five"


def test_read_text_file(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("# my sentences\nHello   there\n\nopen the door\n", encoding="utf-8")
    assert grammar.read_text_file(path) == ["Hello there", "open the door"]
    (tmp_path / "empty.txt").write_text("\n# nothing\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentences"):
        grammar.read_text_file(tmp_path / "empty.txt")


# ---------------------------------------------------------------- synthesis

espeakng_loader = pytest.importorskip(
    "espeakng_loader", reason="espeakng-loader is not installed (pip install 'asr-transformer[synthesis]')"
)
from asr_transformer.data.corpora import synthetic  # noqa: E402


def test_held_out_speakers_are_disjoint_from_train():
    speakers = synthetic.build_speakers(seed=0)
    variants = {split: {s.variant for s in speakers[split] if s.engine == "espeak"} for split in SPLITS}
    combos = {split: {(s.voice, s.variant) for s in speakers[split]} for split in SPLITS}
    assert variants["train"] and variants["dev"] and variants["test"]
    for held in ("dev", "test"):
        assert not variants[held] & variants["train"]
        assert not combos[held] & combos["train"]
    assert not variants["dev"] & variants["test"]
    ids = [s.id for split in SPLITS for s in speakers[split]]
    assert len(ids) == len(set(ids))
    assert synthetic.build_speakers(seed=0) == speakers


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """The same tiny corpus twice (different job counts), and once from a text file."""
    root = tmp_path_factory.mktemp("synthetic")
    a = synthetic.prepare(root / "a", hours_train=TINY_HOURS, utts_dev=3, utts_test=3, seed=7, jobs=2)
    b = synthetic.prepare(root / "b", hours_train=TINY_HOURS, utts_dev=3, utts_test=3, seed=7, jobs=1)
    lines = [f"please read sentence number {grammar.number_words(i)}" for i in range(1, 13)]
    (root / "mine.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    c = synthetic.prepare(root / "c", hours_train=TINY_HOURS, utts_dev=2, utts_test=2, seed=1,
                          text_file=root / "mine.txt", jobs=2)
    return root, a, b, c, lines


def _records(folder: Path, split: str):
    return read_manifest(folder / f"{split}.jsonl")


def test_same_seed_same_manifests_and_audio(corpora):
    root, a, b, _, _ = corpora
    for split in SPLITS:
        ra, rb = _records(root / "a", split), _records(root / "b", split)
        assert ra, split
        assert [(u.id, u.text, u.speaker, u.duration) for u in ra] == [(u.id, u.text, u.speaker, u.duration) for u in rb]
        for ua, ub in zip(ra, rb):
            assert Path(ua.audio).read_bytes() == Path(ub.audio).read_bytes(), ua.id
    assert a["splits"] == b["splits"]
    assert a["failed"] == 0 and a["texts_disjoint"]


def test_manifests_speakers_texts_and_durations(corpora):
    root, summary, _, _, _ = corpora
    records = {split: _records(root / "a", split) for split in SPLITS}
    assert summary["splits"]["train"]["hours"] * 3600 >= TINY_HOURS * 3600 - 1e-6
    assert len(records["dev"]) == 3 and len(records["test"]) == 3
    speakers = {split: {u.speaker for u in records[split]} for split in SPLITS}
    assert not speakers["dev"] & speakers["train"] and not speakers["test"] & speakers["train"]
    train_texts = {u.text for u in records["train"]}
    assert not train_texts & {u.text for u in records["dev"] + records["test"]}
    for split in SPLITS:
        for u in records[split]:
            path = Path(u.audio)
            assert path.is_absolute() and path.parent == root / "a" / "wav" / split
            info = sf.info(str(path))
            assert info.samplerate == 16000 and info.channels == 1 and info.subtype == "PCM_16"
            assert abs(info.frames / info.samplerate - u.duration) < 1e-3
            assert 0.3 < u.duration < 8.0
        assert summary["splits"][split]["utterances"] == len(records[split])
    files = {p.name for p in (root / "a" / "wav").rglob("*.wav")}
    assert files == {Path(u.audio).name for split in SPLITS for u in records[split]}
    assert summary["x_realtime"] > 0
    assert (root / "a" / "summary.json").exists() and (root / "a" / "speakers.json").exists()


def test_text_file_input(corpora):
    root, _, _, summary, lines = corpora
    records = {split: _records(root / "c", split) for split in SPLITS}
    texts = {split: {u.text for u in records[split]} for split in SPLITS}
    assert set().union(*texts.values()) <= set(lines)
    assert texts["train"] and texts["dev"] and texts["test"]
    assert not texts["train"] & (texts["dev"] | texts["test"])
    assert summary["texts_disjoint"] and summary["texts"].endswith("mine.txt")


def test_train_weights_change_train_texts_only(corpora, tmp_path):
    root, a, _, _, _ = corpora
    only_letters = {name: 0.0 for name in grammar.WEIGHTS if name != "letters"}
    summary = synthetic.prepare(tmp_path / "w", hours_train=TINY_HOURS, utts_dev=3, utts_test=3, seed=7, jobs=2,
                                train_weights=only_letters)
    train = _records(tmp_path / "w", "train")
    assert train and all(_has_a_single_letter(u.text) for u in train)
    assert {u.text for u in train} != {u.text for u in _records(root / "a", "train")}
    for split in ("dev", "test"):  # held-out texts come from the grammar's own mix, as without the weights
        assert [u.text for u in _records(tmp_path / "w", split)] == [u.text for u in _records(root / "a", split)]
    assert summary["train_weights"] == {**grammar.WEIGHTS, **only_letters}
    assert a["train_weights"] == grammar.WEIGHTS


def test_telephone_band_corpus_at_8_khz(corpora, tmp_path):
    from asr_transformer.data.audio import load_utterance

    root, _, _, _, _ = corpora
    summary = synthetic.prepare(tmp_path / "t", hours_train=TINY_HOURS, utts_dev=3, utts_test=3, seed=7, jobs=2,
                                sample_rate=8000)
    assert summary["sample_rate"] == 8000
    for split in SPLITS:  # the same utterances as at 16 kHz, written at 8 kHz
        narrow, wide = _records(tmp_path / "t", split), _records(root / "a", split)
        assert [(u.id, u.text) for u in narrow] == [(u.id, u.text) for u in wide]
        for u, w in zip(narrow, wide):
            info = sf.info(u.audio)
            assert info.samplerate == 8000 and abs(info.frames / 8000 - u.duration) < 1e-3
            assert abs(u.duration - w.duration) < 0.005, u.id
    samples = load_utterance(narrow[0])  # read back at the model's 16 kHz
    assert abs(len(samples) / 16000 - narrow[0].duration) < 1e-3


def test_prepare_synthetic_rejects_bad_train_weights(tmp_path):
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    for args, message in ((["--train-weight", "letter=3"], "unknown sentence category 'letter'"),
                          (["--train-weight", "letters"], "expected CATEGORY=WEIGHT"),
                          (["--train-weight", "letters=3", "--text-file", str(tmp_path / "t.txt")], "a --text-file has"),
                          (["--sample-rate", "800"], "Invalid value for '--sample-rate'")):
        run = CliRunner().invoke(app, ["prepare", "synthetic", "--out", str(tmp_path / "x"), *args], env={"COLUMNS": "300"})
        assert run.exit_code != 0 and message in run.output, run.output
    assert not (tmp_path / "x").exists()


def test_shared_texts_keep_every_line_in_every_split(tmp_path):
    digits = "zero one two three four five six seven eight nine".split()
    (tmp_path / "digits.txt").write_text("\n".join(digits) + "\n", encoding="utf-8")
    summary = synthetic.prepare(tmp_path / "d", hours_train=0.006, utts_dev=10, utts_test=10, seed=0,
                                text_file=tmp_path / "digits.txt", share_texts=True, jobs=2)
    records = {split: _records(tmp_path / "d", split) for split in SPLITS}
    assert len(records["train"]) >= 10
    for split in SPLITS:  # nothing held out: each split cycles through all ten words
        assert {u.text for u in records[split][:10]} == set(digits), split
    speakers = {split: {u.speaker for u in records[split]} for split in SPLITS}
    assert not speakers["dev"] & speakers["train"] and not speakers["test"] & speakers["train"]
    assert summary["texts_disjoint"] is False


def test_trim_silence_keeps_a_margin():
    import numpy as np

    rate = 16000
    x = np.zeros(rate * 2, np.float32)
    x[rate // 2: rate] = 0.5 * np.sin(np.arange(rate // 2) * 0.3)
    y = synthetic.trim_silence(x, rate)
    assert abs(len(y) - (rate // 2 + 2 * rate // 10)) <= rate // 100
