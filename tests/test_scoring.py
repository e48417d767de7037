import json
import random

import jiwer
import pytest

from asr_transformer.scoring import (
    C, D, I, S, ErrorCounts, Report, align, read_hyp_jsonl, score, score_dir,
)
from asr_transformer.text import NormalizerConfig, text_normalizer

VOCAB = "a an the cat cats sat on mat dog dogs ran to it is".split()


def _random_pairs(seed: int, n: int) -> list[tuple[str, str, str]]:
    """Random references and hypotheses made from them by random edits; some empty, some unrelated."""
    rng = random.Random(seed)
    pairs = []
    for k in range(n):
        ref = [rng.choice(VOCAB) for _ in range(rng.randint(1, 15))]
        kind = rng.random()
        if kind < 0.1:
            hyp = []
        elif kind < 0.2:
            hyp = [rng.choice(VOCAB) for _ in range(rng.randint(1, 15))]
        else:
            hyp = list(ref)
            for _ in range(rng.randint(0, 5)):
                p = rng.randint(0, len(hyp))
                edit = rng.choice("sdi")
                if edit == "s" and p < len(hyp):
                    hyp[p] = rng.choice(VOCAB)
                elif edit == "d" and p < len(hyp):
                    del hyp[p]
                elif edit == "i":
                    hyp.insert(p, rng.choice(VOCAB))
        pairs.append((f"utt{k:04d}", " ".join(ref), " ".join(hyp)))
    return pairs


PAIRS = _random_pairs(seed=0, n=300)


def test_corpus_rates_equal_jiwer():
    refs = [r for _, r, _ in PAIRS]
    hyps = [h for _, _, h in PAIRS]
    report = score(PAIRS)
    assert report.wer == pytest.approx(jiwer.wer(refs, hyps))
    assert report.cer == pytest.approx(jiwer.cer(refs, hyps))  # spaces count as characters
    words = jiwer.process_words(refs, hyps)
    assert (report.words.sub, report.words.dele, report.words.ins, report.words.cor) == (
        words.substitutions, words.deletions, words.insertions, words.hits)
    chars = jiwer.process_characters(refs, hyps)
    assert (report.chars.sub, report.chars.dele, report.chars.ins, report.chars.cor) == (
        chars.substitutions, chars.deletions, chars.insertions, chars.hits)


def test_per_utterance_counts_equal_jiwer():
    for utt, (_, ref, hyp) in zip(score(PAIRS).utterances, PAIRS):
        out = jiwer.process_words(ref, hyp)
        assert (utt.words.sub, utt.words.dele, utt.words.ins) == (
            out.substitutions, out.deletions, out.insertions), (ref, hyp)


def test_alignment_reconstructs_both_sides():
    for _, ref, hyp in PAIRS:
        r, h = ref.split(), hyp.split()
        ops = align(r, h)
        assert [x for _, x, _ in ops if x is not None] == r
        assert [y for _, _, y in ops if y is not None] == h
        # applying the ops to ref gives hyp
        out = []
        for op, x, y in ops:
            assert op in (C, S, D, I)
            if op == C:
                assert x == y
                out.append(x)
            elif op == S:
                assert x != y
                out.append(y)
            elif op == I:
                out.append(y)
        assert out == h
        # and the alignment is a minimal one
        assert ErrorCounts.from_alignment(ops).errors == round(jiwer.wer(ref, hyp) * len(r))


def test_align_edge_cases():
    assert align([], []) == []
    assert align(["a"], []) == [(D, "a", None)]
    assert align([], ["a"]) == [(I, None, "a")]
    assert align(list("ab"), list("ab")) == [(C, "a", "a"), (C, "b", "b")]
    assert align(["a", "b", "c"], ["a", "x", "c"]) == [(C, "a", "a"), (S, "b", "x"), (C, "c", "c")]


def test_empty_reference_and_hypothesis():
    report = score([("u1", "", "hello"), ("u2", "", ""), ("u3", "a b", "")])
    assert [u.words.errors for u in report.utterances] == [1, 0, 2]
    assert report.words == ErrorCounts(ref_len=2, cor=0, sub=0, dele=2, ins=1)
    assert report.ser == pytest.approx(2 / 3)
    assert score([("u", "", "x y")]).wer == 2.0  # errors / 1 with an empty reference, as jiwer


HAND = [
    ("u1", "the cat sat on the mat", "the cat sit on mat"),  # 1 sub, 1 del
    ("u2", "a dog ran", "a dog ran"),  # correct
    ("u3", "hello world", "hello big world"),  # 1 ins
]


def test_hand_example_numbers_and_table():
    report = score(HAND)
    assert report.words == ErrorCounts(ref_len=11, cor=9, sub=1, dele=1, ins=1)
    assert report.wer == pytest.approx(3 / 11)
    assert report.ser == pytest.approx(2 / 3)
    table = report.summary_table(title="test")
    word_row = next(line for line in table.splitlines() if line.split()[:3] == ["|", "3", "11"])
    assert word_row.split() == ["|", "3", "11", "|", "81.8", "9.1", "9.1", "9.1", "27.3", "66.7", "|"]
    for header in ("# Snt", "# Wrd", "# Chr", "Corr", "Sub", "Del", "Ins", "Err", "S.Err"):
        assert header in table
    assert "sat ==> sit" in table and "big" in table


def test_alignments_text_columns():
    text = score(HAND[:1]).alignments_text()
    lines = text.splitlines()
    assert lines[0] == "id: (u1)"
    assert lines[1] == "Scores: (#C #S #D #I) 4 1 1 0"
    ref, hyp, ev = lines[2], lines[3], lines[4]
    assert ref == "REF:  the cat SAT on THE mat"
    assert hyp == "HYP:  the cat SIT on *** mat"
    # marks sit under the words they describe
    assert ev[ref.index("SAT")] == "S" and ev[ref.index("THE")] == "D"
    assert ev.split() == ["Eval:", "S", "D"]


def test_confusions_counted():
    report = score([("a", "x y z", "x q"), ("b", "y u v", "q u v w")])
    conf = report.confusions
    assert conf.substitutions[("y", "q")] == 2
    assert conf.deletions["z"] == 1 and conf.insertions["w"] == 1
    assert report.to_json()["confusions"]["substitutions"][0] == ["y", "q", 2]


def test_json_round_trip():
    report = score(PAIRS[:40] + HAND)
    d = json.loads(json.dumps(report.to_json()))
    assert d["wer"] == pytest.approx(report.wer) and d["cer"] == pytest.approx(report.cer)
    assert d["counts"]["word"] == report.words.to_dict()
    assert len(d["utterances"]) == 43 and d["utterances"][-1]["id"] == "u3"
    again = Report.from_json(d)
    assert again == report
    assert again.to_json() == d


def test_normalizer_applies_to_both_sides():
    pairs = [("u", "Twenty-one, Don't!", "twenty one don't")]
    assert score(pairs).wer > 0
    assert score(pairs, NormalizerConfig()).wer == 0


def test_score_dir_writes_reports(tmp_path):
    with open(tmp_path / "hyp.jsonl", "w") as f:
        for utt_id, ref, hyp in HAND:
            f.write(json.dumps({"id": utt_id, "text": hyp.upper(), "ref": ref}) + "\n")
    report = score_dir(tmp_path)
    assert report.wer == pytest.approx(3 / 11)  # upper case normalized away by default
    assert "27.3" in (tmp_path / "result.txt").read_text()
    assert "id: (u3)" in (tmp_path / "alignments.txt").read_text()
    saved = json.loads((tmp_path / "result.json").read_text())
    assert Report.from_json(saved) == report
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_whisper_normalizer_scores_words_not_spelling(tmp_path):
    pairs = [("u1", "Fifteen colours, Mr. Smith.", "15 colors mister smith"), ("u2", "It's late.", "It is late")]
    assert score(pairs, NormalizerConfig()).words.errors == 5  # fifteen/15, colours/colors, mr/mister, it's → it is
    assert score(pairs, text_normalizer("whisper")).words.errors == 0
    with open(tmp_path / "hyp.jsonl", "w") as f:
        for utt_id, ref, hyp in pairs:
            f.write(json.dumps({"id": utt_id, "text": hyp, "ref": ref}) + "\n")
    toolkit, whisper = score_dir(tmp_path), score_dir(tmp_path, scheme="whisper")
    assert toolkit.wer > 0 and whisper.wer == 0
    saved = json.loads((tmp_path / "result_whisper.json").read_text())
    assert saved["normalizer"] == "whisper" and saved["wer"] == 0
    assert json.loads((tmp_path / "result.json").read_text())["wer"] == toolkit.wer  # both reports kept
    assert (tmp_path / "alignments_whisper.txt").exists()


def test_missing_ref_names_file_and_line(tmp_path):
    path = tmp_path / "hyp.jsonl"
    path.write_text('{"id": "u1", "text": "a", "ref": "a"}\n{"id": "u2", "text": "b"}\n')
    with pytest.raises(ValueError, match=r"hyp.jsonl:2: record 'u2' lacks \['ref'\]"):
        read_hyp_jsonl(path)


def test_long_character_sequences_equal_jiwer():
    rng = random.Random(5)
    for _ in range(40):
        ref = "".join(rng.choice("abc ") for _ in range(rng.randint(60, 150))).strip() or "a"
        hyp = list(ref)
        for _ in range(rng.randint(0, 30)):
            p = rng.randrange(len(hyp) + 1)
            if p < len(hyp) and rng.random() < 0.6:
                hyp[p] = rng.choice("abc")
            else:
                hyp.insert(p, rng.choice("abc"))
        hyp = "".join(hyp)
        ours = ErrorCounts.from_alignment(align(list(ref), list(hyp)))
        out = jiwer.process_characters(ref, hyp)
        assert (ours.sub, ours.dele, ours.ins) == (out.substitutions, out.deletions, out.insertions)


@pytest.mark.parametrize("lines, message", [
    (['{"id": "u1", "text": "a", "ref": "a"}', '{"id": "u1", "text": "b", "ref": "b"}'],
     r"hyp.jsonl:2: utterance 'u1' again \(first at .*hyp.jsonl:1\)"),
    ([], r"hyp.jsonl: no hypotheses to score"),
    (['{"id": "u1", "text": null, "ref": "a"}'], r"hyp.jsonl:1: 'text' of 'u1' is null, not a string"),
    (['{"id": "u1", "text": "a", "ref": 7}'], r"hyp.jsonl:1: 'ref' of 'u1' is 7, not a string"),
    (['["u1", "a", "a"]'], r"hyp.jsonl:1: expected a JSON object"),
    (['{"id": "u1", "text": "a", "ref": "a"', ''], r"hyp.jsonl:1: not valid JSON"),
])
def test_bad_hypothesis_files_are_refused_naming_file_and_line(tmp_path, lines, message):
    """A duplicated id would count twice, an empty file would score 0 % WER: both are refused, as are texts
    that are not strings."""
    path = tmp_path / "hyp.jsonl"
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_hyp_jsonl(path)


def test_a_latin1_hypothesis_file_is_refused(tmp_path):
    path = tmp_path / "hyp.jsonl"
    path.write_bytes('{"id": "u1", "text": "caf\u00e9", "ref": "cafe"}\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"hyp.jsonl: not UTF-8 text"):
        read_hyp_jsonl(path)
