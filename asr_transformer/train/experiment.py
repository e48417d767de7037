"""The experiment folder of `asr train`: one run per folder, one training at a time, no leftovers.

- **A lock.** The training process (rank 0 under torchrun) holds an exclusive `flock` on `EXP/.lock` for the
  whole run, with its pid written inside. A second training into the same folder is refused, naming that pid.
  The kernel drops the lock when the process ends, however it ends, so a killed run leaves no stale lock.
- **One run per folder.** The first start records the config (`EXP/config.yaml`) and a fingerprint of its
  inputs (`EXP/inputs.json`: the SHA-256 of the training and dev manifests and of the tokenizer). A later start
  resumes only when both agree (`RESUMABLE` lists the settings that may change on resume); otherwise it is
  refused with one line naming the first difference. `--force` starts over instead: everything the folder held
  is moved, never deleted, into `EXP/replaced-N` (N = 1, 2, …); delete that folder when it is no longer wanted.
- **No leftovers.** A kill during an atomic write (`fileio.atomic_open`) leaves its temp file `.<name>.*.tmp`;
  those of the folder and of its checkpoints are removed on start, while the lock keeps every other writer out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import yaml

from asr_transformer.config import Config, to_dict, upgraded
from asr_transformer.errors import UserError
from asr_transformer.fileio import file_sha256, read_json, write_json

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock
    fcntl = None

LOCK = ".lock"
CONFIG = "config.yaml"
INPUTS = "inputs.json"
REPLACED = "replaced-"
TEMP_FILE = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")  # fileio.atomic_open's temp files: .<name>.<random>.tmp

# What may change between a run and its resume: the length of the run (max_epochs and max_minutes may grow, to
# train longer, or shrink, to stop sooner; the cosine schedule follows the new plan), how often it saves and
# logs, which epoch checkpoints it keeps, how it reads the data (workers, audio cache) and the decoding defaults
# the checkpoints carry. Anything else (the model, the features, the augmentation, the batches, lr and schedule,
# seed, precision, the initialization) changes what the run trains: a resume with it would mix two runs.
RESUMABLE = ("train.max_epochs", "train.max_minutes", "train.checkpoint_minutes", "train.log_interval",
             "train.keep_best", "train.best_metric", "data.num_workers", "data.cache_audio", "decode.")


class ExperimentError(UserError, RuntimeError):
    """An experiment folder that is busy or holds another run; the message says the way out."""


@contextlib.contextmanager
def lock(exp: str | os.PathLike):
    """Hold an exclusive lock on `exp/.lock` (creating `exp`), or raise ExperimentError naming the holder's pid."""
    exp = Path(exp)
    exp.mkdir(parents=True, exist_ok=True)
    fd = os.open(exp / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
                raise ExperimentError(f"{exp}: another training (pid {holder}) is running in this folder; wait for "
                                      f"it to end or stop it, or train into a new --exp") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def start(exp: Path, cfg: Config, inputs: dict[str, Path], tokenizer: tuple[Path, bytes], force: bool, say) -> bool:
    """Make `exp` ready for this run (call it holding the lock): remove stale temp files, check that a run
    already there is this one (or move it aside with `force`), record the inputs' fingerprint.

    inputs: {"train": manifest, "dev": manifest}; tokenizer: its folder and the bytes that identify it.
    → whether a run of this config and these inputs is there to resume.
    """
    remove_stale_temps(exp)
    fingerprint = {name: _file_print(path) for name, path in inputs.items()}
    fingerprint["tokenizer"] = {"path": str(tokenizer[0]), "sha256": hashlib.sha256(tokenizer[1]).hexdigest()}
    previous = (exp / CONFIG).exists()
    if previous and force:
        say(f"--force: the previous run in {exp} moved to {move_aside(exp)}")
        previous = False
    elif previous:
        difference = config_difference(exp / CONFIG, cfg) or inputs_difference(exp / INPUTS, fingerprint)
        if difference:
            raise ExperimentError(f"{difference}; {exp} holds another run: train into a new --exp, or add --force "
                                  f"to start over there (its run is moved to {_replaced(exp)})")
    if not (exp / INPUTS).exists():
        write_json(exp / INPUTS, {"version": 1, **fingerprint})
    return previous


def remove_stale_temps(exp: Path) -> list[Path]:
    """Remove the temp files that killed atomic writes left in `exp` and `exp/checkpoints`; → those removed."""
    stale = [p for folder in (exp, exp / "checkpoints") if folder.is_dir()
             for p in folder.iterdir() if TEMP_FILE.match(p.name) and p.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def config_difference(saved: Path, cfg: Config) -> str:
    """The first setting that differs between `saved` (a config.yaml) and `cfg`, outside RESUMABLE, as
    `model.d_model: 256 in exp/config.yaml, 144 now`; "" when none does."""
    with open(saved, encoding="utf-8") as f:
        old = _flat(to_dict(Config())) | _flat(upgraded(yaml.safe_load(f) or {}))  # newer keys: defaults
    new = _flat(to_dict(cfg))
    changed = [k for k in new if old.get(k) != new[k] and not k.startswith(RESUMABLE)]
    if not changed:
        return ""
    more = f" (and {', '.join(changed[1:])})" if len(changed) > 1 else ""
    return f"{changed[0]}: {_show(old.get(changed[0]))} in {saved}, {_show(new[changed[0]])} now{more}"


def inputs_difference(saved: Path, fingerprint: dict) -> str:
    """The first input (manifest, tokenizer) whose content differs from the one recorded in `saved`; "" when none
    does or nothing was recorded (a folder from before fingerprints)."""
    if not saved.exists():
        return ""
    old = read_json(saved)
    names = {"train": "training manifest", "dev": "dev manifest", "tokenizer": "tokenizer"}
    for key, label in names.items():
        was, now = old.get(key), fingerprint[key]
        if was is not None and was["sha256"] != now["sha256"]:
            return (f"{label} {now['path']}: sha256 {was['sha256'][:12]} in {saved}, {now['sha256'][:12]} now "
                    f"(its content changed)")
    return ""


def move_aside(exp: Path) -> Path:
    """Move everything in `exp` but the lock and earlier replaced runs into a new `exp/replaced-N`; → that folder."""
    target = _replaced(exp)
    target.mkdir()
    for path in exp.iterdir():
        if path.name != LOCK and not path.name.startswith(REPLACED):
            shutil.move(str(path), str(target / path.name))
    return target


def _replaced(exp: Path) -> Path:
    n = 1
    while (exp / f"{REPLACED}{n}").exists():
        n += 1
    return exp / f"{REPLACED}{n}"


def _file_print(path: Path) -> dict:
    return {"path": str(path), "bytes": Path(path).stat().st_size, "sha256": file_sha256(path)}


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _show(value) -> str:
    return json.dumps(value) if isinstance(value, (list, str)) or value is None else str(value)
