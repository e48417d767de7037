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
    data, exp = tmp_path / "data", tmp_path / "exp"
    cmd = ["make", "-C", str(ROOT / "recipes/synthetic"), f"ASR={asr}", f"DATA={data}", f"EXP={exp}",
           "CONF=conf/tiny.yaml", "HOURS=0.01", "VOCAB=40", "MODES=greedy,ctc", "BEAM=2", "THREADS=1",
           "TRAIN_ARGS=--set data.min_duration=0.1"]
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
    assert "WORD" in result.stdout or "Snt" in result.stdout  # the score table was printed
    assert list((exp / "transcribe").glob("*.srt"))
    # a second run finds every stage complete and does nothing but print the tables again
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "asr train" not in again.stdout


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
