"""The default recipe's stages wired end to end, in miniature (a few utterances, a tiny model)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_default_recipe_in_miniature(tmp_path):
    pytest.importorskip("espeakng_loader", reason="the synthetic corpus needs espeakng-loader")
    asr = Path(sys.executable).with_name("asr")
    # the experiment in a copy of the recipe's layout, so that recipes/results.py can report it
    recipe = tmp_path / "recipes/synthetic"
    shutil.copytree(ROOT / "recipes/synthetic/conf", recipe / "conf")
    shutil.copy(ROOT / "recipes/synthetic/Makefile", recipe)
    shutil.copy(ROOT / "recipes/common.mk", recipe.parent)
    data, exp = tmp_path / "data", recipe / "exp/tiny"
    extra = tmp_path / "more_text.txt"  # LM_TEXT: more text for the LM, beside the training texts
    extra.write_text("spell it a b c\nfive past nine\n")
    # a time budget too small for the 2 epochs asked: the plan shrinks to 1
    cmd = ["make", "-C", str(ROOT / "recipes/synthetic"), f"ASR={asr}", f"DATA={data}", f"EXP={exp}",
           "CONF=conf/tiny.yaml", "HOURS=0.01", "VOCAB=40", "MODES=greedy,ctc", "BEAM=2", "THREADS=1",
           "LM_ORDER=2", "LM_MODES=beam", "LM_WEIGHT=0.2", f"LM_TEXT={extra}",
           "TRAIN_ARGS=--set data.min_duration=0.1 --set train.max_epochs=2 --set train.max_minutes=0.0001"]
    # the grammar's dev/test sizes are options of `asr prepare synthetic`; keep them tiny here
    subprocess.run(["make", "-C", str(ROOT / "recipes/synthetic"), f"ASR={asr}", f"DATA={data}", "prepare",
                    "PREPARE_ARGS=--dev-utts 6 --test-utts 6"], check=True, capture_output=True, timeout=300)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for mode in ("greedy", "ctc"):
        scores = json.loads((exp / "decode_test" / mode / "result.json").read_text())
        assert 0.0 <= scores["wer"] and "utterances" in json.dumps(scores)
        assert (exp / "decode_test" / mode / "rtf.json").exists()
        assert (exp / "decode_test" / mode / "text").exists()
    lm_run = json.loads((exp / "decode_test_lm" / "rtf.json").read_text())  # LM_MODES decoded again with the LM
    assert lm_run["mode"] == "beam" and lm_run["lm"] == str(data / "lm_2gram.arpa")
    assert (exp / "decode_test_lm" / "result.json").exists() and (data / "lm_2gram.arpa").exists()
    train_texts = len((data / "train.jsonl").read_text().splitlines()) - 1  # less the header line
    assert f"2-gram LM from {train_texts + 2} sentences" in result.stdout  # the training texts and LM_TEXT's 2
    assert "WORD" in result.stdout or "Snt" in result.stdout  # the score table was printed
    assert list((exp / "transcribe").glob("*.srt"))
    # a second run finds every stage complete and does nothing but print the tables again
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "asr train" not in again.stdout
    report = subprocess.run([sys.executable, str(ROOT / "recipes/results.py"), str(exp), "--out", "RESULTS.md"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## synthetic: `exp/tiny`" in text
    assert ('- Reproduce: `make -C recipes/synthetic CONF=conf/tiny.yaml EXP=exp/tiny BEAM=2 LM_ORDER=2 LM_WEIGHT=0.2 '
            'LM_MODES=beam TRAIN_ARGS="--set train.max_epochs=2 --set train.max_minutes=0.0001"`'
            ) in text  # data.min_duration=0.1 is the default; LM_BEAM is BEAM, so not repeated
    assert "1 epochs (of train.max_epochs=2: what fitted in train.max_minutes=0.0001)" in text
    assert "| greedy |" in text and "| ctc |" in text and "| beam + 2-gram LM `lm_2gram.arpa` (beam 2, weight 0.2, length bonus 0) |" in text


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_fsdd_recipe_adds_synthetic_digits_to_training_unless_told_not_to(tmp_path):
    def planned(*args):
        cmd = ["make", "-n", "-C", str(ROOT / "recipes/fsdd"), "ASR=asr", f"DATA={tmp_path / 'data'}",
               f"EXP={tmp_path / 'exp'}", "SOURCE=/corpus/fsdd", *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    steps = planned()
    assert "asr prepare synthetic" in steps and "--text-file digits.txt --share-texts" in steps
    assert f"asr combine {tmp_path / 'data/train_tts.jsonl'} {tmp_path / 'data/train.jsonl'}" in steps
    assert "--train-manifest train_tts.jsonl" in steps
    steps = planned("TTS_HOURS=0")
    assert "asr prepare synthetic" not in steps and "--train-manifest train.jsonl" in steps


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_kathleen_lm_reads_english_text_without_the_held_out_prompts_unless_told_not_to(tmp_path):
    def planned(*args):
        cmd = ["make", "-n", "-C", str(ROOT / "recipes/kathleen"), "ASR=asr", f"DATA={tmp_path / 'data'}",
               f"EXP={tmp_path / 'exp'}", "SOURCE=/corpus/kathleen", "lm", *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    data = tmp_path / "data"
    steps = planned()
    assert f"local/english_text.py --exclude {data}/dev.jsonl {data}/test.jsonl" in steps
    assert f"{data}/english_words_1000000.txt {data}/english_text.txt --tokenizer" in steps
    assert f"--out {data}/lm_8gram_words1000000_text.arpa" in steps
    assert f"--debs /mirror/debs --out {data}/english_text.txt" in planned("DEBS=/mirror/debs")
    steps = planned("ENGLISH_TEXT=0")
    assert "english_text" not in steps and f"--out {data}/lm_8gram_words1000000.arpa" in steps
