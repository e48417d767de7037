"""Everything before a training run's first epoch: the device and processes, the tokenizer, the experiment folder
and its CMVN statistics, the data, the model with its optimizer, and, when resuming, the state of last.pt."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from asr_transformer.checkpoint_io import CheckpointError, load_checkpoint
from asr_transformer.config import Config, TrainConfig, save_config
from asr_transformer.data.audio import load_utterance
from asr_transformer.data.features import CMVNAccumulator, fbank, load_cmvn, save_cmvn
from asr_transformer.data.draws import utterance_frames
from asr_transformer.data.loader import UtteranceDataset, filter_utterances, make_loader
from asr_transformer.data.manifest import UNKNOWN_SPEAKER, read_manifest
from asr_transformer.data.sampler import FrameBatchSampler
from asr_transformer.data.shard_loader import shard_loader
from asr_transformer.data.shards import is_shard_list, read_shard_list, shard_utterances
from asr_transformer.data.tokenizer import load_tokenizer, model_options
from asr_transformer.device import DeviceError, autocast_dtype, pick_device
from asr_transformer.fileio import atomic_open, write_json
from asr_transformer.model.asr import ASRModel
from asr_transformer.model.lora import add_lora
from asr_transformer.package import DATA_SUMMARY, resolve_precision
from asr_transformer.progress import track
from asr_transformer.threads import cpu_threads
from asr_transformer.train import experiment
from asr_transformer.train.distributed import Distributed, layout
from asr_transformer.train.pretrained import PretrainedError, load_pretrained
from asr_transformer.train.run import Progress, Run, TrainError, seed_everything, set_rng_state
from asr_transformer.train.schedule import learning_rate, warmup_steps


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


def check_precision(precision: str, dev: torch.device) -> None:
    """TrainError unless `precision` (resolved) can run on `dev`; checked once, before the first batch."""
    try:
        autocast_dtype(dev, precision)
    except DeviceError:
        if precision == "fp16":
            raise TrainError("train.precision=fp16 needs CUDA; use bf16 on CPUs") from None
        raise TrainError(f"train.precision={precision!r}: use auto, fp32, bf16 or fp16") from None


def setup(cfg: Config, train_manifest, dev_manifest, tokenizer_dir, exp: Path, device: str, threads: int,
           force: bool) -> Run:
    """Device, processes, tokenizer, the experiment folder and its CMVN, data, model, optimizer, and the state
    of last.pt when resuming: everything before the first epoch, in the order that fixes the random draws."""
    dev, dist = place(device, threads)
    tokenizer = load_tokenizer(tokenizer_dir)
    for key, value in model_options(tokenizer).items():  # vocab_size; Whisper's prompt and suppressed ids
        setattr(cfg.model, key, value)
    cfg.model.input_dim = cfg.features.num_mel_bins
    precision = resolve_precision(cfg.train.precision, dev)
    seed_everything(cfg.train.seed)
    say = (lambda *a: print(*a, flush=True)) if dist.main else (lambda *a: None)
    run = Run(cfg, exp, dev, dist, precision, tokenizer, say)
    mean, std = _start_experiment(run, train_manifest, dev_manifest, tokenizer_dir, force)
    _load_data(run, train_manifest, dev_manifest)
    _build_model(run, mean, std)
    _restore(run)
    if dist.main:
        agree_log(run.log_path, run.state.history)
    run.state.processes, run.state.readers = dist.world, run.sampler.readers
    run.ddp = run.model
    if dist.world > 1:
        run.ddp = torch.nn.parallel.DistributedDataParallel(
            run.model, device_ids=[dev.index] if dev.type == "cuda" else None,
            find_unused_parameters=cfg.model.ctc_weight in (0.0, 1.0))
    return run


def place(device: str, threads: int) -> tuple[torch.device, Distributed]:
    """This process's device (a CUDA device with its index: the local rank's under torchrun), made the current
    one, its process group, and torch's CPU threads (`cpu_threads`). TrainError for a device or thread count
    that cannot run here."""
    try:
        torch.set_num_threads(cpu_threads(threads))
        dev = pick_device(device)
    except ValueError as e:  # DeviceError, ThreadsError
        raise TrainError(str(e)) from None
    dist = Distributed(dev)
    if dev.type == "cuda" and dist.world > 1:  # one GPU per process, whatever --device named
        dev = torch.device("cuda", dist.local_rank)
    if dev.type == "cuda":  # this process's GPU for everything without an explicit device (NCCL's barrier too)
        torch.cuda.set_device(dev)
    return dev, dist


def _start_experiment(run: Run, train_manifest, dev_manifest, tokenizer_dir, force: bool) -> tuple:
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


def _load_data(run: Run, train_manifest, dev_manifest) -> None:
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


def _build_model(run: Run, mean, std) -> None:
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
    check_precision(run.precision, dev)
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


def _restore(run: Run) -> None:
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
                             f"{layout(state.processes, state.readers)}; resume it with the same (this run has "
                             f"{layout(run.dist.world, readers)})")
        set_rng_state(saved["rng"])
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


def agree_log(path: Path, history: list[dict]) -> None:
    """Make the log hold exactly the checkpoint's epoch records (`history`), rewriting it when it does not."""
    lines = [json.dumps(record) + "\n" for record in history]
    if (path.read_text(encoding="utf-8") if path.exists() else "") != "".join(lines):
        with atomic_open(path) as f:
            f.writelines(lines)


def _data_summary(manifest, utts) -> dict:
    """A manifest as `asr info` shows it: path, utterances kept for training, hours, speakers."""
    return {"manifest": str(manifest), "utterances": len(utts), "hours": round(sum(u.duration for u in utts) / 3600, 3),
            "speakers": len({u.speaker for u in utts})}
