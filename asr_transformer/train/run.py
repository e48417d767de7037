"""What a training run holds: where it stands (`Progress`, saved in every checkpoint), the `Run` from its setup to
its end, and the random generators' states that an exact resume restores."""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from asr_transformer.checkpoint_io import save_checkpoint
from asr_transformer.config import Config, to_dict
from asr_transformer.data.sampler import FrameBatchSampler
from asr_transformer.data.tokenizer import Tokenizer
from asr_transformer.errors import UserError
from asr_transformer.model.asr import ASRModel
from asr_transformer.train.distributed import Distributed


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


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]),
             "python_pos": random.getstate()[2], "numpy": torch.from_numpy(np.random.get_state()[1].astype(np.int64)),
             "numpy_pos": int(np.random.get_state()[2])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), state["python_pos"]))
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_pos"], 0, 0.0))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class Run:
    """What a training run holds from its setup to its end: the config, the device, the data, the model and its
    optimizer, where training stands (`state`), and the bookkeeping of saving and stopping."""

    cfg: Config
    exp: Path
    dev: torch.device
    dist: Distributed
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
        return self.state.epoch < self.epochs() and not out_of_time(self.state, self.cfg.train.max_minutes)

    def save_last(self) -> None:
        """Save where training stands into last.pt (rank 0)."""
        if self.dist.main:
            save_checkpoint(self.last, {"weights": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                                        "scaler": self.scaler.state_dict(), "progress": asdict(self.state),
                                        "rng": rng_state(), "config": to_dict(self.cfg)})
        self.last_save = time.monotonic()


def out_of_time(state: Progress, max_minutes: float) -> bool:
    return max_minutes > 0 and state.elapsed >= max_minutes * 60
