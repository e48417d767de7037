"""The training loop: teacher forcing + CTC, Adam with a warmup schedule (Noam or cosine), validation, checkpoints,
exact resume, mixed precision, gradient accumulation and DistributedDataParallel.

Resume restores model, optimizer, scaler, step, epoch, the position inside the epoch and the
RNG states; batches and augmentation depend only on (seed, epoch, utterance), so a resumed run
follows the same trajectory as one that was never stopped. It resumes only the same run: the experiment
folder's lock, config and input checks are `train/experiment.py`'s; what comes before the first epoch (device,
data, model, resume) is `train/setup.py`'s, and where a run stands is `train/run.py`'s.

The log and the checkpoint agree after any kill: each epoch's log record is kept in the checkpoint
(`Progress.history`), and every start makes `train_log.jsonl` hold exactly those records: the ones a kill
kept from the log are appended, any past the checkpoint are dropped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from asr_transformer.checkpoint_io import remove_checkpoint, save_checkpoint
from asr_transformer.config import Config, to_dict
from asr_transformer.data.tokenizer import Tokenizer
from asr_transformer.device import autocast
from asr_transformer.model.asr import ASRModel
from asr_transformer.model.lora import merged_state_dict
from asr_transformer.package import tied
from asr_transformer.progress import progress_bar
from asr_transformer.train import experiment
from asr_transformer.train.run import Progress, Run, TrainError
from asr_transformer.train.schedule import epochs_that_fit, learning_rate
from asr_transformer.train.setup import setup

@torch.no_grad()
def validate(model: ASRModel, loader, tokenizer: Tokenizer, device, precision: str, greedy_wer: bool = False) -> dict:
    """Dev-set losses, decoder token accuracy, CTC-greedy CER (%) and, with `greedy_wer`, the WER (%) of greedy
    attention decoding (what early stopping on dev WER ranks epochs by)."""
    from asr_transformer.decode.greedy import greedy_search
    from asr_transformer.scoring import score

    model.eval()
    totals: dict[str, float] = {}
    utts, tokens, pairs, decoded = 0, 0, [], []
    for batch in loader:
        batch = batch.to(device)
        with autocast(device, precision):
            enc, enc_lens = model.encode(batch.feats, batch.feat_lens, batch.speaker_mean)
            out = model.losses(enc, enc_lens, batch.tokens, batch.token_lens)
        n, t = len(batch.ids), int(batch.token_lens.sum()) + len(batch.ids)
        for key in ("loss", "loss_att", "loss_ctc", "loss_nat"):
            if key in out:
                totals[key] = totals.get(key, 0.0) + float(out[key]) * n
        for key in ("acc", "acc_nat"):  # token accuracies: weighted by tokens
            if key in out:
                totals[key] = totals.get(key, 0.0) + float(out[key]) * t
        if model.cfg.ctc_weight > 0:
            for utt_id, ids, ref in zip(batch.ids, model.ctc_greedy(enc.float(), enc_lens), batch.texts):
                pairs.append((utt_id, ref, tokenizer.decode(ids)))
        if greedy_wer:
            for utt_id, nbest, ref in zip(batch.ids, greedy_search(model, enc.float(), enc_lens), batch.texts):
                decoded.append((utt_id, ref, tokenizer.decode(nbest[0].tokens)))
        utts, tokens = utts + n, tokens + t
    metrics = {f"valid_{k}": v / (tokens if k.startswith("acc") else utts) for k, v in totals.items()}
    if pairs:
        metrics["valid_cer"] = 100.0 * score(pairs).cer
    if decoded:
        metrics["valid_wer"] = 100.0 * score(decoded, tokenizer.normalizer).wer
    return metrics


def train(cfg: Config, train_manifest, dev_manifest, tokenizer_dir, exp, device: str = "auto",
          threads: int = 0, stop_after_batches: int | None = None, force: bool = False) -> Progress:
    """Train into `exp`, resuming from `exp/checkpoints/last.pt` when present.

    The process of rank 0 holds the folder's lock for the run; a folder holding another run (another config
    or other inputs) is refused, or with `force` moved aside (`experiment.start`).
    `stop_after_batches` stops (after checkpointing) once that many batches ran in this call;
    tests use it to interrupt a run.
    """
    if not Path(tokenizer_dir, "tokenizer.json").exists():
        raise TrainError(f"{tokenizer_dir}: no tokenizer; make one with `asr tokenizer {train_manifest} --out {tokenizer_dir}`")
    for m in (train_manifest, dev_manifest):
        if not Path(m).exists():
            raise TrainError(f"{m}: manifest not found; make it with `asr prepare`")
    main = int(os.environ.get("RANK", "0")) == 0
    with experiment.lock(exp) if main else contextlib.nullcontext():
        return _train(cfg, train_manifest, dev_manifest, tokenizer_dir, Path(exp), device, threads,
                      stop_after_batches, force)


LOG_LINE_SECONDS = 60.0  # without a terminal, a progress line this often


@dataclass
class _Epoch:
    """One epoch's counters while it runs (what survives a resume is in Progress)."""

    n_batches: int  # batches of the epoch
    total_steps: int  # where the schedule ends: epoch 0's steps × the planned epochs
    started: float  # time.monotonic() at its start (of this call's part of it)
    elapsed_before: float  # training seconds before it started
    micro: int = 0  # micro-batches accumulated since the last optimizer step
    frames_done: int = 0  # feature frames trained on in this call
    last_norm: float | None = None  # the last finite gradient norm
    shown: float = 0.0  # time.monotonic() when the progress bar's line was last written
    logged: float = 0.0  # ... and when a progress line was last printed (no terminal: a log file)
    # on the device, read by `_flush` every train.log_interval steps, not every batch (a read waits for the GPU)
    losses: list = field(default_factory=list)  # each batch's loss (0-d tensors)
    norms: list = field(default_factory=list)  # each optimizer step's gradient norm (non-finite: skipped)


def _train(cfg: Config, train_manifest, dev_manifest, tokenizer_dir, exp: Path, device: str, threads: int,
           stop_after_batches: int | None, force: bool) -> Progress:
    run = setup(cfg, train_manifest, dev_manifest, tokenizer_dir, exp, device, threads, force)
    run.stop_after_batches = stop_after_batches

    def on_signal(signum, _frame):
        run.stop_signal = signum

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    run.writer = _tensorboard(exp) if run.dist.main else None
    run.last_save = time.monotonic()
    tc = run.cfg.train
    try:
        while run.running():
            epoch = run_epoch(run)
            if epoch is None:  # interrupted inside the epoch (last.pt saved)
                return run.state
            end_epoch(run, epoch)
            if run.dist.any(run.stop_signal is not None):  # a signal to any rank stops them all here
                run.say("stopped after the epoch; re-run the same command to resume")
                return run.state
        if tc.max_minutes > 0 and run.state.epoch < tc.max_epochs:
            run.say(f"training time limit: {run.state.epoch} of train.max_epochs={tc.max_epochs} epochs in "
                    f"{run.state.elapsed / 60:.1f} min (train.max_minutes={tc.max_minutes:g})")
        return run.state
    finally:
        for s, handler in old_handlers.items():
            signal.signal(s, handler)
        if run.writer is not None:
            run.writer.close()
        run.dist.close()


def run_epoch(run: Run) -> _Epoch | None:
    """Train the current epoch from the batch where it stands; None when interrupted (by a signal or
    `stop_after_batches`) inside it, after saving last.pt at an optimizer step."""
    state, dist = run.state, run.dist
    run.sampler.set_epoch(state.epoch, start=state.batch)
    run.model.train()
    # where the cosine schedule reaches 0: epoch 0's steps × the planned epochs (with speed perturbation
    # the epochs' batch counts differ by ~1 %, so the decay ends up to ~1 % of the steps early or late)
    epoch = _Epoch(n_batches=len(run.sampler.batches(state.epoch)), total_steps=run.steps_per_epoch * run.epochs(),
                   started=time.monotonic(), elapsed_before=state.elapsed)
    epoch.logged = epoch.started
    with progress_bar(extra="{task.fields[info]}", disable=not dist.main or not sys.stderr.isatty()) as bar:
        task = bar.add_task(f"epoch {state.epoch + 1}/{run.epochs()}", total=epoch.n_batches,
                            completed=state.batch, info="")
        for batch in run.train_loader:
            if batch is None:  # none of its audio could be read (warned): counted, so a resume starts
                state.batch += 1  # at the sampler's next batch
                continue
            epoch.frames_done += batch.frames  # read on the host, before the copy
            stepped = _train_step(run, epoch, batch.to(run.dev, non_blocking=True))
            state.batch += 1
            run.batches_run += 1
            bar.update(task, advance=1)
            if stepped and (state.step % run.cfg.train.log_interval == 0 or time.monotonic() - epoch.shown > 2):
                _report(run, epoch, bar, task, tensorboard=state.step % run.cfg.train.log_interval == 0)
            if _save_or_stop(run, epoch):
                return None
    _flush(run, epoch)
    return epoch


def _train_step(run: Run, epoch: _Epoch, batch) -> bool:
    """Forward and backward one batch; at the end of an accumulation, clip, set the learning rate and step the
    optimizer. → whether the optimizer stepped.

    Nothing here waits for the GPU: the loss and the gradient norm stay on the device (`_flush` reads them), and
    a non-finite gradient norm (from a non-finite loss too) makes the fused optimizer leave the weights and its
    moments as they were (its `found_inf`, as GradScaler uses it), on every rank alike."""
    state, tc, optimizer, scaler = run.state, run.cfg.train, run.optimizer, run.scaler
    prob = tc.scheduled_sampling * min(1.0, state.step / max(1, epoch.total_steps))
    boundary = (epoch.micro + 1) % tc.accum_grad == 0 or state.batch + 1 == epoch.n_batches
    sync = run.ddp.no_sync() if run.dist.world > 1 and not boundary else contextlib.nullcontext()
    with sync:
        with autocast(run.dev, run.precision):
            out = run.ddp(batch.feats, batch.feat_lens, batch.tokens, batch.token_lens,
                          sampling_prob=prob, speaker_mean=batch.speaker_mean)
        loss = out["loss"].float()
        scaler.scale(loss / tc.accum_grad).backward()
    epoch.losses.append(loss.detach())
    epoch.micro += 1
    if not boundary:
        return False
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), tc.clip_grad)
    epoch.norms.append(norm.detach())
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(tc.schedule, state.step + 1, tc.lr, run.warmup, epoch.total_steps)
    step_unless_nonfinite(optimizer, scaler, norm)
    state.step += 1
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    epoch.micro = 0
    return True


def step_unless_nonfinite(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                           norm: torch.Tensor) -> None:
    """Step the optimizer unless `norm` is not finite, without reading it on the host where the optimizer can
    skip on the device (fused: its `found_inf`); fp16's GradScaler skips on its own overflow check."""
    if scaler.is_enabled():
        scaler.step(optimizer)
    elif optimizer.defaults.get("fused"):
        optimizer.grad_scale, optimizer.found_inf = None, (~torch.isfinite(norm)).float()
        try:
            optimizer.step()
        finally:
            del optimizer.grad_scale, optimizer.found_inf
    elif torch.isfinite(norm):
        optimizer.step()


def _flush(run: Run, epoch: _Epoch) -> None:
    """Add the losses and gradient norms held on the device to where training stands (one read, in the order
    they came, so that the sums do not depend on when it runs: a resumed run logs what an uninterrupted one does)."""
    state, clip = run.state, run.cfg.train.clip_grad
    losses = torch.stack(epoch.losses).tolist() if epoch.losses else []
    norms = torch.stack(epoch.norms).float().tolist() if epoch.norms else []
    epoch.losses, epoch.norms = [], []
    for loss in losses:
        if math.isfinite(loss):
            state.epoch_loss += loss
            state.epoch_batches += 1
    for norm in norms:
        if math.isfinite(norm):
            epoch.last_norm = norm
            state.norm_sum += norm
            state.norm_count += 1
            state.clipped += norm > clip
        else:
            state.skipped += 1


def _report(run: Run, epoch: _Epoch, bar, task, tensorboard: bool) -> None:
    """The progress bar's line (every few seconds), and TensorBoard's training curves (every train.log_interval
    steps: the mean loss since the last ones)."""
    state = run.state
    epoch.shown = time.monotonic()
    before = (state.epoch_loss, state.epoch_batches)
    _flush(run, epoch)
    rate = epoch.frames_done / max(1e-9, time.monotonic() - epoch.started)
    lr = run.optimizer.param_groups[0]["lr"]
    info = (f"loss {state.epoch_loss / max(1, state.epoch_batches):.3f} lr {lr:.2e} "
            f"{rate * run.cfg.features.frame_shift_ms / 1000:.0f} s/s")
    bar.update(task, info=info)
    if bar.disable and run.dist.main and epoch.shown - epoch.logged >= LOG_LINE_SECONDS:  # a log, not a terminal
        epoch.logged = epoch.shown
        run.say(f"epoch {state.epoch + 1}/{run.epochs()}, batch {state.batch}/{epoch.n_batches}: {info}")
    new_batches = state.epoch_batches - before[1]
    if tensorboard and run.writer is not None and new_batches:
        run.writer.add_scalar("train/loss", (state.epoch_loss - before[0]) / new_batches, state.step)
        run.writer.add_scalar("train/lr", lr, state.step)
        if epoch.last_norm is not None:
            run.writer.add_scalar("train/grad_norm", epoch.last_norm, state.step)


def _save_or_stop(run: Run, epoch: _Epoch) -> bool:
    """At an optimizer step: save last.pt every train.checkpoint_minutes, or when interrupted; → whether to stop."""
    state = run.state
    at_boundary = epoch.micro == 0
    due = (time.monotonic() - run.last_save) >= run.cfg.train.checkpoint_minutes * 60
    interrupted = run.stop_signal is not None or (
        run.stop_after_batches is not None and run.batches_run >= run.stop_after_batches)
    if at_boundary:  # a signal may reach the ranks at different batches: all stop at the first rank's
        interrupted = run.dist.any(interrupted)
    if at_boundary and (due or interrupted) and state.batch < epoch.n_batches:
        _flush(run, epoch)
        state.elapsed = epoch.elapsed_before + time.monotonic() - epoch.started
        run.save_last()
    if interrupted and at_boundary:
        run.say(f"stopped at epoch {state.epoch + 1}, batch {state.batch}; re-run the same command to resume")
        return True
    return False


def end_epoch(run: Run, epoch: _Epoch) -> None:
    """After an epoch: validate, save its checkpoint and prune the others (rank 0), move on to the next epoch
    (re-planning to the time budget), save last.pt, and log the epoch."""
    state, dist, tc = run.state, run.dist, run.cfg.train
    epoch_seconds = time.monotonic() - epoch.started
    # every rank takes rank 0's clock: the time budget must stop them all after the same epoch
    epoch_seconds, state.elapsed = dist.from_main(epoch_seconds, epoch.elapsed_before + epoch_seconds)
    if dist.main:
        metrics = validate(run.model, run.dev_loader, run.tokenizer, run.dev, run.precision,
                           greedy_wer=tc.best_metric == "valid_wer")
    dist.barrier()
    record = None
    if dist.main:
        record = _epoch_record(run, epoch, epoch_seconds, metrics)
        _save_epoch(run.ckpt_dir, state.epoch + 1, run.model, run.cfg, run.tokenizer, record)
        state.history.append(record)
        _prune(run.ckpt_dir, state.history, tc.keep_best, tc.best_metric)
    state.epoch += 1
    state.batch, state.epoch_loss, state.epoch_batches = 0, 0.0, 0
    state.norm_sum, state.norm_count, state.clipped = 0.0, 0, 0
    if tc.max_minutes > 0:  # re-plan so that the schedule ends (cosine: anneals) inside the time budget
        _replan(run, epoch_seconds)
    run.save_last()
    if dist.main:
        _log_epoch(run, record)


def _epoch_record(run: Run, epoch: _Epoch, epoch_seconds: float, metrics: dict) -> dict:
    """The epoch's line of train_log.jsonl (also kept in its checkpoint and in Progress.history)."""
    state, frame_shift = run.state, run.cfg.features.frame_shift_ms
    return {"epoch": state.epoch + 1, "step": state.step, "train_loss": state.epoch_loss / max(1, state.epoch_batches),
            "lr": run.optimizer.param_groups[0]["lr"], "skipped_steps": state.skipped,
            "grad_norm": state.norm_sum / max(1, state.norm_count),
            "clipped": state.clipped / max(1, state.norm_count),
            "epoch_seconds": round(epoch_seconds, 2), "elapsed": round(state.elapsed, 2), "precision": run.precision,
            "audio_seconds_per_second": round(epoch.frames_done * frame_shift / 1000 / max(1e-9, epoch_seconds), 2),
            **metrics}


def _replan(run: Run, epoch_seconds: float) -> None:
    """With train.max_minutes: the epochs that fit in the time left at this epoch's speed become the plan."""
    tc = run.cfg.train
    before = run.epochs()
    run.state.planned = epochs_that_fit(run.state.epoch, tc.max_epochs, run.state.elapsed, tc.max_minutes * 60,
                                        epoch_seconds)
    if run.epochs() != before:
        run.say(f"{run.epochs()} of train.max_epochs={tc.max_epochs} epochs fit in train.max_minutes="
                f"{tc.max_minutes:g} at {epoch_seconds:.0f} s per epoch: the schedule now ends there")


def _log_epoch(run: Run, record: dict) -> None:
    """Append the epoch's record to train_log.jsonl, its validation metrics to TensorBoard, and say it."""
    with open(run.log_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    if run.writer is not None:
        for key, value in record.items():
            if key.startswith("valid_"):
                run.writer.add_scalar(f"valid/{key[6:]}", value, run.state.step)
    run.say(_epoch_line(record))


def _epoch_line(record: dict) -> str:
    parts = [f"epoch {record['epoch']}", f"train_loss {record['train_loss']:.3f}"]
    parts += [f"{k} {v:.3f}" for k, v in record.items() if k.startswith("valid_")]
    parts += [f"{record['audio_seconds_per_second']:.1f} audio s/s", f"{record['epoch_seconds']:.0f} s"]
    return " | ".join(parts)


def _save_epoch(ckpt_dir: Path, epoch: int, model: ASRModel, cfg: Config, tokenizer: Tokenizer, metrics: dict) -> None:
    save_checkpoint(ckpt_dir / f"epoch_{epoch}.pt", {
        "weights": tied(merged_state_dict(model), cfg), "config": to_dict(cfg), "metrics": metrics, "epoch": epoch,
        "tokenizer_model": torch.frombuffer(bytearray(tokenizer.model_bytes), dtype=torch.uint8),
        "tokenizer_meta": tokenizer.meta()}, format="asr-epoch")


def _prune(ckpt_dir: Path, history: list[dict], keep: int, metric: str) -> None:
    """Keep the `keep` best epochs by `metric` and the `keep` most recent; remove the others."""
    if keep <= 0 or not history or metric not in history[-1]:
        return
    reverse = metric == "valid_acc"
    ranked = sorted((r for r in history if metric in r), key=lambda r: r[metric], reverse=reverse)
    wanted = {r["epoch"] for r in ranked[:keep]} | {r["epoch"] for r in history[-keep:]}
    for r in history:
        if r["epoch"] not in wanted:
            remove_checkpoint(ckpt_dir / f"epoch_{r['epoch']}.pt")


def _tensorboard(exp: Path):
    """A TensorBoard writer into EXP/tensorboard, or None (with one line saying how) without the extra."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard is an optional extra
        print("TensorBoard logging is off: `pip install tensorboard` (the project's `.[tensorboard]` extra) turns it "
              f"on (then `tensorboard --logdir {exp}`); the curves are in {exp / 'train_log.jsonl'} either way",
              file=sys.stderr)
        return None
    return SummaryWriter(str(exp / "tensorboard"))
