"""The training loop: teacher forcing + CTC, Adam with a warmup schedule (Noam or cosine), validation, checkpoints,
exact resume, mixed precision, gradient accumulation and DistributedDataParallel.

Resume restores model, optimizer, scaler, step, epoch, the position inside the epoch and the
RNG states; batches and augmentation depend only on (seed, epoch, utterance), so a resumed run
follows the same trajectory as one that was never stopped. It resumes only the same run: the experiment
folder's lock, config and input checks are `train/experiment.py`'s.

The log and the checkpoint agree after any kill: each epoch's log record is kept in the checkpoint
(`Progress.history`), and every start makes `train_log.jsonl` hold exactly those records: the ones a kill
kept from the log are appended, any past the checkpoint are dropped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from asr_transformer.config import Config, TrainConfig, save_config, to_dict
from asr_transformer.data.features import CMVNAccumulator, fbank, load_cmvn, save_cmvn
from asr_transformer.data.loader import (FrameBatchSampler, UtteranceDataset, filter_utterances, make_loader,
                                         utterance_frames)
from asr_transformer.checkpoint_io import CheckpointError, load_checkpoint, remove_checkpoint, save_checkpoint
from asr_transformer.data.audio import load_utterance
from asr_transformer.data.manifest import UNKNOWN_SPEAKER, read_manifest
from asr_transformer.data.shard_loader import shard_loader
from asr_transformer.data.shards import is_shard_list, read_shard_list, shard_utterances
from asr_transformer.data.tokenizer import Tokenizer, load_tokenizer, model_options
from asr_transformer.device import DeviceError, autocast, autocast_dtype, pick_device
from asr_transformer.threads import cpu_threads
from asr_transformer.errors import UserError
from asr_transformer.fileio import atomic_open, write_json
from asr_transformer.model.asr import ASRModel
from asr_transformer.model.lora import add_lora, merged_state_dict
from asr_transformer.package import DATA_SUMMARY, resolve_precision, tied
from asr_transformer.progress import progress_bar, track
from asr_transformer.train import experiment
from asr_transformer.train.pretrained import PretrainedError, load_pretrained
from asr_transformer.train.schedule import epochs_that_fit, learning_rate, warmup_steps


class TrainError(UserError, RuntimeError):
    """A problem the user can fix (missing files, bad config); the message says what to do."""


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    epoch: int = 0  # current epoch (0-based)
    batch: int = 0  # batches of this epoch already consumed
    step: int = 0  # optimizer steps taken (a skipped one included: the schedule moves on)
    skipped: int = 0  # steps that left the weights as they were, for a non-finite loss or gradient
    elapsed: float = 0.0  # training seconds so far
    epoch_loss: float = 0.0  # sum of this epoch's finite batch losses ...
    epoch_batches: int = 0  # ... and their count
    norm_sum: float = 0.0  # this epoch's gradient norms before clipping: their sum, ...
    norm_count: int = 0  # ... their count ...
    clipped: int = 0  # ... and how many exceeded train.clip_grad
    planned: int = 0  # epochs the schedule plans for when train.max_minutes is set (0 = train.max_epochs)
    processes: int = 0  # the processes the current epoch's batches were planned for (0: unknown, an older run) ...
    readers: int = 0  # ... and, from shards, the loader readers per process: a mid-epoch resume needs the same
    history: list = field(default_factory=list)  # epoch metrics


def compute_cmvn(manifest, out, features=None) -> int:
    """Global CMVN over `manifest` (or a shard list, read in sequence) in one streaming pass; writes `out`, returns
    the frame count. An utterance whose audio cannot be read is left out with a warning, as training leaves it out."""
    from asr_transformer.config import FeatureConfig
    from asr_transformer.data.audio import AudioError, load_audio
    from asr_transformer.data.loader import warn_unreadable
    from asr_transformer.data.shards import shard_audio

    features = features or FeatureConfig()
    acc = CMVNAccumulator(features.num_mel_bins)
    if is_shard_list(manifest):
        shards = read_shard_list(manifest)
        total = len(shard_utterances(shards))
        audio = ((utt, lambda data=data: load_audio(data, sample_rate=features.sample_rate, allow_silent=True))
                 for utt, data in shard_audio(shards))
    else:
        utterances = read_manifest(manifest)
        total = len(utterances)
        audio = ((utt, lambda utt=utt: load_utterance(utt, features.sample_rate)) for utt in utterances)
    for utt, read in track(audio, "CMVN statistics", total):
        try:
            wave = read()
        except AudioError as e:
            warn_unreadable(utt.id, str(e))
            continue
        acc.add(fbank(torch.from_numpy(wave), features))
    mean, std = acc.stats()
    save_cmvn(out, mean, std, acc.frames)
    return acc.frames


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]),
             "python_pos": random.getstate()[2], "numpy": torch.from_numpy(np.random.get_state()[1].astype(np.int64)),
             "numpy_pos": int(np.random.get_state()[2])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), state["python_pos"]))
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_pos"], 0, 0.0))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class _Distributed:
    """torchrun environment: rank, world size, and the process group when world > 1."""

    def __init__(self, device: torch.device):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group(self.backend)
        # stop flags go through gloo on the CPU: agreeing on them never waits for a GPU
        self.flags = torch.distributed.new_group(backend="gloo") if self.world > 1 and self.backend != "gloo" else None

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def from_main(self, *values: float) -> list[float]:
        """Rank 0's `values` on every rank, so that decisions taken from timings agree."""
        if self.world == 1:
            return list(values)
        device = torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")
        shared = torch.tensor(values, dtype=torch.float64, device=device)
        torch.distributed.broadcast(shared, src=0)
        return shared.tolist()

    def any(self, flag: bool) -> bool:
        """Whether `flag` is true on any rank (every rank gets the same answer)."""
        if self.world == 1:
            return flag
        shared = torch.tensor([int(flag)])
        torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX, group=self.flags)
        return bool(shared.item())

    def close(self) -> None:
        if self.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _layout(processes: int, readers: int) -> str:
    return f"{processes} process(es)" + (f" of {readers} shard readers (data.num_workers)" if readers > 1 else "")


def _check_precision(precision: str, dev: torch.device) -> None:
    """TrainError unless `precision` (resolved) can run on `dev`; checked once, before the first batch."""
    try:
        autocast_dtype(dev, precision)
    except DeviceError:
        if precision == "fp16":
            raise TrainError("train.precision=fp16 needs CUDA; use bf16 on CPUs") from None
        raise TrainError(f"train.precision={precision!r}: use auto, fp32, bf16 or fp16") from None


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


@dataclass
class _Run:
    """What a training run holds from its setup to its end: the config, the device, the data, the model and its
    optimizer, where training stands (`state`), and the bookkeeping of saving and stopping."""

    cfg: Config
    exp: Path
    dev: torch.device
    dist: _Distributed
    precision: str
    tokenizer: Tokenizer
    say: Callable[..., None]
    sampler: FrameBatchSampler = None
    train_loader: object = None
    dev_loader: object = None
    model: ASRModel = None
    ddp: torch.nn.Module = None  # the model, wrapped in DistributedDataParallel with several processes
    optimizer: torch.optim.Optimizer = None
    scaler: torch.amp.GradScaler = None
    steps_per_epoch: int = 1
    warmup: int = 0
    state: Progress = field(default_factory=Progress)
    stop_after_batches: int | None = None
    stop_signal: int | None = None  # SIGINT or SIGTERM, once one arrived
    writer: object = None  # TensorBoard's SummaryWriter (rank 0, when installed)
    batches_run: int = 0  # batches run in this call
    last_save: float = 0.0  # time.monotonic() of the last save of last.pt

    @property
    def ckpt_dir(self) -> Path:
        return self.exp / "checkpoints"

    @property
    def last(self) -> Path:
        return self.ckpt_dir / "last.pt"

    @property
    def log_path(self) -> Path:
        return self.exp / "train_log.jsonl"

    def epochs(self) -> int:
        """Epochs in the plan: train.max_epochs, or fewer when train.max_minutes would not fit them."""
        tc = self.cfg.train
        return min(tc.max_epochs, self.state.planned) if tc.max_minutes > 0 and self.state.planned else tc.max_epochs

    def running(self) -> bool:
        """Whether another epoch is to run: the plan is not done and the time budget not spent."""
        return self.state.epoch < self.epochs() and not _out_of_time(self.state, self.cfg.train.max_minutes)

    def save_last(self) -> None:
        """Save where training stands into last.pt (rank 0)."""
        if self.dist.main:
            save_checkpoint(self.last, {"weights": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                                        "scaler": self.scaler.state_dict(), "progress": asdict(self.state),
                                        "rng": _rng_state(), "config": to_dict(self.cfg)})
        self.last_save = time.monotonic()


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
    run = _setup(cfg, train_manifest, dev_manifest, tokenizer_dir, exp, device, threads, force)
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


# ------------------------------------------------------------------------------------------------ setup


def _setup(cfg: Config, train_manifest, dev_manifest, tokenizer_dir, exp: Path, device: str, threads: int,
           force: bool) -> _Run:
    """Device, processes, tokenizer, the experiment folder and its CMVN, data, model, optimizer, and the state
    of last.pt when resuming: everything before the first epoch, in the order that fixes the random draws."""
    dev, dist = _place(device, threads)
    tokenizer = load_tokenizer(tokenizer_dir)
    for key, value in model_options(tokenizer).items():  # vocab_size; Whisper's prompt and suppressed ids
        setattr(cfg.model, key, value)
    cfg.model.input_dim = cfg.features.num_mel_bins
    precision = resolve_precision(cfg.train.precision, dev)
    _seed_everything(cfg.train.seed)
    say = (lambda *a: print(*a, flush=True)) if dist.main else (lambda *a: None)
    run = _Run(cfg, exp, dev, dist, precision, tokenizer, say)
    mean, std = _start_experiment(run, train_manifest, dev_manifest, tokenizer_dir, force)
    _load_data(run, train_manifest, dev_manifest)
    _build_model(run, mean, std)
    _restore(run)
    if dist.main:
        _agree_log(run.log_path, run.state.history)
    run.state.processes, run.state.readers = dist.world, run.sampler.readers
    run.ddp = run.model
    if dist.world > 1:
        run.ddp = torch.nn.parallel.DistributedDataParallel(
            run.model, device_ids=[dev.index] if dev.type == "cuda" else None,
            find_unused_parameters=cfg.model.ctc_weight in (0.0, 1.0))
    return run


def _place(device: str, threads: int) -> tuple[torch.device, _Distributed]:
    """This process's device (a CUDA device with its index: the local rank's under torchrun), made the current
    one, its process group, and torch's CPU threads (`cpu_threads`). TrainError for a device or thread count
    that cannot run here."""
    try:
        torch.set_num_threads(cpu_threads(threads))
        dev = pick_device(device)
    except ValueError as e:  # DeviceError, ThreadsError
        raise TrainError(str(e)) from None
    dist = _Distributed(dev)
    if dev.type == "cuda" and dist.world > 1:  # one GPU per process, whatever --device named
        dev = torch.device("cuda", dist.local_rank)
    if dev.type == "cuda":  # this process's GPU for everything without an explicit device (NCCL's barrier too)
        torch.cuda.set_device(dev)
    return dev, dist


def _start_experiment(run: _Run, train_manifest, dev_manifest, tokenizer_dir, force: bool) -> tuple:
    """Rank 0 claims the folder (`experiment.start`), writes the config and, once, the CMVN statistics; the other
    ranks wait for it. → the CMVN (mean, std)."""
    cmvn_path = run.exp / "cmvn.json"
    if run.dist.main:  # the other ranks wait at the barrier, and stop with rank 0 when it refuses the folder
        identity = run.tokenizer.model_bytes + json.dumps(run.tokenizer.meta(), sort_keys=True).encode()
        experiment.start(run.exp, run.cfg, {"train": Path(train_manifest), "dev": Path(dev_manifest)},
                         (Path(tokenizer_dir), identity), force, run.say)
        run.ckpt_dir.mkdir(parents=True, exist_ok=True)
        save_config(run.cfg, run.exp / "config.yaml")
        if not cmvn_path.exists() and run.cfg.features.kind == "whisper":  # Whisper's are normalized already
            dim = run.cfg.features.num_mel_bins
            save_cmvn(cmvn_path, np.zeros(dim), np.ones(dim), 0)
            run.say(f"Whisper's features: no CMVN (identity) → {cmvn_path}")
        elif not cmvn_path.exists():
            frames = compute_cmvn(train_manifest, cmvn_path, run.cfg.features)
            run.say(f"CMVN statistics over {frames} frames → {cmvn_path}")
    run.dist.barrier()
    return load_cmvn(cmvn_path)


def _load_data(run: _Run, train_manifest, dev_manifest) -> None:
    """The filtered training and dev utterances, their batch samplers and loaders (into `run`)."""
    cfg, say, tokenizer, seed = run.cfg, run.say, run.tokenizer, run.cfg.train.seed
    subsampling = cfg.model.subsampling
    shards = read_shard_list(train_manifest) if is_shard_list(train_manifest) else None
    train_utts, train_ids, counts = filter_utterances(
        shard_utterances(shards) if shards else read_manifest(train_manifest), tokenizer, cfg.data, cfg.features,
        subsampling, cfg.augment.speed_factors)
    say(f"train: {counts.summary()}" + (f" (from {len(shards)} shards)" if shards else ""))
    if shards and cfg.model.speaker_cmn:
        raise TrainError("model.speaker_cmn reads all of a speaker's audio before training: train it from a manifest, "
                         "not a shard list")
    dev_utts, dev_ids, dev_counts = filter_utterances(read_manifest(dev_manifest), tokenizer, cfg.data, cfg.features,
                                                      subsampling)
    say(f"dev:   {dev_counts.summary()}")
    if not train_utts or not dev_utts:
        raise TrainError("nothing left to train or validate on after filtering; see the counts above")
    if run.dist.main:  # what the model learns from, for the package's `asr info` (package.average_checkpoints)
        write_json(run.exp / DATA_SUMMARY, {"train": _data_summary(train_manifest, train_utts),
                                             "dev": _data_summary(dev_manifest, dev_utts)})
    train_set = UtteranceDataset(train_utts, train_ids, tokenizer, cfg.features, cfg.augment, seed=seed,
                                 cache_audio=cfg.data.cache_audio, speaker_cmn=cfg.model.speaker_cmn)
    if cfg.model.speaker_cmn:
        speakers = {u.speaker for u in train_utts} - {UNKNOWN_SPEAKER}
        unlabelled = sum(u.speaker == UNKNOWN_SPEAKER for u in train_utts)
        say(f"speaker CMN: each of {len(speakers)} training speakers' mean"
            + (f"; {unlabelled} utterances without a speaker label use their own" if unlabelled else ""))
    pin = run.dev.type == "cuda"
    dist = run.dist
    if shards:
        try:
            run.sampler, run.train_loader = shard_loader(shards, train_utts, train_set, cfg.data, seed, dist.rank,
                                                         dist.world, cfg.augment.speed_factors, pin)
        except ValueError as e:
            raise TrainError(str(e)) from None
    else:
        run.sampler = FrameBatchSampler(utterance_frames(train_utts, cfg.features), cfg.data.max_frames,
                                        cfg.data.max_batch, seed=seed, jitter=cfg.data.bucket_width, rank=dist.rank,
                                        world=dist.world, factors=cfg.augment.speed_factors, margins=train_set.margins)
        run.train_loader = make_loader(train_set, run.sampler, cfg.data.num_workers, placeholders=True,
                                       pin_memory=pin)
    if not run.sampler.batches(0):
        raise TrainError(f"no training batch for each of {dist.world} processes"
                         + (f": {len(shards)} shards for {dist.world * max(1, cfg.data.num_workers)} readers "
                            f"(processes × data.num_workers); write smaller shards (`asr shard --per-shard`)"
                            if shards else ""))
    dev_sampler = FrameBatchSampler(utterance_frames(dev_utts, cfg.features), cfg.data.max_frames, cfg.data.max_batch,
                                    shuffle=False)
    dev_set = UtteranceDataset(dev_utts, dev_ids, tokenizer, cfg.features, cache_audio=cfg.data.cache_audio,
                               speaker_cmn=cfg.model.speaker_cmn)
    run.dev_loader = make_loader(dev_set, dev_sampler, cfg.data.num_workers, pin_memory=pin)


def _freeze(model: ASRModel, prefixes: list[str], say) -> list[torch.nn.Parameter]:
    """Fix the parameters under `prefixes` (train.freeze_modules); → the parameters left to train."""
    under = lambda name, p: name == p or name.startswith(p + ".")  # noqa: E731
    for prefix in prefixes:
        if not any(under(name, prefix) for name, _ in model.named_parameters()):
            raise TrainError(f"train.freeze_modules: {prefix!r} names no parameter of this model")
    frozen = 0
    for name, param in model.named_parameters():
        if any(under(name, p) for p in prefixes):
            param.requires_grad_(False)
            frozen += param.numel()
    if frozen:
        say(f"frozen: {frozen / 1e6:.2f} M parameters ({', '.join(prefixes)})")
    return [p for p in model.parameters() if p.requires_grad]


def _add_lora(model: ASRModel, tc: TrainConfig, say) -> None:
    """Freeze the model but a LoRA update of the layers `tc.lora_modules` names (model/lora.py)."""
    try:
        layers = add_lora(model, tc.lora_modules, tc.lora_rank, tc.lora_alpha)
    except ValueError as e:
        raise TrainError(str(e)) from None
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    say(f"LoRA: rank {tc.lora_rank} on {len(layers)} Linear layers ({', '.join(tc.lora_modules)}): "
        f"{trained / 1e6:.2f} M parameters trained, the rest frozen")


def _build_model(run: _Run, mean, std) -> None:
    """The model (with the CMVN, on the device), its optimizer, loss scaler and learning-rate schedule."""
    cfg, tc, dev = run.cfg, run.cfg.train, run.dev
    try:
        model = ASRModel(cfg.model)
    except ValueError as e:  # model keys that do not go together, or a block type the encoder lacks
        raise TrainError(str(e)) from None
    model.set_cmvn(mean, std)
    model.to(dev)
    run.say(f"model: {model.count_parameters() / 1e6:.2f} M parameters, vocabulary {cfg.model.vocab_size}, device "
            f"{dev}, precision {run.precision}{' (train.precision=auto)' if tc.precision == 'auto' else ''}")
    _check_precision(run.precision, dev)
    if tc.lora_rank:
        _add_lora(model, tc, run.say)
    trained = _freeze(model, tc.freeze_modules, run.say)
    # fused: one kernel over all parameters instead of ~8 small ops per tensor (9 % of a CPU step)
    run.model, run.optimizer = model, torch.optim.Adam(trained, lr=tc.lr, betas=(0.9, 0.98), eps=1e-9,
                                                       weight_decay=tc.weight_decay, fused=dev.type in ("cpu", "cuda"))
    run.scaler = torch.amp.GradScaler(dev.type, enabled=run.precision == "fp16")
    run.steps_per_epoch = max(1, math.ceil(len(run.sampler.batches(0)) / tc.accum_grad))
    run.warmup = warmup_steps(tc.warmup_steps, tc.warmup_epochs, run.steps_per_epoch)
    seconds = cfg.data.max_frames * cfg.features.frame_shift_ms / 1000
    run.say(f"batches of ≤ {cfg.data.max_frames} frames ({seconds:.0f} s of audio, padding included) per process; "
            f"{run.dist.world} process(es) × train.accum_grad={tc.accum_grad}: ≤ "
            f"{seconds * run.dist.world * tc.accum_grad:.0f} s per optimizer step, {run.steps_per_epoch} steps per "
            f"epoch, warmup {run.warmup} steps, peak lr {tc.lr:g}")
    try:
        learning_rate(tc.schedule, 1, tc.lr, run.warmup, run.steps_per_epoch * tc.max_epochs)
    except ValueError as e:
        raise TrainError(str(e)) from None


def _restore(run: _Run) -> None:
    """Resume from last.pt (weights, optimizer, scaler, progress, RNG states), or start from train.init_from."""
    tc, say = run.cfg.train, run.say
    if run.last.exists():
        try:
            saved = load_checkpoint(run.last)
        except CheckpointError as e:
            raise TrainError(f"{e}. Remove it to restart, or restore it from a backup.") from None
        run.model.load_state_dict(saved["weights"])
        run.optimizer.load_state_dict(saved["optimizer"])
        run.scaler.load_state_dict(saved["scaler"])
        run.state = state = Progress(**saved["progress"])
        readers = run.sampler.readers
        if state.batch and state.processes and (state.processes, state.readers) != (run.dist.world, readers):
            raise TrainError(f"{run.last} stopped inside epoch {state.epoch + 1}, whose batches were planned for "
                             f"{_layout(state.processes, state.readers)}; resume it with the same (this run has "
                             f"{_layout(run.dist.world, readers)})")
        _set_rng_state(saved["rng"])
        if run.running():
            say(f"resuming {run.exp} at epoch {state.epoch + 1} of {run.epochs()}"
                + (f", batch {state.batch}" if state.batch else "") + f" (step {state.step})")
        else:
            say(f"{run.exp}: nothing to resume: {state.epoch} epochs trained (step {state.step}), {run.epochs()} planned")
    elif tc.init_from:
        try:
            taken = load_pretrained(run.model, tc.init_from, tc.init_modules)
        except PretrainedError as e:
            raise TrainError(str(e)) from None
        say(f"initialized {len(taken)} of {len(run.model.state_dict())} tensors from {tc.init_from}"
            + (f" ({', '.join(tc.init_modules)})" if tc.init_modules else ""))


# ------------------------------------------------------------------------------------------------ epochs


def run_epoch(run: _Run) -> _Epoch | None:
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


def _train_step(run: _Run, epoch: _Epoch, batch) -> bool:
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


def _flush(run: _Run, epoch: _Epoch) -> None:
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


def _report(run: _Run, epoch: _Epoch, bar, task, tensorboard: bool) -> None:
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


def _save_or_stop(run: _Run, epoch: _Epoch) -> bool:
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


def end_epoch(run: _Run, epoch: _Epoch) -> None:
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


def _epoch_record(run: _Run, epoch: _Epoch, epoch_seconds: float, metrics: dict) -> dict:
    """The epoch's line of train_log.jsonl (also kept in its checkpoint and in Progress.history)."""
    state, frame_shift = run.state, run.cfg.features.frame_shift_ms
    return {"epoch": state.epoch + 1, "step": state.step, "train_loss": state.epoch_loss / max(1, state.epoch_batches),
            "lr": run.optimizer.param_groups[0]["lr"], "skipped_steps": state.skipped,
            "grad_norm": state.norm_sum / max(1, state.norm_count),
            "clipped": state.clipped / max(1, state.norm_count),
            "epoch_seconds": round(epoch_seconds, 2), "elapsed": round(state.elapsed, 2), "precision": run.precision,
            "audio_seconds_per_second": round(epoch.frames_done * frame_shift / 1000 / max(1e-9, epoch_seconds), 2),
            **metrics}


def _replan(run: _Run, epoch_seconds: float) -> None:
    """With train.max_minutes: the epochs that fit in the time left at this epoch's speed become the plan."""
    tc = run.cfg.train
    before = run.epochs()
    run.state.planned = epochs_that_fit(run.state.epoch, tc.max_epochs, run.state.elapsed, tc.max_minutes * 60,
                                        epoch_seconds)
    if run.epochs() != before:
        run.say(f"{run.epochs()} of train.max_epochs={tc.max_epochs} epochs fit in train.max_minutes="
                f"{tc.max_minutes:g} at {epoch_seconds:.0f} s per epoch: the schedule now ends there")


def _log_epoch(run: _Run, record: dict) -> None:
    """Append the epoch's record to train_log.jsonl, its validation metrics to TensorBoard, and say it."""
    with open(run.log_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    if run.writer is not None:
        for key, value in record.items():
            if key.startswith("valid_"):
                run.writer.add_scalar(f"valid/{key[6:]}", value, run.state.step)
    run.say(_epoch_line(record))


def _agree_log(path: Path, history: list[dict]) -> None:
    """Make the log hold exactly the checkpoint's epoch records (`history`), rewriting it when it does not."""
    lines = [json.dumps(record) + "\n" for record in history]
    if (path.read_text(encoding="utf-8") if path.exists() else "") != "".join(lines):
        with atomic_open(path) as f:
            f.writelines(lines)


def _data_summary(manifest, utts) -> dict:
    """A manifest as `asr info` shows it: path, utterances kept for training, hours, speakers."""
    return {"manifest": str(manifest), "utterances": len(utts), "hours": round(sum(u.duration for u in utts) / 3600, 3),
            "speakers": len({u.speaker for u in utts})}


def _out_of_time(state: Progress, max_minutes: float) -> bool:
    return max_minutes > 0 and state.elapsed >= max_minutes * 60


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
