"""Plots: training curves from an experiment's train_log.jsonl, and a cross-attention alignment.

matplotlib is optional (``pip install asr-transformer[plots]``) and imported inside the functions. Figures
are drawn with the Agg canvas directly (no pyplot, so no global backend is switched and no window opens)
and written atomically: a temp file in the target folder, then a rename.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from asr_transformer.errors import UserError
from asr_transformer.fileio import atomic_open

MAX_ATTENTION_SECONDS = 30.0  # longer audio makes an unreadable alignment plot: the start is used


class PlotError(UserError, RuntimeError):
    """A plot that cannot be drawn; the message says why and what to do."""


def _matplotlib():
    """→ (Figure class, FigureCanvasAgg class); a clear error when matplotlib is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("plots need matplotlib: pip install asr-transformer[plots]") from None
    return Figure, FigureCanvasAgg


def _save(fig, canvas_class, out_png: str | os.PathLike) -> Path:
    """Render `fig` as PNG to a temp file beside `out_png`, then rename it into place."""
    out = Path(out_png)
    canvas_class(fig)
    with atomic_open(out, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    return out


# ------------------------------------------------------------------------------------- training


def read_train_log(exp: str | os.PathLike) -> list[dict]:
    """The per-epoch records of `exp/train_log.jsonl`, by epoch (a resumed run's repeated epoch: last one
    wins; a damaged line, e.g. cut by a crash, is skipped)."""
    path = Path(exp) / "train_log.jsonl"
    if not path.exists():
        raise PlotError(f"{path}: no training log here; is {exp} an experiment folder of `asr train`?")
    records: dict[int, dict] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("epoch"), (int, float)):
                records[int(rec["epoch"])] = rec
    if not records:
        raise PlotError(f"{path}: no epoch records (one JSON object with an 'epoch' key per line)")
    return [records[e] for e in sorted(records)]


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(int(r["epoch"]))
            ys.append(float(v))
    return xs, ys


def plot_training(exp: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """Three panels per epoch from `exp/train_log.jsonl`: losses (train, valid, valid att/CTC; learning
    rate on a second axis), validation token accuracy (%), validation CER (%). Missing keys leave their
    line (or panel, marked "no data") out. Writes `out_png` atomically and returns its path."""
    Figure, Canvas = _matplotlib()
    records = read_train_log(exp)
    fig = Figure(figsize=(13, 4), layout="constrained")
    ax_loss, ax_acc, ax_cer = fig.subplots(1, 3)

    def line(ax, key, label, scale=1.0, **kw) -> bool:
        xs, ys = _series(records, key)
        if not xs:
            return False
        ax.plot(xs, [y * scale for y in ys], marker="o" if len(xs) < 30 else None, markersize=3, label=label, **kw)
        return True

    def no_data(ax):
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")

    drawn = [line(ax_loss, k, k) for k in ("train_loss", "valid_loss", "valid_loss_att", "valid_loss_ctc")]
    if any(drawn):
        ax_loss.legend(loc="upper right", fontsize=8)
    else:
        no_data(ax_loss)
    xs, ys = _series(records, "lr")
    if xs:
        ax_lr = ax_loss.twinx()
        ax_lr.plot(xs, ys, color="grey", linestyle=":", linewidth=1)
        ax_lr.set_ylabel("learning rate", color="grey", fontsize=8)
        ax_lr.tick_params(axis="y", labelsize=7, colors="grey")
        ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    ax_loss.set(title="loss", xlabel="epoch", ylabel="loss per utterance")

    _, acc = _series(records, "valid_acc")
    scale = 100.0 if acc and max(acc) <= 1.0 else 1.0  # the trainer logs a fraction
    if not line(ax_acc, "valid_acc", "valid_acc", scale=scale, color="tab:green"):
        no_data(ax_acc)
    ax_acc.set(title="token accuracy (validation)", xlabel="epoch", ylabel="%")
    if not line(ax_cer, "valid_cer", "valid_cer", color="tab:red"):
        no_data(ax_cer)
    ax_cer.set(title="CER (validation)", xlabel="epoch", ylabel="%")
    for ax in (ax_loss, ax_acc, ax_cer):
        ax.grid(True, alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(f"{Path(exp).resolve().name}: {len(records)} epochs", fontsize=10)
    return _save(fig, Canvas, out_png)


# ------------------------------------------------------------------------------------ attention


def attention_weights(model, feats, tokens: list[int]):
    """Teacher-forced cross-attention of the last decoder layer, averaged over heads.

    Args:
        model: ASRModel; feats (T, F) raw log-mel features of one utterance; tokens: the hypothesis
            (no <sos>/<eos>).
    Returns:
        (len(tokens) + 1, T') float tensor on the CPU: row i is where the decoder looks while it predicts
        output i (tokens[i], the last row <eos>), over the encoder frames.

    The model is left as it was (`Decoder.cross_attention` computes the weights; train/eval mode is restored).
    """
    import torch

    from asr_transformer.model.mask import lengths_to_mask
    from asr_transformer.tokens import SOS

    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            feats = feats.unsqueeze(0).to(dev)
            enc, enc_lens = model.encode(feats, torch.tensor([feats.size(1)], device=dev))
            ys = torch.tensor([[SOS] + list(tokens)], dtype=torch.long, device=dev)
            weights = model.decoder.cross_attention(enc, lengths_to_mask(enc_lens, enc.size(1)), ys,
                                                    torch.tensor([ys.size(1)], device=dev))  # (1, H, L + 1, T')
    finally:
        model.train(was_training)
    return weights[0].float().mean(0)[:, : int(enc_lens[0])].cpu()


def plot_attention(model_path: str | os.PathLike, audio_path: str | os.PathLike, out_png: str | os.PathLike,
                   mode: str | None = None, device: str = "cpu") -> Path:
    """Transcribe `audio_path` with the package's decoding options (or `mode`), then draw the last decoder
    layer's cross-attention (heads averaged) for the teacher-forced hypothesis: output tokens (pieces, then
    <eos>) × encoder frames. Audio longer than 30 s is cut to its first 30 s. Writes `out_png` atomically."""
    Figure, Canvas = _matplotlib()
    import torch

    from asr_transformer.checkpoint_io import CheckpointError
    from asr_transformer.data.audio import AudioError, load_audio
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.recognizer import Recognizer

    try:  # the package's LMs are left out: the plot shows what the model itself attends to
        rec = Recognizer(model_path, device=str(device), lm=False, word_lm=False, nbest=1,
                         **({"mode": mode} if mode is not None else {}))
    except (CheckpointError, DecodeError, OSError) as e:
        raise PlotError(str(e)) from None
    model, tokenizer, cfg = rec.model, rec.tokenizer, rec.config
    try:
        wave = load_audio(audio_path, duration=MAX_ATTENTION_SECONDS, sample_rate=cfg.features.sample_rate,
                          allow_silent=True)
    except AudioError as e:
        raise PlotError(str(e)) from None
    cut = len(wave) >= int(MAX_ATTENTION_SECONDS * cfg.features.sample_rate)
    feats = rec.features(wave)
    if feats.size(0) == 0:
        raise PlotError(f"{audio_path}: too short to plot (under one 25 ms frame)")
    hyp = rec.recognize(feats.unsqueeze(0), torch.tensor([feats.size(0)]))[0][0]
    weights = attention_weights(model, feats, hyp.tokens).numpy()  # (L + 1, T')
    labels = tokenizer.pieces(hyp.tokens) + ["<eos>"]
    text = rec.text(hyp.tokens)
    opts = rec.options

    frame_ms = cfg.features.frame_shift_ms * cfg.model.subsampling
    rows, cols = weights.shape
    fig = Figure(figsize=(min(16, max(6, 2 + cols / 12)), min(14, max(3, 1.5 + rows * 0.28))), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(weights, aspect="auto", origin="upper", interpolation="nearest", cmap="viridis")
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01, label="attention weight")
    step = max(1, math.ceil(rows / 60))  # at most ~60 labels stay readable
    ax.set_yticks(range(0, rows, step), [labels[i] for i in range(0, rows, step)], fontsize=7)
    ax.set_xlabel(f"encoder frame (× {frame_ms:g} ms)")
    ax.set_ylabel("output token")
    title = text if len(text) <= 90 else text[:87] + "…"
    ax.set_title(f"{Path(audio_path).name}{' (first 30 s)' if cut else ''} · {opts.mode}: {title}", fontsize=9)
    return _save(fig, Canvas, out_png)
