"""The no-speech head (`asr no-speech`, train/no_speech.py): it learns to tell windows of speech from windows
without, it changes no transcript of speech, and decoding silences a window by Whisper's rule (its probability above
decode.no_speech_threshold and the tokens' average log-probability below decode.logprob_threshold)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.config import DecodeConfig
from asr_transformer.data.manifest import read_manifest
from asr_transformer.decode.search import recognize
from asr_transformer.package import load_package, read_package
from asr_transformer.train.no_speech import fit_head, pooled_encodings

RATE = 16000


def asr(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def write_sounds(folder: Path, seed: int = 0) -> Path:
    """Six 'sounds' that are not the tone language: bursts of white and brown noise (a random model's encoder tells
    those from tones; sounds of other kinds than the held-out one are for a trained model to generalise to)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(1.5 * RATE)) / RATE
    for i in range(6):
        white = rng.standard_normal(t.size)
        wave = np.cumsum(white) / 60 if i % 2 else white
        wave = 0.1 * wave * (0.6 + 0.4 * np.sin(2 * np.pi * (1 + i) * t))
        sf.write(folder / f"sound{i}.wav", wave.astype(np.float32), RATE)
    return folder


@pytest.fixture(scope="module")
def headed(tiny_package, tone_corpus, tmp_path_factory):
    """tiny_package with a no-speech head learned from the tone corpus (speech) and `write_sounds`."""
    tmp = tmp_path_factory.mktemp("no_speech")
    result = asr("no-speech", tiny_package / "model.pt", "--speech", tone_corpus / "train.jsonl", "--sounds",
                 write_sounds(tmp / "sounds"), "--out", tmp / "model.pt", "--windows", "60", "--threads", "1")
    assert result.exit_code == 0, result.output
    return tmp


def test_the_head_tells_held_out_speech_from_held_out_sounds(headed):
    state = read_package(headed / "model.pt")
    assert state["config"]["model"]["no_speech_head"] is True
    report = state["info"]["no_speech"]
    assert report["speech_windows"] == report["sound_windows"] == 60
    assert len(report["held_out_files"]) == 1  # a fifth of six files, by file
    assert report["held_out"]["speech_kept_0.5"] >= 0.9
    assert report["held_out"]["sound_silenced_0.5"] >= 0.9
    described = asr("info", headed / "model.pt").output
    assert "no-speech:  a head learned from 60 windows of speech and 60 without (5 sound files" in described


def test_the_head_changes_no_transcript_and_silences_by_whispers_rule(tiny_package, tone_corpus, headed):
    plain, _, _ = load_package(tiny_package / "model.pt")
    model, _, cfg = load_package(headed / "model.pt")
    weights = model.state_dict()
    assert set(weights) - set(plain.state_dict()) == {"no_speech.weight", "no_speech.bias"}
    assert all(torch.equal(value, weights[name]) for name, value in plain.state_dict().items())
    from asr_transformer.data.audio import load_utterance
    from asr_transformer.data.features import fbank

    rng = np.random.default_rng(5)
    waves = [load_utterance(u) for u in read_manifest(tone_corpus / "test.jsonl")[:3]]
    waves += [(0.1 * rng.standard_normal(RATE)).astype(np.float32)]  # a window of noise
    feats = [fbank(torch.from_numpy(w), cfg.features) for w in waves]
    lens = torch.tensor([f.size(0) for f in feats])
    padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    off = DecodeConfig(mode="greedy", no_speech_threshold=1.0)
    reference = [h[0].tokens for h in recognize(plain, padded, lens, off)]
    assert [h[0].tokens for h in recognize(model, padded, lens, off)] == reference

    with torch.no_grad():
        probs = model.no_speech_prob(*model.encode(padded, lens))
    assert probs.shape == (4,) and float(probs[3]) > 0.5 > float(probs[:3].max())
    rule = DecodeConfig(mode="greedy", no_speech_threshold=0.5, logprob_threshold=0.0)  # every window unsure
    got = recognize(model, padded, lens, rule)
    assert [h[0].tokens for h in got[:3]] == reference[:3] and got[3][0].tokens == []
    assert [round(h[0].parts["no_speech_prob"], 5) for h in got] == [round(float(p), 5) for p in probs]
    sure = DecodeConfig(mode="greedy", no_speech_threshold=0.5, logprob_threshold=-1e9)  # every window sure
    assert [h[0].tokens for h in recognize(model, padded, lens, sure)] == reference


def test_the_head_is_used_as_given(headed, tone_corpus):
    """A head forced to say 'no speech' silences every unsure window; one forced to say 'speech' none."""
    model, _, cfg = load_package(headed / "model.pt")
    feats = torch.randn(2, 80, cfg.features.num_mel_bins)
    lens = torch.tensor([80, 50])
    opts = DecodeConfig(mode="greedy", no_speech_threshold=0.6, logprob_threshold=0.0)
    with torch.no_grad():
        model.no_speech.weight.zero_()
        model.no_speech.bias.fill_(10.0)
    assert all(h[0].tokens == [] for h in recognize(model, feats, lens, opts))
    with torch.no_grad():
        model.no_speech.bias.fill_(-10.0)
    kept = recognize(model, feats, lens, opts)
    assert [h[0].parts["no_speech_prob"] < 1e-4 for h in kept] == [True, True]


def test_fit_head_folds_the_standardisation_into_the_layer():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=g) * torch.tensor([1.0, 50.0, 0.01, 3.0, 1.0, 1.0]) + 7.0
    y = (x[:, 2] > 7.0).float()  # the label lies in a feature of tiny scale
    weight, bias = fit_head(x, y, weight_decay=1e-4)
    assert weight.shape == (1, 6) and bias.shape == (1,)
    predicted = (x @ weight.squeeze(0) + bias > 0).float()
    assert float((predicted == y).float().mean()) > 0.97


def test_pooled_encodings_do_not_depend_on_the_batch(tiny_package):
    model, _, cfg = load_package(tiny_package / "model.pt")
    rng = random.Random(0)
    waves = [np.asarray([rng.gauss(0, 0.1) for _ in range(n)], np.float32) for n in (4000, 9000, 16000)]
    together = pooled_encodings(model, cfg.features, waves, batch=3)
    alone = torch.cat([pooled_encodings(model, cfg.features, [w], batch=1) for w in waves])
    assert torch.allclose(together, alone, atol=1e-5)


def test_bad_sound_folders_are_named(tiny_package, tone_corpus, tmp_path):
    base = ["no-speech", tiny_package / "model.pt", "--speech", tone_corpus / "train.jsonl", "--out", tmp_path / "m.pt"]
    result = asr(*base, "--sounds", tmp_path / "nowhere")
    assert result.exit_code != 0 and f"--sounds: no folder {tmp_path / 'nowhere'}" in result.output
    (tmp_path / "empty").mkdir()
    result = asr(*base, "--sounds", tmp_path / "empty")
    assert result.exit_code != 0 and "holds no sound file" in result.output
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "broken.wav").write_bytes(b"RIFF not really")
    result = asr(*base, "--sounds", tmp_path / "bad")
    assert result.exit_code != 0 and "broken.wav" in result.output
    (tmp_path / "one").mkdir()
    write_sounds(tmp_path / "two")
    (tmp_path / "two" / "sound0.wav").rename(tmp_path / "one" / "sound0.wav")
    result = asr(*base, "--sounds", tmp_path / "one")
    assert result.exit_code != 0 and f"--sounds: {tmp_path / 'one'} holds one recording" in result.output
    assert not (tmp_path / "m.pt").exists()


def test_an_export_silences_the_windows_the_package_silences(headed, tone_corpus):
    """The ONNX encoder gives the head's probability as its last output; the export empties what the package
    empties, by the same rule."""
    pytest.importorskip("onnxruntime", reason="export needs the onnx extra: pip install -e '.[onnx]'")
    from asr_transformer.data.audio import load_utterance
    from asr_transformer.inference.export import export_package
    from asr_transformer.inference.exported import ExportedRecognizer
    from asr_transformer.inference.recognizer import Recognizer

    export_package(headed / "model.pt", headed / "onnx")
    rng = np.random.default_rng(3)
    waves = [load_utterance(u) for u in read_manifest(tone_corpus / "test.jsonl")[:3]]
    waves += [(0.05 * rng.standard_normal(12000)).astype(np.float32), (0.1 * rng.standard_normal(8000)).astype(
        np.float32)]
    checks = dict(mode="greedy", no_speech_threshold=0.5, logprob_threshold=0.0)
    want = Recognizer(headed / "model.pt", device="cpu", threads=1, **checks).decode_waves(waves)
    got = ExportedRecognizer(headed / "onnx", threads=1, **checks).decode_waves(waves)
    assert [h.tokens for h in got] == [h.tokens for h in want]
    assert [bool(h.tokens) for h in want] == [True, True, True, False, False]
    np.testing.assert_allclose([h.parts["no_speech_prob"] for h in got], [h.parts["no_speech_prob"] for h in want],
                               atol=1e-4)
