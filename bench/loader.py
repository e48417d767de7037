"""How fast the training loader delivers audio: from files (a manifest) and from tar shards, with 0, 1, 2 … loader
workers, in audio seconds per second per CPU core.

    .venv/bin/python bench/loader.py recipes/kathleen/data/train.jsonl --config recipes/kathleen/conf/phone.yaml \\
        --workers 0,1,2 --json bench/loader.json

`--epochs` training epochs' batches as `asr train` reads them: audio decoded and resampled, speed-perturbed, log-mel
features, SpecAugment (the config's augmentation), padded batches; nothing is cached (data.cache_audio off). From
files: the manifest's sampler (`FrameBatchSampler`), one file per utterance. From shards: the manifest written by
`asr shard --per-shard` into a temporary folder first (that time is reported too), then `ShardBatchSampler`'s
streamed, bucketed batches. Each setting reads them after a warm-up pass over its first batches (the
page cache then holds the files for both sources alike). Per core: the rate over the cores that did the work
(the main process with 0 workers, else the workers, at most the machine's cores). The training step's own
consumption is bench/train_speed.py's; RESULTS.md divides one by the other.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounded_search import cpu_name  # noqa: E402
from repo_paths import command_line, in_repository, report  # noqa: E402
from asr_transformer.config import load_config  # noqa: E402
from asr_transformer.data.draws import utterance_frames  # noqa: E402
from asr_transformer.data.loader import UtteranceDataset, make_loader  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.data.sampler import FrameBatchSampler  # noqa: E402
from asr_transformer.data.shard_loader import shard_loader  # noqa: E402
from asr_transformer.data.shards import read_shard_list, shard_utterances, write_shards  # noqa: E402
from asr_transformer.data.tokenizer import train_tokenizer  # noqa: E402


def measure(loader, sampler, frame_shift_ms: float, warmup: int, epochs: int) -> dict:
    """`epochs` epochs through `loader` (after `warmup` batches of a warm-up pass): audio seconds, wall seconds."""
    sampler.set_epoch(0)
    for n, _ in enumerate(loader):
        if n + 1 >= warmup:
            break
    start, frames, batches = time.perf_counter(), 0, 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            frames += batch.frames
            batches += 1
    wall = time.perf_counter() - start
    return {"batches": batches, "audio_s": round(frames * frame_shift_ms / 1000, 1), "wall_s": round(wall, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("manifest", type=Path)
    p.add_argument("--config", type=Path, help="training config (its features, augmentation, batch bounds)")
    p.add_argument("--workers", default="0,1,2", help="loader worker counts to measure, comma-separated")
    p.add_argument("--per-shard", type=int, default=100, help="utterances per shard")
    p.add_argument("--warmup", type=int, default=5, help="batches read before timing")
    p.add_argument("--epochs", type=int, default=3, help="epochs timed (each its own speeds, shards and batches)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config, [])
    utts = read_manifest(args.manifest)
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_tokenizer([u.text for u in utts], Path(tmp) / "tokenizer", model_type="char")
        start = time.perf_counter()
        shuffled = list(utts)
        random.Random(0).shuffle(shuffled)
        listed = read_shard_list(write_shards(shuffled, Path(tmp) / "shards", args.per_shard))
        shard_seconds = time.perf_counter() - start
        shard_utts = shard_utterances(listed)
        rows = []
        for workers in [int(w) for w in args.workers.split(",")]:
            cfg.data.num_workers = workers
            for source, items in (("files", utts), ("shards", shard_utts)):
                ids = [tokenizer.encode(u.text) for u in items]
                dataset = UtteranceDataset(items, ids, tokenizer, cfg.features, cfg.augment, seed=cfg.train.seed)
                if source == "files":
                    sampler = FrameBatchSampler(utterance_frames(items, cfg.features), cfg.data.max_frames,
                                                cfg.data.max_batch, seed=cfg.train.seed,
                                                factors=cfg.augment.speed_factors)
                    loader = make_loader(dataset, sampler, workers)
                else:
                    sampler, loader = shard_loader(listed, items, dataset, cfg.data, cfg.train.seed, 0, 1,
                                                   cfg.augment.speed_factors, False)
                row = {"source": source, "workers": workers, "cores": min(max(1, workers), cores),
                       **measure(loader, sampler, cfg.features.frame_shift_ms, args.warmup, args.epochs)}
                row["audio_s_per_s"] = round(row["audio_s"] / row["wall_s"], 1)
                row["audio_s_per_s_per_core"] = round(row["audio_s_per_s"] / row["cores"], 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    report({"command": command_line("loader.py", sys.argv[1:]), "cpu": cpu_name(), "cpus": cores,
            "manifest": in_repository(args.manifest), "utterances": len(utts),
            "hours": round(sum(u.duration for u in utts) / 3600, 2),
            "config": in_repository(args.config) if args.config else "defaults",
            "speed_factors": list(cfg.augment.speed_factors), "per_shard": args.per_shard, "shards": len(listed),
            "shard_write_s": round(shard_seconds, 1), "rows": rows}, args.json)


if __name__ == "__main__":
    main()
