"""Decoding speed (real-time factor) and peak memory of every decoding mode.

    python bench/decode_speed.py                          # random weights: `small` preset and the 10 M shape
    python bench/decode_speed.py --model exp/model.pt --manifest data/test.jsonl   # a trained package
    python bench/decode_speed.py --shapes 10m --modes greedy,joint --batch-sizes 1,16 --json out.json
    python bench/decode_speed.py --precisions fp32,bf16   # the encoder in bf16 too (ASRModel.set_encoder_dtype)

RTF = decoding wall time (encoder + search; features excluded) / audio seconds.

Random weights do not stop by themselves, so the search costs are made realistic this way (and said in the
output): the attention decoder's output is capped at `--tokens-per-second` (default 3, about a 5000-piece
BPE on read English) through `max_len_ratio`, so greedy and beam searches run exactly that many steps; and
the CTC head is made to look trained: its logits are scaled until the mean top posterior per frame is
`--ctc-peak` (0.95), and its blank logit raised until greedy CTC emits the same token rate (this sets the
work of ctc_beam, rescore and maskctc; Mask-CTC then masks the tokens whose confidence falls below 0.99). With `--model`, the package
decodes real audio with its own stopping (no caps).

Timing: after a warm-up and the memory pass below, the batches are decoded `--repeats` times (default 3) and
the median pass is reported (all passes are in the JSON): one pass of one batch of 16 moved by up to 2× from run
to run on a busy 2-core machine, mostly the first touches of freshly allocated memory.

Memory: each (shape, batch size, mode) runs in a fresh process; a thread polls the resident memory while the
batches are decoded once, untimed (on 2 cores the polling thread slows decoding down), before the timed run:
`peak MB` is the highest seen, `delta MB` that minus the resident memory just before decoding (what decoding
itself needs: activations, caches, beams). The process's ru_maxrss is in the JSON.
On CUDA the peak is torch.cuda.max_memory_allocated. `--no-isolate` runs everything in one process (faster;
the peaks then also hold what earlier runs left cached by the allocator).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = {
    "small": None,  # config PRESETS["small"]
    "10m": dict(d_model=256, heads=4, encoder_layers=6, decoder_layers=3, ffn_dim=1024),
}
ALL_MODES = ("greedy", "beam", "joint", "ctc", "ctc_beam", "maskctc", "rescore")
TARGETS = {"greedy": 0.02, "joint": 0.05, "maskctc": 0.01}
FRAME_RATE = 100.0  # feature frames per second


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class _RSSSampler:
    """Highest resident memory seen while the block runs (polled every 2 ms by a thread)."""

    def __enter__(self):
        import threading

        self.peak, self._stop = _rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss_mb())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())


def _random_model(shape: str, vocab: int, seed: int):
    import torch

    from asr_transformer.config import PRESETS, ModelConfig
    from asr_transformer.model.asr import ASRModel

    dims = PRESETS["small"] if shape == "small" else SHAPES[shape]
    torch.manual_seed(seed)
    return ASRModel(ModelConfig(input_dim=80, vocab_size=vocab, **dims, nat_weight=0.3)).eval()  # maskctc runs


def _calibrate_ctc(model, feats, lens, tokens_per_second: float, peak: float) -> tuple[float, float]:
    """Make a random CTC head look trained: scale its logits until the mean top posterior per frame is `peak`
    (peaky, as trained CTC is), then raise the blank logit until greedy CTC emits ≈ tokens_per_second.
    Returns (scale, blank bias)."""
    import torch

    from asr_transformer.decode.ctc_prefix import ctc_greedy

    def bisect(f, target, lo, hi, increasing):
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if (f(mid) < target) == increasing else (lo, mid)
        return (lo + hi) / 2

    with torch.inference_mode():
        enc, enc_lens = model.encode(feats, lens)
        logits = model.ctc.proj(enc)[:, : int(enc_lens.min())]
        scale = bisect(lambda s: float((s * logits).softmax(-1).max(-1).values.mean()), peak, 1.0, 1000.0, True)
        seconds = float(enc_lens.min()) * len(lens) * model.cfg.subsampling / FRAME_RATE

        def rate(bias):
            shifted = scale * logits
            shifted[..., 0] += bias
            return float(ctc_greedy(shifted.log_softmax(-1), enc_lens.clamp(max=logits.size(1))).lengths.sum()) / seconds

        bias = bisect(rate, tokens_per_second, -1000.0, 1000.0, False)
        model.ctc.proj.weight.mul_(scale)
        model.ctc.proj.bias.mul_(scale)
        model.ctc.proj.bias[0] += bias
    return scale, bias


def _random_data(n: int, min_s: float, max_s: float, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    secs = min_s + (max_s - min_s) * torch.rand(n, generator=g)
    return [torch.randn(int(s * FRAME_RATE), 80, generator=g) for s in secs]


def _manifest_data(model_path: str, manifest: str, n: int):
    import torch

    from asr_transformer.data.audio import load_utterance
    from asr_transformer.data.manifest import read_manifest
    from asr_transformer.inference.recognizer import Recognizer

    rec = Recognizer(model_path, device="cpu", threads=torch.get_num_threads(), lm=False, word_lm=False)
    feats = [rec.features(load_utterance(u, rec.config.features.sample_rate)) for u in read_manifest(manifest)[:n]]
    return rec.model, rec.config, feats


def run_one(job: dict) -> dict:
    """One (shape, batch size, mode) measurement in this process."""
    import torch

    from asr_transformer import malloc
    from asr_transformer.config import DecodeConfig
    from asr_transformer.decode.search import recognize

    torch.set_num_threads(job["threads"])
    dev = torch.device(job["device"])
    if job.get("model"):
        model, cfg, feats = _manifest_data(job["model"], job["manifest"], job["utts"])
        ratio, calibration = cfg.decode.max_len_ratio, None
    else:
        model = _random_model(job["shape"], job["vocab"], job["seed"])
        feats = _random_data(job["utts"], job["min_seconds"], job["max_seconds"], job["seed"])
        ratio = job["tokens_per_second"] / (FRAME_RATE / model.cfg.subsampling)
        sample = torch.nn.utils.rnn.pad_sequence(feats[:4], batch_first=True)
        calibration = _calibrate_ctc(model, sample, torch.tensor([f.size(0) for f in feats[:4]]),
                                     job["tokens_per_second"], job["ctc_peak"])
    model.to(dev)
    if job["precision"] != "fp32":  # after the calibration, which ran in fp32
        from asr_transformer.package import PRECISIONS

        model.set_encoder_dtype(PRECISIONS[job["precision"]])
    opts = DecodeConfig(mode=job["mode"], beam=job["beam"], ctc_weight=0.3, max_len_ratio=ratio,
                        maskctc_iterations=10, maskctc_threshold=0.99)
    order = sorted(range(len(feats)), key=lambda i: -feats[i].size(0))
    bs = job["batch_size"]
    batches = []
    for i in range(0, len(order), bs):
        chunk = [feats[j] for j in order[i:i + bs]]
        batches.append((torch.nn.utils.rnn.pad_sequence(chunk, batch_first=True).to(dev),
                        torch.tensor([f.size(0) for f in chunk])))
    audio = sum(f.size(0) for f in feats) / FRAME_RATE
    recognize(model, batches[-1][0][:1, : int(batches[-1][1][0])], batches[-1][1][:1], opts)  # warm-up
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)

    def decode_all() -> int:
        return sum(len(nbest[0].tokens) for x, lens in batches for nbest in recognize(model, x, lens, opts))

    rss_before = _rss_mb()
    with _RSSSampler() as rss:  # memory pass: the polling thread would slow a timed pass down
        decode_all()
    walls = []
    for _ in range(job["repeats"]):  # timed passes; the median is reported
        t0 = time.perf_counter()
        tokens = decode_all()
        walls.append(time.perf_counter() - t0)
    wall = sorted(walls)[len(walls) // 2]
    result = {"shape": job.get("shape") or Path(job["model"]).name, "mode": job["mode"], "batch_size": bs,
              "precision": job["precision"],
              "beam": job["beam"], "utterances": len(feats), "audio_seconds": round(audio, 2),
              "decode_seconds": round(wall, 4), "rtf": wall / audio, "tokens_per_second": tokens / audio,
              "pass_rtfs": [round(w / audio, 5) for w in walls],
              "threads": torch.get_num_threads(), "device": str(dev),
              "peak_rss_mb": round(rss.peak, 1), "delta_rss_mb": round(rss.peak - rss_before, 1),
              "process_max_rss_mb": round(_peak_mb(), 1),
              "params_m": round(model.count_parameters() / 1e6, 2),
              "malloc_tuned": malloc.active()}
    if calibration is not None:
        result["ctc_scale"], result["ctc_blank_bias"] = round(calibration[0], 2), round(calibration[1], 2)
        result["max_len_ratio"] = round(ratio, 4)
    if dev.type == "cuda":
        result["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated(dev) / 2**20, 1)
    return result


def main() -> None:
    from asr_transformer import malloc

    malloc.apply()  # measure with the allocator settings `asr` runs with (ASR_MALLOC_TUNING=0: glibc's defaults)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="small,10m", help="comma list of: " + ", ".join(SHAPES))
    p.add_argument("--modes", default=",".join(ALL_MODES))
    p.add_argument("--batch-sizes", default="1,16")
    p.add_argument("--precisions", default="fp32", help="encoder precisions, comma list of fp32, bf16, fp16 (CUDA)")
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--utts", type=int, default=16, help="utterances per measurement")
    p.add_argument("--min-seconds", type=float, default=3.0)
    p.add_argument("--max-seconds", type=float, default=8.0)
    p.add_argument("--tokens-per-second", type=float, default=3.0)
    p.add_argument("--ctc-peak", type=float, default=0.95, help="mean top CTC posterior of the random model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="timed passes over the batches; RTF is their median")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", help="a trained model package (instead of random weights)")
    p.add_argument("--manifest", help="manifest to decode with --model")
    p.add_argument("--no-isolate", action="store_true", help="run every measurement in this process")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(run_one(json.loads(args.worker))))
        return
    if args.model and not args.manifest:
        p.error("--model needs --manifest")
    base = dict(beam=args.beam, vocab=args.vocab, utts=args.utts, min_seconds=args.min_seconds,
                max_seconds=args.max_seconds, tokens_per_second=args.tokens_per_second, ctc_peak=args.ctc_peak, threads=args.threads,
                repeats=max(1, args.repeats),
                device=args.device, seed=args.seed, model=args.model, manifest=args.manifest)
    shapes = [None] if args.model else args.shapes.split(",")
    jobs = [dict(base, shape=s, precision=pr, batch_size=int(b), mode=m) for s in shapes
            for pr in args.precisions.split(",") for b in args.batch_sizes.split(",") for m in args.modes.split(",")]
    results = []
    header = f"{'shape':<8} {'prec':<4} {'batch':>5} {'mode':<9} {'RTF':>8} {'target':>7} {'tok/s':>6} {'peak MB':>8} {'delta MB':>8}"
    print(header + ("  cuda MB" if args.device.startswith("cuda") else ""))
    for job in jobs:
        if args.no_isolate:
            r = run_one(job)
        else:
            proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], capture_output=True,
                                  text=True, cwd=ROOT)
            if proc.returncode:
                sys.exit(f"measurement {job['shape']}/{job['precision']}/{job['mode']}/{job['batch_size']} failed:\n{proc.stderr}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        target = TARGETS.get(r["mode"])
        line = (f"{r['shape']:<8} {r['precision']:<4} {r['batch_size']:>5} {r['mode']:<9} {r['rtf']:>8.4f} "
                f"{(f'{target:.2f}' if target else ''):>7} {r['tokens_per_second']:>6.1f} {r['peak_rss_mb']:>8.0f} "
                f"{r['delta_rss_mb']:>8.0f}")
        print(line + (f" {r['cuda_peak_mb']:>8.0f}" if "cuda_peak_mb" in r else ""), flush=True)
    info = {"note": "random weights: output capped at tokens_per_second, CTC calibrated to it (see the docstring)"
            if not args.model else "trained package", "args": vars(args), "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    main()
