"""Training speed on this machine: audio seconds per wall second, model FLOP/s as a fraction of
the measured matmul peak, and peak memory, for each preset and for the reference 10 M shape.

    python bench/train_speed.py --threads 2 --json bench/train_speed.json

Each configuration runs in its own process (clean peak memory). A step is forward + backward +
Adam update on a batch of random features and tokens shaped like real speech (default: 27
utterances of 3 s, 100 frames/s, 12 tokens/s). FLOPs are counted with torch's FlopCounterMode
for one step; the peak is the best of several large matmuls in the same precision.

    python bench/train_speed.py --shapes ref10m --precisions fp32 --procs 2 --threads 1

`--procs N` measures data-parallel training as `torchrun --nproc_per_node N -m asr_transformer train`
runs it on a CPU: N processes (gloo) of `--threads` threads each share the batch; the peak is then the
sum of the N processes' peaks, measured at the same time, and the peak memory that of one process.
On a 2-core machine without AMX (2026-12-01), two processes of one thread were no faster than one of two threads
(three alternating pairs, audio s/s: ref10m 43.5 / 46.0 / 51.8 against 45.6 / 48.5 / 46.6; small
117 / 113 / 126 against 122 / 125 / 130).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

SHAPES = {
    "tiny": {"preset": "tiny"},
    "small": {"preset": "small"},
    "base": {"preset": "base"},
    "large": {"preset": "large"},
    # The ESPnet2 reference: 6/3 blocks, 256-d, 4 heads, FFN 1024, conv2d x4, CTC 0.3 (10.0 M with vocab 300).
    "ref10m": {"d_model": 256, "heads": 4, "encoder_layers": 6, "decoder_layers": 3, "ffn_dim": 1024},
    # the same shapes with a 32-channel conv front-end instead of d_model channels
    "small_c32": {"preset": "small", "subsampling_channels": 32},
    "ref10m_c32": {"d_model": 256, "heads": 4, "encoder_layers": 6, "decoder_layers": 3, "ffn_dim": 1024,
                   "subsampling_channels": 32},
    # Conformer encoder blocks (depthwise conv kernel 15) on the narrow front-end
    "small_conformer": {"preset": "small", "subsampling_channels": 32, "block": "conformer", "conv_kernel": 15},
    "ref10m_conformer": {"d_model": 256, "heads": 4, "encoder_layers": 6, "decoder_layers": 3, "ffn_dim": 1024,
                         "subsampling_channels": 32, "block": "conformer", "conv_kernel": 15},
}


def matmul_peak(dtype, threads: int, n: int = 2048, repeats: int = 5) -> float:
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def measure(name: str, args) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from asr_transformer import malloc
    from asr_transformer.config import ModelConfig, apply_preset
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.package import resolve_precision

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("gloo")
    batch = args.batch // world + (rank < args.batch % world)  # this process's share of the global batch
    cfg = ModelConfig(vocab_size=args.vocab)
    for key, value in SHAPES[name].items():
        apply_preset(cfg, value) if key == "preset" else setattr(cfg, key, value)
    model = ASRModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)  # as `asr train` builds it
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    frames, tokens = int(args.seconds * 100), int(args.seconds * args.tokens_per_second)
    feats = torch.randn(batch, frames, 80)
    feat_lens = torch.full((batch,), frames, dtype=torch.long)
    feat_lens[1::2] -= frames // 10  # some padding, as in real batches
    ys = torch.randint(5, args.vocab, (batch, tokens))
    ys_lens = torch.full((batch,), tokens, dtype=torch.long)
    precision = torch.bfloat16 if args.precision == "bf16" else None

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision is not None):
            loss = ddp(feats, feat_lens, ys, ys_lens)["loss"]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    for _ in range(args.warmup):
        step()
    if world > 1:
        torch.distributed.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = (time.perf_counter() - start) / args.steps
    if world > 1:
        torch.distributed.barrier()  # every process measures its matmul peak at the same time
    peak = matmul_peak(torch.bfloat16 if precision else torch.float32, args.threads)
    if world > 1:  # the step time of the slowest process; the FLOPs and the peaks of all
        shared = torch.tensor([seconds, float(flops), peak], dtype=torch.float64)
        torch.distributed.all_reduce(shared[:1], op=torch.distributed.ReduceOp.MAX)
        torch.distributed.all_reduce(shared[1:])
        seconds, flops, peak = shared.tolist()
        torch.distributed.destroy_process_group()
        if rank > 0:
            return {}
    return {
        "shape": name, "precision": args.precision, "threads": args.threads, "processes": world,
        "parameters_M": round(model.count_parameters() / 1e6, 2),
        "batch": f"{args.batch} x {args.seconds:g} s",
        "step_s": round(seconds, 3),
        "audio_s_per_s": round(args.batch * args.seconds / seconds, 1),
        "frames_per_s": round(args.batch * frames / seconds),
        "model_GFLOP_per_s": round(flops / seconds / 1e9, 1),
        "matmul_peak_GFLOP_per_s": round(peak / 1e9, 1),
        "fraction_of_peak": round(flops / seconds / peak, 3),
        "peak_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "malloc_tuned": malloc.active(),
        # bf16 is fast only with AMX tiles (and `train.precision=auto` takes it only then)
        "cpu_amx": resolve_precision("auto", "cpu") == "bf16",
    }


def main() -> None:
    from asr_transformer import malloc

    malloc.apply()  # measure with the allocator settings `asr` runs with (ASR_MALLOC_TUNING=0: glibc's defaults)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="tiny,small,base,large,ref10m")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--threads", type=int, default=2, help="threads per process")
    p.add_argument("--procs", type=int, default=1, help="data-parallel processes (gloo), as under torchrun")
    p.add_argument("--batch", type=int, default=27)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--tokens-per-second", type=float, default=12.0)
    p.add_argument("--vocab", type=int, default=300)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        row = measure(args.one, args)
        if row:  # rank 0 only
            print(json.dumps(row))
        return
    rows = []
    for precision in args.precisions.split(","):
        for shape in args.shapes.split(","):
            launch = [sys.executable] if args.procs == 1 else [
                sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.procs}"]
            cmd = launch + [__file__, "--one", shape, "--precision", precision]
            for key in ("threads", "batch", "seconds", "tokens_per_second", "vocab", "steps", "warmup"):
                cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
            out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(" | ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
