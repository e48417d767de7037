"""The experiment folder: resume only the same run (config, manifests, tokenizer), --force moves an old run aside,
one training at a time (a lock that dies with its holder), stale temp files removed on start."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.config import load_config
from asr_transformer.train.experiment import ExperimentError, remove_stale_temps
from asr_transformer.train.trainer import train

TINY = ["model.preset=tiny", "data.max_frames=1500", "data.max_batch=8", "train.warmup_steps=5", "train.lr=2e-3",
        "train.max_epochs=1"]


def run(data: Path, exp: Path, overrides=(), **kwargs):
    cfg = load_config(None, TINY + list(overrides))
    return train(cfg, data / "train.jsonl", data / "dev.jsonl", data / "tokenizer", exp, device="cpu", threads=1,
                 **kwargs)


@pytest.fixture
def trained(tone_corpus, tmp_path):
    """A copy of the tone corpus's manifests and tokenizer, and one epoch trained on it into tmp_path/exp."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.jsonl", "dev.jsonl"):
        shutil.copy(tone_corpus / name, data / name)
    shutil.copytree(tone_corpus / "tokenizer", data / "tokenizer")
    run(data, tmp_path / "exp")
    return data, tmp_path / "exp"


def config_value(path: Path, section: str, key: str):
    return yaml.safe_load(path.read_text())[section][key]


def test_resume_refuses_a_changed_model_or_training_setting(trained, capsys):
    data, exp = trained
    last = (exp / "checkpoints/last.pt").read_bytes()
    with pytest.raises(ExperimentError, match=rf"^model\.d_model: 64 in {exp}/config\.yaml, 128 now; {exp} holds "
                                              rf"another run: train into a new --exp, or add --force .*replaced-1"):
        run(data, exp, ["model.d_model=128"])
    with pytest.raises(ExperimentError, match=r"^train\.lr: 0\.002 in .*, 0\.001 now.*\(and train\.seed\)"):
        run(data, exp, ["train.lr=1e-3", "train.seed=7"])
    with pytest.raises(ExperimentError, match=r'^train\.precision: "fp32" in .*, "bf16" now'):
        run(data, exp, ["train.precision=bf16"])
    # nothing was touched by the refusals
    assert config_value(exp / "config.yaml", "model", "d_model") == 64
    assert (exp / "checkpoints/last.pt").read_bytes() == last
    # the run may grow, and save or log at another pace
    capsys.readouterr()
    state = run(data, exp, ["train.max_epochs=2", "train.checkpoint_minutes=5", "train.log_interval=3"])
    assert state.epoch == 2
    assert f"resuming {exp} at epoch 2 of 2 (step {state.history[0]['step']})" in capsys.readouterr().out
    assert config_value(exp / "config.yaml", "train", "max_epochs") == 2
    run(data, exp, ["train.max_epochs=2"])
    assert f"{exp}: nothing to resume: 2 epochs trained (step {state.step}), 2 planned" in capsys.readouterr().out


def test_the_cli_refuses_in_one_line(trained):
    data, exp = trained
    result = CliRunner().invoke(app, ["train", "--data", str(data), "--exp", str(exp), "--device", "cpu", "--threads",
                                      "1", *[f"--set={o}" for o in TINY], "--set=model.heads=4"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error: model.heads: 2 in") and "--force" in lines[-1]


def test_resume_refuses_changed_data_but_not_the_same_content_rewritten(trained):
    data, exp = trained
    original = (data / "train.jsonl").read_text()
    (data / "train.jsonl").write_text("".join(original.splitlines(keepends=True)[:-1]))  # one utterance less
    with pytest.raises(ExperimentError, match=rf"^training manifest {data}/train\.jsonl: sha256 [0-9a-f]{{12}} in "
                                              rf"{exp}/inputs\.json, [0-9a-f]{{12}} now \(its content changed\); "
                                              rf".*--force"):
        run(data, exp, ["train.max_epochs=2"])
    (data / "train.jsonl").write_text(original)  # the same content again (a new mtime): the run resumes
    assert run(data, exp, ["train.max_epochs=2"]).epoch == 2


def test_force_moves_the_old_run_aside(trained):
    data, exp = trained
    state = run(data, exp, ["model.d_model=128"], force=True)
    assert state.epoch == 1 and len(state.history) == 1
    old = exp / "replaced-1"
    assert config_value(old / "config.yaml", "model", "d_model") == 64
    assert (old / "checkpoints/epoch_1.pt").exists() and (old / "train_log.jsonl").exists()
    assert config_value(exp / "config.yaml", "model", "d_model") == 128
    assert len((exp / "train_log.jsonl").read_text().splitlines()) == 1
    run(data, exp, force=True)  # a second --force: replaced-2, and replaced-1 stays where it is
    assert config_value(exp / "replaced-2/config.yaml", "model", "d_model") == 128
    assert (exp / "replaced-1/config.yaml").exists() and not (exp / "replaced-2/replaced-1").exists()


LOCK_HOLDER = """
import sys, time
from asr_transformer.train.experiment import lock
with lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_training_into_a_locked_folder_is_refused_until_the_holder_dies(tone_corpus, tmp_path):
    exp = tmp_path / "exp"
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(exp)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ExperimentError, match=rf"^{exp}: another training \(pid {holder.pid}\) is running in "
                                                  rf"this folder; .* or train into a new --exp"):
            run(tone_corpus, exp)
        assert not (exp / "config.yaml").exists()
    finally:
        holder.kill()  # SIGKILL: no chance to clean up, and the lock goes with the process
        holder.wait()
    assert run(tone_corpus, exp).epoch == 1


def test_stale_temp_files_are_removed_and_nothing_else(tmp_path):
    exp = tmp_path / "exp"
    (exp / "checkpoints").mkdir(parents=True)
    stale = [exp / "checkpoints/.last.pt.k2x_9abc.tmp", exp / ".train_log.jsonl.a1b2c3d4.tmp"]
    kept = [exp / "checkpoints/last.pt", exp / "notes.tmp", exp / ".lock", exp / "checkpoints/.last.pt.tmp.keep"]
    for path in stale + kept:
        path.write_text("x")
    assert sorted(remove_stale_temps(exp)) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)
