"""GPU readiness: does the LibriSpeech-100 model train and decode on CUDA, and how fast?
No dataset is needed: everything runs on generated data. Run it through the wrapper, which first checks that
there is a GPU (one line and exit status 2 when there is none):

    bash bench/gpu_check.sh                               # ≈ 10 min on one GPU; writes bench/gpu_check.json
    python bench/gpu_check.py --device cuda --steps 300 --json out.json
    python bench/gpu_check.py --device cpu --steps 3 --small   # smoke test of every code path (< 1 min)

What it does, in one process (the trainer check in subprocesses):

1. The model of `recipes/librispeech/conf/transformer_100h.yaml` (the recipe Makefile's CONF; vocabulary
   `--vocab`, 5000 as the Makefile's VOCAB, since the config leaves it to the tokenizer), on synthetic
   log-mel features: each token of a random target sequence (`--tokens-per-second`, 3 as a 5000-piece BPE on
   read English) is a random 80-d spectrum held for its share of the frames, plus unit noise, so the task can
   be learnt and the loss falls. Utterances last `--min-seconds`..`--max-seconds` (2–16 s); a batch holds
   utterances of similar length up to the config's data.max_frames (padding included) and data.max_batch,
   as the toolkit's FrameBatchSampler packs them. `--batches` distinct batches are made once, before timing,
   and cycled.
2. Trains it `--steps` optimizer steps per precision (`--precisions`, default bf16 then fp16) from the same
   initial weights: ASRModel's forward and losses, Adam as train/setup.py builds it (betas 0.9/0.98, eps 1e-9,
   fused), autocast, a GradScaler for fp16, gradient clipping at train.clip_grad, the trainer's step that skips
   non-finite gradients on the device (no host sync per step), the config's schedule and peak lr but a warmup of
   a third of the steps (the config's 15000 would keep lr near 0 for the whole check).
   Reported per precision: audio seconds per second and steps/s over the steps after `--warmup`, peak memory
   (torch.cuda.max_memory_allocated), the first and final loss (mean of the last 10 steps), skipped steps, the
   FLOPs of a step per audio second (torch's FlopCounterMode) and the model FLOP utilisation against the card's
   dense peak (PEAK_TFLOPS; none for a card not in the table).
3. Runs the real trainer once: `asr train` with the LibriSpeech config and the default device (auto) for 2
   epochs on a generated WAV corpus of `--trainer-hours` (utterances of 2-10 s; words of tone-coded letters, a
   char tokenizer from `asr tokenizer`), through the real loader (its workers, features, SpecAugment, speed
   perturbation); `torchrun` with `--nproc` > 1. Then `asr average` and `asr decode` on the same device. Its
   last epoch's audio seconds per second over the in-memory figure of the same precision is the share of the
   GPU's time the trainer's input and bookkeeping leave to the model (`trainer_vs_model` in the JSON).
4. Decodes `--decode-utts` generated utterances as one batch in every decoding mode with the weights trained
   in the first precision, with `asr_transformer.decode.search.recognize` (as bench/decode_speed.py does), the
   encoder in each of `--decode-precisions`. RTF = decoding wall time (encoder + search; torch.cuda.synchronize
   around it) / audio seconds, the median of `--repeats` passes after a warm-up. The attention decoder's output
   is capped at twice the true token rate (max_len_ratio), in case the briefly trained model does not stop by
   itself. TER: token error rate against the generated targets (only a sign of learning; the check is short).
5. Prints a table and writes a JSON (`--json`; by default bench/gpu_check.json when run on CUDA, none on CPU).

The exit status is 1 when any part failed (the JSON says which), 0 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIG = ROOT / "recipes/librispeech/conf/transformer_100h.yaml"  # recipes/librispeech/Makefile: CONF
FRAME_RATE = 100.0  # feature frames per second (10 ms shift)
MODES = ("greedy", "beam", "joint", "ctc", "ctc_beam", "maskctc", "rescore")


# ------------------------------------------------------------------------------------------- data


class Synth:
    """Generated utterances: random token sequences, each token a fixed random log-mel spectrum (a row of
    `templates`) held for a random share of the frames, plus unit Gaussian noise."""

    def __init__(self, vocab: int, dim: int, tokens_per_second: float, device, seed: int):
        import torch

        from asr_transformer.tokens import NUM_SPECIAL

        self.vocab, self.dim, self.tps, self.dev = vocab, dim, tokens_per_second, device
        self.first = NUM_SPECIAL  # targets never use blank/unk/sos/eos/mask
        self.g = torch.Generator().manual_seed(seed)
        # log-mel-like levels: a sloped mean spectrum and ±2 per token
        slope = torch.linspace(2.0, -4.0, dim)
        self.templates = (slope + 2.0 * torch.randn(vocab, dim, generator=self.g)).to(device)

    def utterance(self, seconds: float):
        """→ (features (T, dim) on the device, tokens (L,) int64 on the CPU)."""
        import torch

        frames = max(8, int(seconds * FRAME_RATE))
        n = max(1, round(seconds * self.tps))
        tokens = torch.randint(self.first, self.vocab, (n,), generator=self.g)
        cuts = torch.sort(torch.randperm(frames - 1, generator=self.g)[: n - 1] + 1).values  # n segments
        owner = torch.bucketize(torch.arange(frames), cuts, right=True)  # token index of each frame
        noise = torch.randn(frames, self.dim, generator=self.g)
        feats = self.templates[tokens[owner].to(self.dev)] + noise.to(self.dev)
        return feats, tokens

    def batch(self, seconds: list[float]) -> dict:
        """Padded batch of utterances of these lengths (tokens padded with IGNORE_ID, as the loader pads)."""
        import torch

        from asr_transformer.tokens import IGNORE_ID

        utts = [self.utterance(s) for s in seconds]
        feats = torch.nn.utils.rnn.pad_sequence([f for f, _ in utts], batch_first=True)
        tokens = torch.nn.utils.rnn.pad_sequence([t for _, t in utts], batch_first=True, padding_value=IGNORE_ID)
        return {"feats": feats, "feat_lens": torch.tensor([f.size(0) for f, _ in utts], device=self.dev),
                "tokens": tokens.to(self.dev), "token_lens": torch.tensor([t.numel() for _, t in utts], device=self.dev),
                "refs": [t.tolist() for _, t in utts], "audio_seconds": sum(f.size(0) for f, _ in utts) / FRAME_RATE}


def training_batches(synth: Synth, n: int, min_s: float, max_s: float, max_frames: int, max_batch: int,
                     utts: int | None, seed: int) -> list[dict]:
    """`n` batches: each of utterances within 10 % of a random length, as many as max_frames (padded) and
    max_batch allow (or exactly `utts`)."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        longest = rng.uniform(min_s, max_s)
        count = utts or max(1, min(max_batch, int(max_frames // (longest * FRAME_RATE))))
        out.append(synth.batch([longest] + [rng.uniform(0.9 * longest, longest) for _ in range(count - 1)]))
    return out


# ------------------------------------------------------------------------------------------- training


def model_config(args):
    from asr_transformer.config import apply_preset, load_config

    cfg = load_config(CONFIG)
    cfg.model.vocab_size = args.vocab or cfg.model.vocab_size or 5000
    cfg.model.input_dim = cfg.features.num_mel_bins
    cfg.model.nat_weight = cfg.model.nat_weight or 0.3  # the decoder's NAT objective too: every mode (maskctc) runs
    if args.small:
        apply_preset(cfg.model, "tiny")
    return cfg


def sync(dev) -> None:
    from asr_transformer.device import synchronize

    synchronize(dev)


def train_one(cfg, precision: str, batches: list[dict], args, dev) -> tuple[dict, object]:
    """`args.steps` optimizer steps in `precision` from the seed's initial weights. → (result row, model)."""
    import torch

    from asr_transformer.device import AUTOCAST_DTYPES
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.train.schedule import learning_rate
    from asr_transformer.train.trainer import step_unless_nonfinite

    tc = cfg.train
    torch.manual_seed(args.seed)
    model = ASRModel(cfg.model)
    sample = batches[0]["feats"][0, : int(batches[0]["feat_lens"][0])]
    model.set_cmvn(sample.mean(0).cpu(), sample.std(0).cpu())  # as `asr train`'s cmvn.json would give
    model.to(dev).train()
    # as train/setup.py `_build_model` builds them
    opt = torch.optim.Adam(model.parameters(), lr=tc.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=tc.weight_decay,
                           fused=dev.type in ("cpu", "cuda"))
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
    dtype = AUTOCAST_DTYPES[precision]  # device.autocast's choice; its fp16 check is for CUDA only, hence direct
    warmup = max(1, args.steps // 3)
    warm = min(args.warmup, max(0, args.steps - 1))
    losses, norms, audio, start = [], [], 0.0, None
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    flops = step_flops(model, batches[0], dev, dtype)
    for step in range(args.steps):
        if step == warm:
            sync(dev)
            start = time.perf_counter()
        b = batches[step % len(batches)]
        with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(b["feats"], b["feat_lens"], b["tokens"], b["token_lens"])
        loss = out["loss"].float()
        if step >= warm:
            audio += b["audio_seconds"]
        losses.append(loss.detach())  # read after the loop: no host sync per step, as in the trainer
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_grad)
        norms.append(norm.detach())
        for group in opt.param_groups:
            group["lr"] = learning_rate(tc.schedule, step + 1, tc.lr, warmup, args.steps)
        step_unless_nonfinite(opt, scaler, norm)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    sync(dev)
    seconds = time.perf_counter() - start
    timed = args.steps - warm
    skipped = sum(not math.isfinite(n) for n in torch.stack(norms).float().tolist())
    losses = [v for v in torch.stack(losses).tolist() if math.isfinite(v)]
    tail = losses[-10:]
    row = {"precision": precision, "steps": args.steps, "timed_steps": timed, "params_M": round(model.count_parameters() / 1e6, 2),
           "audio_s_per_s": round(audio / seconds, 1), "steps_per_s": round(timed / seconds, 3),
           "first_loss": round(losses[0], 3) if losses else None,
           "final_loss": round(sum(tail) / len(tail), 3) if tail else None,
           "loss_fell": bool(tail and tail[-1] < losses[0] and sum(tail) / len(tail) < losses[0]),
           "skipped_steps": skipped, "loss_scale": scaler.get_scale() if scaler.is_enabled() else None,
           "flops_per_audio_second": round(flops / batches[0]["audio_seconds"])}
    peak = peak_flops(dev, precision)
    if peak:
        row["mfu_percent"] = round(100 * row["audio_s_per_s"] * row["flops_per_audio_second"] / peak, 2)
    if dev.type == "cuda":
        row["peak_memory_MB"] = round(torch.cuda.max_memory_allocated(dev) / 2**20)
    return row, model


# dense (no sparsity) tensor-core peaks in FLOP/s from the vendors' data sheets, by a part of the device's name
PEAK_TFLOPS = {"H200": {"bf16": 989, "fp16": 989, "fp32": 67}, "H100": {"bf16": 989, "fp16": 989, "fp32": 67},
               "A100": {"bf16": 312, "fp16": 312, "fp32": 19.5}, "L40S": {"bf16": 362, "fp16": 362, "fp32": 91.6},
               "L4": {"bf16": 121, "fp16": 121, "fp32": 30.3}, "A10": {"bf16": 125, "fp16": 125, "fp32": 31.2},
               "T4": {"fp16": 65, "fp32": 8.1}}


def peak_flops(dev, precision: str) -> float | None:
    """The GPU's peak FLOP/s in `precision` (PEAK_TFLOPS), or None for a CPU or a card not in the table."""
    import torch

    if dev.type != "cuda":
        return None
    name = torch.cuda.get_device_properties(dev).name
    for part, peaks in PEAK_TFLOPS.items():
        if part in name and precision in peaks:
            return peaks[precision] * 1e12
    return None


def step_flops(model, batch: dict, dev, dtype) -> float:
    """FLOPs of one training step (forward and backward) on `batch`, counted by torch's FlopCounterMode (matrix
    products and convolutions; elementwise work is left out, as model FLOP utilisation counts it)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(batch["feats"], batch["feat_lens"], batch["tokens"], batch["token_lens"])
        out["loss"].float().backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


# ------------------------------------------------------------------------------------------- decoding


def token_error_rate(refs: list[list[int]], hyps: list[list[int]]) -> float:
    from asr_transformer.scoring import C, align

    errors = sum(sum(op != C for op, _, _ in align([str(t) for t in r], [str(t) for t in h])) for r, h in zip(refs, hyps))
    return errors / max(1, sum(len(r) for r in refs))


def decode_all(model, cfg, batch: dict, args, dev) -> list[dict]:
    import torch

    from asr_transformer.config import DecodeConfig
    from asr_transformer.decode.search import recognize
    from asr_transformer.package import PRECISIONS

    ratio = 2 * args.tokens_per_second / (FRAME_RATE / cfg.model.subsampling)
    feats, lens = batch["feats"], batch["feat_lens"]
    rows = []
    for precision in args.decode_precisions.split(","):
        m = copy.deepcopy(model).eval()
        if precision != "fp32":
            m.set_encoder_dtype(PRECISIONS[precision])
        for mode in args.modes.split(","):
            opts = DecodeConfig(mode=mode, beam=cfg.decode.beam, ctc_weight=cfg.decode.ctc_weight, max_len_ratio=ratio,
                                maskctc_iterations=cfg.decode.maskctc_iterations,
                                maskctc_threshold=cfg.decode.maskctc_threshold)
            row = {"mode": mode, "encoder_precision": precision, "utterances": len(batch["refs"]),
                   "audio_seconds": round(batch["audio_seconds"], 1)}
            try:
                recognize(m, feats[:1, : int(lens[0])], lens[:1], opts)  # warm-up
                if dev.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(dev)
                walls, hyps = [], None
                for _ in range(args.repeats):
                    sync(dev)
                    t0 = time.perf_counter()
                    out = recognize(m, feats, lens, opts)
                    sync(dev)
                    walls.append(time.perf_counter() - t0)
                    hyps = [nbest[0].tokens for nbest in out]
                wall = statistics.median(walls)
                row.update(rtf=round(wall / batch["audio_seconds"], 5), decode_seconds=round(wall, 3),
                           tokens_per_second=round(sum(map(len, hyps)) / batch["audio_seconds"], 2),
                           ter=round(token_error_rate(batch["refs"], hyps), 4))
                if dev.type == "cuda":
                    row["peak_memory_MB"] = round(torch.cuda.max_memory_allocated(dev) / 2**20)
            except Exception as e:  # one mode failing must not hide the others
                row["error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            rows.append(row)
        del m
    return rows


# ------------------------------------------------------------------------------------------- the real trainer


def tone_corpus(folder: Path, train_seconds: float, n_dev: int, min_s: float, max_s: float, seed: int) -> None:
    """A generated corpus: utterances of `min_s`..`max_s` seconds, words of letters each an 80 ms tone of its own
    pitch (+ a little noise), 16 kHz WAVs; train.jsonl holds `train_seconds` of them, dev.jsonl `n_dev`."""
    import numpy as np
    import soundfile

    from asr_transformer.data.manifest import Utterance, write_manifest

    rng = np.random.default_rng(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "kilo"]
    letters = "abcdefghijklmnopqrstuvwxyz "
    sr, hold = 16000, 1280  # 80 ms a letter
    t = np.arange(hold) / sr
    tones = {c: 0.3 * np.sin(2 * np.pi * (200 + 60 * letters.index(c)) * t) for c in letters}
    (folder / "wav").mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        utts, total = [], 0.0
        while (total < train_seconds) if split == "train" else (len(utts) < n_dev):
            letters_wanted = int(rng.uniform(min_s, max_s) * sr / hold)
            text = ""
            while len(text) < letters_wanted:
                text = (text + " " if text else "") + str(rng.choice(words))
            wave = np.concatenate([tones[c] for c in text])
            wave = (wave + 0.01 * rng.standard_normal(wave.size)).astype(np.float32)
            i = len(utts)
            path = folder / "wav" / f"{split}{i:05d}.wav"
            soundfile.write(path, wave, sr, subtype="PCM_16")
            utts.append(Utterance(f"{split}{i:05d}", str(path), round(wave.size / sr, 3), text, speaker=f"s{i % 2}"))
            total += wave.size / sr
        write_manifest(folder / f"{split}.jsonl", utts)


def run_cmd(cmd: list[str], timeout: float, env=None) -> dict:
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
        rc, out = p.returncode, (p.stdout + p.stderr)
    except subprocess.TimeoutExpired as e:
        rc, out = 124, f"timed out after {timeout:.0f} s\n" + ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
    result = {"rc": rc, "seconds": round(time.perf_counter() - t0, 1)}
    if rc:
        result["output_tail"] = out[-3000:]
        print(out[-3000:], file=sys.stderr)
    return result


def trainer_check(args, work: Path) -> dict:
    data, exp = work / "data", work / "exp"
    t0 = time.perf_counter()
    if args.small:
        tone_corpus(data, 30, 4, 0.5, 1.5, args.seed)
    else:
        tone_corpus(data, args.trainer_hours * 3600, 40, 2.0, 10.0, args.seed)
    from asr_transformer.data.manifest import read_manifest

    result = {"corpus_hours": round(sum(u.duration for u in read_manifest(data / "train.jsonl")) / 3600, 3),
              "corpus_seconds_to_make": round(time.perf_counter() - t0, 1)}
    py = [sys.executable, "-m", "asr_transformer"]
    torchrun = Path(sys.executable).with_name("torchrun")
    launcher = [str(torchrun)] if torchrun.exists() else [sys.executable, "-m", "torch.distributed.run"]
    result["tokenizer"] = run_cmd(py + ["tokenizer", str(data / "train.jsonl"), "--out", str(data / "tokenizer"),
                                        "--model-type", "char"], 300)
    if result["tokenizer"]["rc"]:
        return result
    overrides = ["train.max_epochs=2", "train.warmup_steps=4", "data.max_frames=1000"]
    if args.small:
        overrides += ["model.preset=tiny", "data.num_workers=0"]
    # one process: `asr train` as a user types it, with the default device (auto: this process's GPU)
    cmd = py if args.nproc == 1 else launcher + ["--standalone", "--nproc_per_node", str(args.nproc), "-m",
                                                 "asr_transformer"]
    cmd = cmd + ["train", "--data", str(data), "--exp", str(exp), "--config", str(CONFIG)]
    cmd += ["--device", "cpu", "--threads", "1"] if args.device == "cpu" else []
    for o in overrides:
        cmd += ["--set", o]
    result["train"] = train = run_cmd(cmd, args.trainer_timeout)
    log = exp / "train_log.jsonl"
    if log.exists():
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        train["epochs"] = len(records)
        if records:
            last = records[-1]
            train.update({k: last[k] for k in ("precision", "train_loss", "valid_loss", "audio_seconds_per_second",
                                                "skipped_steps", "epoch_seconds") if k in last})
    if train["rc"] or not train.get("epochs"):
        return result
    result["average"] = run_cmd(py + ["average", str(exp), "--out", str(exp / "model.pt"), "--last", "1"], 300)
    if result["average"]["rc"]:
        return result
    decode = py + ["decode", str(exp / "model.pt"), str(data / "dev.jsonl"), "--out", str(exp / "decode"), "--mode",
                   "greedy,joint,ctc", "--device", args.device, "--no-lm", "--no-score"]
    result["decode"] = run_cmd(decode + (["--threads", "1"] if args.device == "cpu" else []), 300)
    return result


# ------------------------------------------------------------------------------------------- main


def environment(dev) -> dict:
    import torch

    info = {"torch": torch.__version__, "device": str(dev), "cuda_runtime": torch.version.cuda}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(gpu=p.name, capability=f"{p.major}.{p.minor}", memory_GB=round(p.total_memory / 2**30, 1),
                    bf16_supported=torch.cuda.is_bf16_supported(), gpus_visible=torch.cuda.device_count())
    return info


def main() -> None:
    from asr_transformer import malloc

    malloc.apply()  # the allocator settings `asr` runs with
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (cpu: a smoke test, with --small)")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per precision")
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    p.add_argument("--precisions", default="bf16,fp16", help="training precisions (autocast); the first one's "
                   "weights are decoded")
    p.add_argument("--small", action="store_true", help="the tiny preset, 2 utterances of 1-2.5 s a batch, short decodes")
    p.add_argument("--vocab", type=int, default=0, help="vocabulary (0: the config's, else 5000 as the recipe's VOCAB)")
    p.add_argument("--batches", type=int, default=16, help="distinct training batches, cycled")
    p.add_argument("--min-seconds", type=float, default=2.0)
    p.add_argument("--max-seconds", type=float, default=16.0)
    p.add_argument("--tokens-per-second", type=float, default=3.0)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--decode-precisions", default="fp32,bf16", help="encoder precisions of the decoding runs")
    p.add_argument("--decode-utts", type=int, default=16, help="utterances decoded (one batch)")
    p.add_argument("--repeats", type=int, default=3, help="timed decoding passes; RTF is their median")
    p.add_argument("--nproc", type=int, default=1, help="processes (GPUs) of the trainer check (> 1: torchrun)")
    p.add_argument("--trainer-hours", type=float, default=3.0, help="hours of generated WAVs the trainer trains on")
    p.add_argument("--trainer-timeout", type=float, default=600.0, help="seconds allowed to `asr train`")
    p.add_argument("--skip-trainer", action="store_true", help="leave out the trainer check")
    p.add_argument("--workdir", help="where the trainer check writes its corpus and experiment (default: a "
                   "temporary folder, removed at the end)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the results here (default on CUDA: bench/gpu_check.json)")
    args = p.parse_args()

    import torch

    from asr_transformer.device import DeviceError, pick_device

    try:
        dev = pick_device(args.device)
    except DeviceError as e:
        sys.exit(f"gpu_check: {e}")
    if dev.type == "cpu" and not args.small:
        print("note: the full-size check on a CPU takes hours; use --small for a smoke test", file=sys.stderr)
    if args.small:
        args.batches, args.decode_utts, args.repeats = 2, 2, 1
        args.min_seconds, args.max_seconds = min(args.min_seconds, 1.0), min(args.max_seconds, 2.5)
        args.decode_precisions = "fp32"
    if dev.type == "cpu":
        torch.set_num_threads(1 if args.small else torch.get_num_threads())
    results: dict = {"command": " ".join(sys.argv), "config": str(CONFIG.relative_to(ROOT)),
                     "environment": environment(dev), "failures": []}
    cfg = model_config(args)
    results["model"] = {"preset": "tiny" if args.small else "base (config)", "vocab": cfg.model.vocab_size,
                        "max_frames": cfg.data.max_frames, "max_batch": cfg.data.max_batch}
    print(f"device {dev} ({results['environment'].get('gpu', 'CPU')}), torch {torch.__version__}; "
          f"config {results['config']}, vocabulary {cfg.model.vocab_size}", flush=True)

    # 1-2: training throughput per precision
    synth = Synth(cfg.model.vocab_size, cfg.model.input_dim, args.tokens_per_second, dev, args.seed)
    t0 = time.perf_counter()
    batches = training_batches(synth, args.batches, args.min_seconds, args.max_seconds, cfg.data.max_frames,
                               cfg.data.max_batch, 2 if args.small else None, args.seed)
    print(f"{len(batches)} training batches generated in {time.perf_counter() - t0:.1f} s: "
          f"{sum(len(b['refs']) for b in batches)} utterances, {sum(b['audio_seconds'] for b in batches) / 3600:.2f} h",
          flush=True)
    results["training"], trained = [], None
    for precision in args.precisions.split(","):
        try:
            row, model = train_one(cfg, precision, batches, args, dev)
        except Exception as e:
            traceback.print_exc()
            row, model = {"precision": precision, "error": f"{type(e).__name__}: {e}"}, None
            results["failures"].append(f"training {precision}")
        results["training"].append(row)
        print(json.dumps(row), flush=True)
        if trained is None and model is not None:
            trained, results["decoded_weights"] = model, precision
        else:
            del model
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    for row in results["training"]:
        if "error" not in row and not row["loss_fell"] and args.steps >= 50:
            results["failures"].append(f"training {row['precision']}: the loss did not fall")
    del batches

    # 4: decoding in every mode with the trained weights
    results["decoding"] = []
    if trained is not None:
        synth.g.manual_seed(args.seed + 1)  # held-out draws of the same "language"
        import random

        rng = random.Random(args.seed + 1)
        test = synth.batch([rng.uniform(args.min_seconds, args.max_seconds) for _ in range(args.decode_utts)])
        results["decoding"] = decode_all(trained, cfg, test, args, dev)
        results["failures"] += [f"decoding {r['mode']}/{r['encoder_precision']}" for r in results["decoding"] if "error" in r]
        del trained, test
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    # 3: the real trainer (`asr train`, torchrun with --nproc > 1), then `asr average` and `asr decode`
    if not args.skip_trainer:
        work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu_check_"))
        try:
            results["trainer"] = trainer_check(args, work)
        except Exception as e:
            traceback.print_exc()
            results["trainer"] = {"error": f"{type(e).__name__}: {e}"}
        finally:
            if not args.workdir:
                shutil.rmtree(work, ignore_errors=True)
        tr = results["trainer"]
        results["failures"] += [f"trainer: {k}" for k, v in tr.items() if k == "error" or (isinstance(v, dict) and v.get("rc"))]
        if "train" in tr and not tr["train"].get("rc") and tr["train"].get("epochs", 0) < 2:
            results["failures"].append("trainer: fewer than 2 epochs logged")
        results["trainer_vs_model"] = trainer_ratio(results)

    print_table(results)
    out = args.json or (str(ROOT / "bench/gpu_check.json") if dev.type == "cuda" else None)
    if out:
        Path(out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"→ {out}")
    if results["failures"]:
        print("FAILED: " + "; ".join(results["failures"]), file=sys.stderr)
        sys.exit(1)


def print_table(results: dict) -> None:
    print("\ntraining      audio s/s  steps/s  peak MB  first loss  final loss  skipped")
    for r in results["training"]:
        if "error" in r:
            print(f"  {r['precision']:<10} ERROR {r['error']}")
            continue
        print(f"  {r['precision']:<10} {r['audio_s_per_s']:>9} {r['steps_per_s']:>8} {str(r.get('peak_memory_MB', '-')):>8} "
              f"{r['first_loss']:>11} {r['final_loss']:>11} {r['skipped_steps']:>8}")
    if results["decoding"]:
        print(f"decoding ({results.get('decoded_weights')} weights)  enc    RTF      tok/s   TER    peak MB")
        for r in results["decoding"]:
            if "error" in r:
                print(f"  {r['mode']:<9} {r['encoder_precision']:<5} ERROR {r['error']}")
                continue
            print(f"  {r['mode']:<9} {r['encoder_precision']:<5} {r['rtf']:>8.5f} {r['tokens_per_second']:>8} "
                  f"{r['ter']:>6.3f} {str(r.get('peak_memory_MB', '-')):>8}")
    tr = results.get("trainer")
    if tr:
        parts = [f"{k} rc {v['rc']} ({v['seconds']} s)" for k, v in tr.items() if isinstance(v, dict) and "rc" in v]
        t = tr.get("train", {})
        if t.get("epochs"):
            parts.append(f"{t['epochs']} epochs, {t.get('precision')}, train_loss {t.get('train_loss', 0):.3f}")
        print("trainer: " + ("; ".join(parts) if parts else tr.get("error", "")))
    ratio = results.get("trainer_vs_model")
    if ratio:
        print(f"the real trainer (epoch 2, {ratio['precision']}): {ratio['trainer_audio_s_per_s']} audio s/s = "
              f"{ratio['ratio']:.2f} × the in-memory model step ({ratio['model_audio_s_per_s']} audio s/s)"
              + (f"; model FLOP utilisation {ratio['model_mfu_percent']} %" if ratio.get("model_mfu_percent") else ""))


def trainer_ratio(results: dict) -> dict | None:
    """The real trainer's speed (its last epoch) over the in-memory loop's in the same precision."""
    train = results.get("trainer", {}).get("train", {})
    rows = {r["precision"]: r for r in results["training"] if "error" not in r}
    model = rows.get(train.get("precision"))
    if not model or not train.get("audio_seconds_per_second"):
        return None
    return {"precision": train["precision"], "trainer_audio_s_per_s": train["audio_seconds_per_second"],
            "model_audio_s_per_s": model["audio_s_per_s"], "model_mfu_percent": model.get("mfu_percent"),
            "ratio": round(train["audio_seconds_per_second"] / model["audio_s_per_s"], 3)}


if __name__ == "__main__":
    main()
