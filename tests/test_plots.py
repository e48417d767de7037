"""plots: training curves from a hand-written train_log.jsonl, and the cross-attention plot of a tiny package."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch

pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install asr-transformer[plots])")

from asr_transformer.config import Config, apply_preset  # noqa: E402
from asr_transformer.data.tokenizer import train_tokenizer  # noqa: E402
from asr_transformer.model.asr import ASRModel  # noqa: E402
from asr_transformer.package import load_package, save_package  # noqa: E402
from asr_transformer.plots import PlotError, attention_weights, plot_attention, plot_training  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]  # no temp file left


def test_training_curves(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    lines = []
    for epoch in range(1, 7):
        rec = {"epoch": epoch, "step": 10 * epoch, "train_loss": 50 / epoch, "valid_loss": 45 / epoch + 1,
               "valid_loss_att": 40 / epoch, "valid_loss_ctc": 60 / epoch, "valid_acc": 0.5 + 0.07 * epoch,
               "valid_cer": 60 - 8 * epoch, "lr": 1e-3 * min(epoch / 2, 1)}
        if epoch == 3:
            del rec["valid_loss_ctc"], rec["valid_cer"]  # keys may be missing
        lines.append(json.dumps(rec))
    lines.insert(2, json.dumps({"epoch": 2, "train_loss": 99.0}))  # a resumed run repeats epoch 2 ...
    lines.append('{"epoch": 7, "train_lo')  # ... and a crash cut the last line
    (exp / "train_log.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "plots" / "curves.png"
    assert plot_training(exp, out) == out
    assert_png(out)

    # only some metrics: the other panels say "no data", still a PNG
    (exp / "train_log.jsonl").write_text(json.dumps({"epoch": 1, "train_loss": 3.0}) + "\n")
    plot_training(exp, out)
    assert_png(out)


def test_training_curves_errors(tmp_path):
    with pytest.raises(PlotError, match="train_log.jsonl"):
        plot_training(tmp_path, tmp_path / "x.png")
    (tmp_path / "train_log.jsonl").write_text("not json\n")
    with pytest.raises(PlotError, match="no epoch records"):
        plot_training(tmp_path, tmp_path / "x.png")


def test_cli_plot(tmp_path):
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    (tmp_path / "train_log.jsonl").write_text(
        "\n".join(json.dumps({"epoch": e, "train_loss": 5.0 / e, "valid_loss": 6.0 / e}) for e in (1, 2)) + "\n")
    result = CliRunner().invoke(app, ["plot", str(tmp_path), "-o", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    assert_png(tmp_path / "c.png")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("package")
    tok = train_tokenizer(["a cab", "bad dab", "add a bead"], root / "tokenizer", model_type="char")
    cfg = Config()
    apply_preset(cfg.model, "tiny")
    cfg.model.vocab_size = tok.vocab_size
    cfg.decode.max_len_ratio = 0.3
    cfg.decode.beam = 2
    torch.manual_seed(0)
    path = root / "model.pt"
    save_package(path, cfg, tok, ASRModel(cfg.model).state_dict())
    return path


def test_attention_weights_are_distributions(package):
    from asr_transformer.data.features import fbank

    model, _, cfg = load_package(package)
    feats = fbank(torch.from_numpy(np.random.default_rng(0).uniform(-0.3, 0.3, 16000).astype(np.float32)))
    weights = attention_weights(model, feats, [5, 6, 7])
    assert feats.shape[0] == 98
    assert weights.shape == (4, 23)  # tokens + <eos> × encoder frames (((98 - 1) // 2 - 1) // 2)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))
    assert not model.decoder.layers[-1].src_attn._forward_hooks  # hooks removed
    assert not model.decoder.layers[-1].src_attn._forward_pre_hooks


def test_attention_plot(package, tmp_path):
    t = np.arange(24000) / 16000
    wav = tmp_path / "x.wav"
    sf.write(wav, (0.3 * np.sin(2 * np.pi * 440 * t) * (t > 0.2)).astype(np.float32), 16000)
    out = tmp_path / "att.png"
    for mode in (None, "greedy"):
        assert plot_attention(package, wav, out, mode=mode) == out
        assert_png(out)
    with pytest.raises(PlotError, match="missing.wav"):
        plot_attention(package, tmp_path / "missing.wav", out)
