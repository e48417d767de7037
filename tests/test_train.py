import dataclasses
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asr_transformer.checkpoint_io import CheckpointError, load_checkpoint, save_checkpoint
from asr_transformer.config import load_config
from asr_transformer.package import average_checkpoints, load_package
from asr_transformer.train.schedule import epochs_that_fit, learning_rate, warmup_inverse_sqrt
from asr_transformer.train.trainer import TrainError, train

TINY = ["model.preset=tiny", "data.max_frames=1500", "data.max_batch=8", "train.warmup_steps=5", "train.lr=2e-3"]


def run(corpus: Path, exp: Path, overrides=(), **kwargs):
    cfg = load_config(None, TINY + list(overrides))
    return train(cfg, corpus / "train.jsonl", corpus / "dev.jsonl", corpus / "tokenizer", exp, device="cpu",
                 threads=1, **kwargs)


def weights(path: Path) -> dict:
    return load_checkpoint(path, format="asr-epoch" if "epoch_" in path.name else "asr-checkpoint")["weights"]


def test_schedule_warms_up_then_decays():
    lrs = [warmup_inverse_sqrt(s, 1e-3, 10) for s in range(1, 41)]
    assert lrs[9] == pytest.approx(1e-3) and max(lrs) == lrs[9]
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10])) and all(a > b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[39] == pytest.approx(1e-3 * (10 / 40) ** 0.5)


def test_cosine_schedule_warms_up_then_reaches_zero_at_the_end():
    lrs = [learning_rate("cosine", s, 1e-3, 10, 40) for s in range(1, 46)]
    assert lrs[9] == pytest.approx(1e-3) and max(lrs) == lrs[9]
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10])) and all(a > b for a, b in zip(lrs[10:39], lrs[11:40]))
    assert lrs[24] == pytest.approx(0.5e-3)  # halfway between warmup and the end
    assert lrs[39] == pytest.approx(0.0, abs=1e-12) and lrs[44] == 0.0  # past the planned end: stays 0
    with pytest.raises(ValueError, match="noam or cosine"):
        learning_rate("linear", 1, 1e-3, 10, 40)


def test_time_budget_plans_the_epochs_that_fit():
    assert epochs_that_fit(1, 20, 60.0, 0.0, 60.0) == 20  # no budget: max_epochs
    assert epochs_that_fit(1, 20, 60.0, 600.0, 60.0) == 10  # 9 more of 60 s fit in the 540 s left
    assert epochs_that_fit(1, 8, 60.0, 600.0, 60.0) == 8  # never more than max_epochs
    assert epochs_that_fit(3, 20, 300.0, 345.0, 50.0) == 4  # 0.9 of an epoch left: one more, ending 5 s over
    assert epochs_that_fit(3, 20, 300.0, 335.0, 50.0) == 3  # 0.7 left: stop now
    assert epochs_that_fit(3, 20, 400.0, 335.0, 50.0) == 3  # already over: never fewer than done


def test_time_budget_shrinks_the_plan_and_the_cosine_still_reaches_zero(tone_corpus, tmp_path, monkeypatch):
    import asr_transformer.train.trainer as trainer

    calls = []

    def fit_two(done, max_epochs, elapsed, budget, epoch_seconds):
        calls.append((done, max_epochs, budget))
        return 2  # as if the measured pace fitted 2 of the 4 epochs in the budget

    monkeypatch.setattr(trainer, "epochs_that_fit", fit_two)
    args = ["train.max_epochs=4", "train.max_minutes=60", "train.schedule=cosine"]
    state = run(tone_corpus, tmp_path / "exp", args)
    assert state.epoch == 2 and state.planned == 2
    assert calls == [(1, 4, 3600.0), (2, 4, 3600.0)]
    assert state.history[0]["lr"] > 0 and state.history[-1]["lr"] == pytest.approx(0.0, abs=1e-12)
    assert run(tone_corpus, tmp_path / "exp", args).epoch == 2  # the plan is kept in the checkpoint


def test_interrupted_run_resumes_to_the_same_weights(tone_corpus, tmp_path):
    aug = ["augment.speed_factors=[0.9,1.0,1.1]", "augment.time_warp=2", "train.max_epochs=2"]
    run(tone_corpus, tmp_path / "full", aug)
    state = run(tone_corpus, tmp_path / "split", aug, stop_after_batches=3)
    assert state.epoch == 0 and state.batch == 3
    state = run(tone_corpus, tmp_path / "split", aug, stop_after_batches=4)  # crosses into epoch 2
    assert state.epoch == 1
    state = run(tone_corpus, tmp_path / "split", aug)
    assert state.epoch == 2
    full, split = weights(tmp_path / "full/checkpoints/last.pt"), weights(tmp_path / "split/checkpoints/last.pt")
    for name in full:
        assert torch.equal(full[name], split[name]), name
    assert weights(tmp_path / "full/checkpoints/epoch_2.pt").keys() == full.keys()


def test_killed_process_resumes_to_the_same_weights(tone_corpus, tmp_path):
    """SIGKILL a real `asr train` process after it saved a mid-epoch checkpoint, then resume."""
    args = ["train.max_epochs=2", "train.checkpoint_minutes=0"]
    run(tone_corpus, tmp_path / "full", args)
    exp = tmp_path / "killed"
    cmd = [sys.executable, "-m", "asr_transformer", "train", "--data", str(tone_corpus), "--exp", str(exp),
           "--device", "cpu", "--threads", "1"] + [f"--set={o}" for o in TINY + args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = exp / "checkpoints/last.pt"
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert last.exists(), "the training process never wrote a checkpoint"
    load_checkpoint(last)  # whatever moment the kill hit, the last checkpoint is intact
    run(tone_corpus, exp, args)
    full, resumed = weights(tmp_path / "full/checkpoints/last.pt"), weights(last)
    for name in full:
        assert torch.equal(full[name], resumed[name]), name


# Runs a training in a child process that SIGKILLs itself at a chosen moment: "during_write", half-way through
# writing the end-of-epoch-2 checkpoint (its temp file is left behind), or "before_log", right after the
# end-of-epoch-1 checkpoint is written and before that epoch's log record is appended.
KILLED_AT = """
import json, os, signal, sys
from pathlib import Path
import asr_transformer.train.run as run
import asr_transformer.train.trainer as trainer
from asr_transformer.config import load_config
from asr_transformer.fileio import atomic_open

corpus, exp, overrides, moment = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
real_save = run.save_checkpoint  # what saves last.pt


def save(path, state, **kwargs):
    epoch_end = path.name == "last.pt" and state["progress"]["batch"] == 0
    if moment == "during_write" and epoch_end and state["progress"]["epoch"] == 2:
        with atomic_open(path, "wb") as f:
            f.write(b"the first bytes of a checkpoint")
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    real_save(path, state, **kwargs)
    if moment == "before_log" and epoch_end and state["progress"]["epoch"] == 1:
        os.kill(os.getpid(), signal.SIGKILL)


run.save_checkpoint = save
trainer.train(load_config(None, overrides), corpus / "train.jsonl", corpus / "dev.jsonl", corpus / "tokenizer", exp,
              device="cpu", threads=1)
"""
TIMING = {"epoch_seconds", "elapsed", "audio_seconds_per_second"}


def log_records(exp: Path) -> list[dict]:
    """The epoch records of exp/train_log.jsonl without their timings."""
    log = exp / "train_log.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


@pytest.mark.parametrize("moment", ["during_write", "before_log"])
def test_kill_at_a_checkpoint_resumes_to_the_weights_and_log_of_an_uninterrupted_run(tone_corpus, tmp_path, moment):
    args = ["train.max_epochs=2"]
    run(tone_corpus, tmp_path / "full", args)
    exp = tmp_path / "killed"
    child = subprocess.run([sys.executable, "-c", KILLED_AT, str(tone_corpus), str(exp), json.dumps(TINY + args),
                            moment], capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    if moment == "during_write":  # the kill left a temp file and the log of epoch 1
        assert len(list((exp / "checkpoints").glob(".last.pt.*.tmp"))) == 1 and len(log_records(exp)) == 1
    else:  # the checkpoint has epoch 1, the log has not
        assert load_checkpoint(exp / "checkpoints/last.pt")["progress"]["epoch"] == 1 and log_records(exp) == []
    run(tone_corpus, exp, args)
    assert not list(exp.rglob("*.tmp"))
    full, resumed = weights(tmp_path / "full/checkpoints/last.pt"), weights(exp / "checkpoints/last.pt")
    for name in full:
        assert torch.equal(full[name], resumed[name]), name
    expected = log_records(tmp_path / "full")
    assert [r["epoch"] for r in expected] == [1, 2] and log_records(exp) == expected


def test_an_interrupted_epoch_logs_what_an_uninterrupted_one_does(tone_corpus, tmp_path):
    """Stopped mid-epoch and resumed, the epoch's record (train loss, gradient norms, metrics) is the same."""
    args = ["train.max_epochs=1", "augment.speed_factors=[0.9,1.0,1.1]"]
    run(tone_corpus, tmp_path / "full", args)
    run(tone_corpus, tmp_path / "split", args, stop_after_batches=2)
    run(tone_corpus, tmp_path / "split", args)
    assert log_records(tmp_path / "split") == log_records(tmp_path / "full") != []


def test_damaged_checkpoint_is_detected_not_loaded(tone_corpus, tmp_path):
    run(tone_corpus, tmp_path / "exp", ["train.max_epochs=1"])
    last = tmp_path / "exp/checkpoints/last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or damaged"):
        load_checkpoint(last)
    with pytest.raises(TrainError, match="last.pt"):
        run(tone_corpus, tmp_path / "exp", ["train.max_epochs=2"])
    # damage that keeps the length and the footer: the checksum catches it
    save_checkpoint(tmp_path / "x.pt", {"weights": {"w": torch.ones(1000)}})
    raw = bytearray((tmp_path / "x.pt").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "x.pt").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="x.pt: checksum mismatch"):
        load_checkpoint(tmp_path / "x.pt")
    # a first-version file (checksum in a sidecar) still loads
    buffer = io.BytesIO()
    torch.save({"format": "asr-checkpoint", "version": 1, "w": torch.ones(3)}, buffer)
    (tmp_path / "old.pt").write_bytes(buffer.getvalue())
    (tmp_path / "old.pt.sha256").write_text(hashlib.sha256(buffer.getvalue()).hexdigest() + "\n")
    assert torch.equal(load_checkpoint(tmp_path / "old.pt")["w"], torch.ones(3))


def test_non_finite_loss_skips_the_step(tone_corpus, tmp_path, monkeypatch):
    from asr_transformer.model.asr import ASRModel

    original = ASRModel.forward
    calls = {"n": 0}

    def poisoned(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls["n"] += 1
        if self.training and calls["n"] == 2:
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(ASRModel, "forward", poisoned)
    state = run(tone_corpus, tmp_path / "exp", ["train.max_epochs=1"])
    assert state.skipped == 1
    for value in weights(tmp_path / "exp/checkpoints/last.pt").values():
        assert torch.isfinite(value.float()).all()


@pytest.mark.parametrize("fused", [True, False])
def test_a_non_finite_gradient_norm_leaves_weights_and_moments_as_they_were(fused):
    from asr_transformer.train.trainer import step_unless_nonfinite

    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.Adam([w], lr=0.1, fused=fused)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    w.grad = torch.full((4,), 0.5)
    step_unless_nonfinite(opt, scaler, torch.nn.utils.clip_grad_norm_([w], 1.0))
    before = (w.detach().clone(), {k: v.clone() for k, v in opt.state[w].items()})
    w.grad = torch.tensor([1.0, float("nan"), 0.0, 0.0])
    step_unless_nonfinite(opt, scaler, torch.nn.utils.clip_grad_norm_([w], 1.0))
    assert torch.equal(w.detach(), before[0])
    assert all(torch.equal(opt.state[w][k], v) for k, v in before[1].items())  # the step count too
    w.grad = torch.full((4,), 0.5)
    step_unless_nonfinite(opt, scaler, torch.nn.utils.clip_grad_norm_([w], 1.0))
    assert not torch.equal(w.detach(), before[0]) and float(opt.state[w]["step"]) == 2


def test_average_packages_the_best_checkpoints(tone_corpus, tmp_path):
    run(tone_corpus, tmp_path / "exp", ["train.max_epochs=3", "train.keep_best=2"])
    kept = sorted(p.name for p in (tmp_path / "exp/checkpoints").glob("epoch_*.pt"))
    assert len(kept) <= 4 and "epoch_3.pt" in kept
    used = average_checkpoints(tmp_path / "exp", tmp_path / "model.pt", best=2, by="valid_loss")
    assert len(used) == 2
    states = [weights(p) for p in used]
    model, tokenizer, cfg = load_package(tmp_path / "model.pt")
    name = "encoder.layers.0.ffn.w1.weight" if "encoder.layers.0.ffn.w1.weight" in states[0] else next(
        k for k, v in states[0].items() if v.is_floating_point() and v.dim() == 2)
    torch.testing.assert_close(model.state_dict()[name], (states[0][name] + states[1][name]) / 2)
    assert tokenizer.vocab_size == cfg.model.vocab_size
    last = average_checkpoints(tmp_path / "exp", tmp_path / "last.pt", last=1)
    assert [p.name for p in last] == ["epoch_3.pt"]


def test_speaker_cmn_trains_and_decodes_with_each_speakers_mean(tone_corpus, tmp_path):
    """Training and `decode_manifest` hand the model each utterance's speaker's mean (the tone corpus has three)."""
    from asr_transformer.data.audio import load_utterance
    from asr_transformer.data.features import fbank, speaker_means
    from asr_transformer.data.manifest import read_manifest
    from asr_transformer.decode.search import recognize
    from asr_transformer.inference.recognizer import Recognizer

    run(tone_corpus, tmp_path / "exp", ["train.max_epochs=2", "model.speaker_cmn=true"])
    average_checkpoints(tmp_path / "exp", tmp_path / "model.pt", last=1)
    model, _, cfg = load_package(tmp_path / "model.pt")
    assert cfg.model.speaker_cmn
    Recognizer(tmp_path / "model.pt", device="cpu", threads=1, mode="ctc", batch_size=3).decode_manifest(
        tone_corpus / "test.jsonl", tmp_path / "dec", score=False)
    got = [json.loads(line)["score"] for line in (tmp_path / "dec/hyp.jsonl").read_text().splitlines()]
    utts = read_manifest(tone_corpus / "test.jsonl")
    assert len({u.speaker for u in utts}) == 3
    feats = [fbank(torch.from_numpy(load_utterance(u, 16000)), cfg.features) for u in utts]
    means = speaker_means([u.speaker for u in utts], lambda i: feats[i])
    opts = dataclasses.replace(cfg.decode, mode="ctc")
    with_means = [recognize(model, f[None], torch.tensor([len(f)]), opts, speaker_mean=mu[None])[0][0].score
                  for f, mu in zip(feats, means)]
    own = [recognize(model, f[None], torch.tensor([len(f)]), opts)[0][0].score for f in feats]
    assert got == pytest.approx(with_means, abs=1e-3)
    assert got != pytest.approx(own, abs=1e-3)


def test_missing_inputs_are_explained(tone_corpus, tmp_path):
    cfg = load_config(None, TINY)
    with pytest.raises(TrainError, match="asr tokenizer"):
        train(cfg, tone_corpus / "train.jsonl", tone_corpus / "dev.jsonl", tmp_path / "nope", tmp_path / "e")
    with pytest.raises(TrainError, match="manifest not found"):
        train(cfg, tmp_path / "x.jsonl", tone_corpus / "dev.jsonl", tone_corpus / "tokenizer", tmp_path / "e")


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_two_process_ddp_matches_one_process_with_the_same_global_batch(tone_corpus, tmp_path):
    args = ["train.max_epochs=1", "model.dropout=0.0", "augment.freq_masks=0", "augment.time_masks=0",
            "data.max_frames=800"]
    from asr_transformer.config import FeatureConfig
    from asr_transformer.data.draws import utterance_frames
    from asr_transformer.data.sampler import FrameBatchSampler
    from asr_transformer.data.manifest import read_manifest

    frames = utterance_frames(read_manifest(tone_corpus / "train.jsonl"), FeatureConfig())
    assert len(FrameBatchSampler(frames, 800, 8, seed=1).batches(0)) % 2 == 0, "pick data.max_frames for even batches"
    run(tone_corpus, tmp_path / "single", args + ["train.accum_grad=2"])
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc_per_node=2", "--master_port=29517", "-m", "asr_transformer", "train",
           "--data", str(tone_corpus), "--exp", str(tmp_path / "ddp"), "--device", "cpu", "--threads", "1"]
    cmd += [f"--set={o}" for o in TINY + args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    single, ddp = weights(tmp_path / "single/checkpoints/last.pt"), weights(tmp_path / "ddp/checkpoints/last.pt")
    for name in single:
        torch.testing.assert_close(single[name], ddp[name], atol=2e-5, rtol=1e-4, msg=name)


def test_time_limit_stops_after_the_epoch_that_crosses_it(tone_corpus, tmp_path):
    state = run(tone_corpus, tmp_path / "exp", ["train.max_epochs=5", "train.max_minutes=0.00001"])
    assert state.epoch == 1
    assert run(tone_corpus, tmp_path / "exp", ["train.max_epochs=5", "train.max_minutes=0.00001"]).epoch == 1


@pytest.mark.parametrize("amx, expected", [(True, "bf16"), (False, "fp32")])
def test_auto_precision_trains_in_bf16_only_where_the_cpu_has_amx(tone_corpus, tmp_path, monkeypatch, amx, expected):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    state = run(tone_corpus, tmp_path / "exp", ["train.max_epochs=1", "train.precision=auto"])
    assert [r["precision"] for r in state.history] == [expected]


def test_init_from_takes_the_listed_modules_of_a_package_and_keeps_the_runs_cmvn(tone_corpus, tiny_package, tmp_path):
    """Fine-tuning: the encoder of a package with another vocabulary starts the run; nothing else is taken."""
    package = load_checkpoint(tiny_package / "model.pt", format="asr-model")["weights"]
    # lr 1e-9: the first epoch moves the weights it started from by far less than assert_close's tolerance
    run(tone_corpus, tmp_path / "exp", ["train.max_epochs=1", "train.lr=1e-9",
                                        f"train.init_from={tiny_package / 'model.pt'}", "train.init_modules=[encoder]"])
    start = weights(tmp_path / "exp/checkpoints/epoch_1.pt")
    assert start["ctc.proj.weight"].shape != package["ctc.proj.weight"].shape  # another vocabulary
    encoder = [n for n in start if n.startswith("encoder.")]
    assert len(encoder) > 20
    for name in encoder:
        torch.testing.assert_close(start[name], package[name], msg=name)
    assert not torch.equal(start["decoder.layers.0.self_attn.q.weight"], package["decoder.layers.0.self_attn.q.weight"])
    cmvn = json.loads((tmp_path / "exp/cmvn.json").read_text())
    torch.testing.assert_close(start["cmvn_mean"], torch.tensor(cmvn["mean"], dtype=torch.float32))
    assert not torch.equal(start["cmvn_mean"], package["cmvn_mean"])


def test_init_from_refuses_what_does_not_fit(tone_corpus, tiny_package, tmp_path):
    init = f"train.init_from={tiny_package / 'model.pt'}"
    with pytest.raises(TrainError, match=r"embed\.weight is \(21, 64\), this model.s is \(11, 64\)"):
        run(tone_corpus, tmp_path / "a", ["train.max_epochs=1", init])  # the whole model, another vocabulary
    with pytest.raises(TrainError, match="'encoders' names no parameter"):
        run(tone_corpus, tmp_path / "b", ["train.max_epochs=1", init, "train.init_modules=[encoders]"])
    with pytest.raises(TrainError, match="Expected a model package"):
        run(tone_corpus, tmp_path / "c", ["train.max_epochs=1", "train.init_modules=[encoder]",
                                          f"train.init_from={tone_corpus / 'train.jsonl'}"])


def test_training_without_tensorboard_says_how_to_turn_it_on(tmp_path, monkeypatch, capsys):
    import sys

    from asr_transformer.train.trainer import _tensorboard

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the extra were not installed
    assert _tensorboard(tmp_path) is None
    err = capsys.readouterr().err
    assert "pip install tensorboard" in err and len(err.strip().splitlines()) == 1


def test_frozen_modules_keep_their_weights_and_the_rest_trains(tone_corpus, tmp_path):
    """train.freeze_modules: the encoder ends as it started (the initial checkpoint's), the decoder moves."""
    run(tone_corpus, tmp_path / "a", ["train.max_epochs=1", "train.freeze_modules=[encoder]"])
    run(tone_corpus, tmp_path / "b", ["train.max_epochs=1", "train.lr=1e-12"])  # the same start, barely trained
    frozen, start = weights(tmp_path / "a/checkpoints/epoch_1.pt"), weights(tmp_path / "b/checkpoints/epoch_1.pt")
    for name in (n for n in frozen if n.startswith("encoder.")):
        torch.testing.assert_close(frozen[name], start[name], msg=name)
    assert not torch.allclose(frozen["decoder.layers.0.self_attn.q.weight"], start["decoder.layers.0.self_attn.q.weight"])
    with pytest.raises(TrainError, match="'encoders' names no parameter"):
        run(tone_corpus, tmp_path / "c", ["train.max_epochs=1", "train.freeze_modules=[encoders]"])


def test_without_a_terminal_training_prints_progress_lines(tone_corpus, tmp_path, monkeypatch, capsys):
    """A run whose output goes to a log (no progress bar) still says where it is, every LOG_LINE_SECONDS."""
    from asr_transformer.train import trainer

    monkeypatch.setattr(trainer, "LOG_LINE_SECONDS", 0.0)
    run(tone_corpus, tmp_path / "exp", ["train.max_epochs=1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch 1/1, batch ")]
    assert lines and all(" loss " in line and " s/s" in line for line in lines)
