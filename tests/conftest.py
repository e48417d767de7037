"""Shared fixtures: a tiny, learnable 'tone language' corpus generated on the fly.

Each letter of a small alphabet is a 0.12 s tone at its own pitch; an utterance speaks a few
letter-words. A tiny model learns it in seconds, which is what the training tests need.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr_transformer.data.manifest import Utterance, write_manifest

ALPHABET = {"a": 300.0, "b": 500.0, "c": 800.0, "d": 1200.0, "e": 1800.0}
SHARED_DATA = Path(os.environ.get("ASR_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def speak(text: str, rng: random.Random, rate: int = 16000) -> np.ndarray:
    pieces = [np.zeros(int(0.05 * rate), np.float32)]
    for ch in text:
        if ch == " ":
            pieces.append(np.zeros(int(0.06 * rate), np.float32))
            continue
        t = np.arange(int(0.12 * rate)) / rate
        freq = ALPHABET[ch] * rng.uniform(0.97, 1.03)
        pieces.append((0.3 * np.sin(2 * np.pi * freq * t) * np.hanning(len(t))).astype(np.float32))
    pieces.append(np.zeros(int(0.05 * rate), np.float32))
    wave = np.concatenate(pieces)
    return wave + 0.003 * np.asarray([rng.gauss(0, 1) for _ in range(len(wave))], np.float32)


def make_tone_corpus(root: Path, sizes=(("train", 40), ("dev", 8), ("test", 8)), seed: int = 0) -> Path:
    """Write wavs, train/dev/test manifests and a char tokenizer under `root`; returns `root`."""
    from asr_transformer.data.tokenizer import train_tokenizer

    rng = random.Random(seed)
    letters = sorted(ALPHABET)
    texts_all = []
    for split, n in sizes:
        utts = []
        for i in range(n):
            words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 3))]
            text = " ".join(words)
            wave = speak(text, rng)
            path = root / "wav" / f"{split}{i}.wav"
            path.parent.mkdir(parents=True, exist_ok=True)
            sf.write(path, wave, 16000)
            utts.append(Utterance(f"{split}{i:03d}", str(path), len(wave) / 16000, text, f"spk{i % 3}"))
            texts_all.append(text)
        write_manifest(root / f"{split}.jsonl", utts)
    train_tokenizer(texts_all, root / "tokenizer", model_type="char")
    return root


@pytest.fixture(scope="session")
def tone_corpus(tmp_path_factory) -> Path:
    return make_tone_corpus(tmp_path_factory.mktemp("tones"))


@pytest.fixture(scope="session")
def tiny_package(tmp_path_factory):
    """A random `tiny` model package with a char tokenizer, and a 4-utterance test manifest of tones."""
    import torch

    from asr_transformer.config import PRESETS, Config, ModelConfig
    from asr_transformer.data.tokenizer import train_tokenizer
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.package import save_package

    root = tmp_path_factory.mktemp("pkg")
    texts = ["one two three", "four five", "six seven eight nine", "zero one"]
    tok = train_tokenizer(texts * 5, root / "tok", model_type="char")
    cfg = Config()
    cfg.model = ModelConfig(input_dim=cfg.features.num_mel_bins, vocab_size=tok.vocab_size, **PRESETS["tiny"])
    cfg.decode.vad = "energy"  # tones, not speech: Silero's detector hears none
    torch.manual_seed(0)
    model = ASRModel(cfg.model)
    save_package(root / "model.pt", cfg, tok, model.state_dict())
    utts = []
    for i, (text, secs) in enumerate(zip(texts, (0.9, 0.5, 1.2, 0.3))):
        t = np.arange(int(16000 * secs)) / 16000
        path = root / f"u{i}.wav"
        sf.write(path, (0.3 * np.sin(2 * np.pi * (200 + 50 * i) * t)).astype(np.float32), 16000)
        utts.append(Utterance(id=f"u{i}", audio=str(path), duration=secs, text=text))
    write_manifest(root / "test.jsonl", utts)
    return root


@pytest.fixture(scope="session")
def streaming_package(tmp_path_factory):
    """A random streaming Conformer package (char units, ×4) and 3.0 s of tone 'speech' with pauses."""
    import torch

    from asr_transformer.config import PRESETS, Config, ModelConfig
    from asr_transformer.data.tokenizer import train_tokenizer
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.package import save_package

    root = tmp_path_factory.mktemp("stream")
    tok = train_tokenizer(["one two three", "four five six"] * 5, root / "tok", model_type="char")
    cfg = Config()
    cfg.model = ModelConfig(input_dim=cfg.features.num_mel_bins, vocab_size=tok.vocab_size, **PRESETS["tiny"],
                            block="conformer", conv_kernel=5, streaming=True)
    torch.manual_seed(0)
    m = ASRModel(cfg.model)
    cfg.decode.vad = "energy"  # tones, not speech: Silero's detector hears none
    save_package(root / "model.pt", cfg, tok, m.state_dict())
    t = np.arange(16000) / 16000
    rng = np.random.default_rng(0)
    tones = [0.3 * np.sin(2 * np.pi * f * t[: int(16000 * d)]) for f, d in ((220, 0.7), (330, 0.5), (500, 0.6))]
    audio = np.concatenate([tones[0], np.zeros(4000), tones[1], np.zeros(12000), tones[2], np.zeros(3200)])
    audio = (audio + 0.01 * rng.standard_normal(audio.size)).astype(np.float32)
    sf.write(root / "a.wav", audio, 16000, subtype="PCM_16")
    return root, sf.read(root / "a.wav", dtype="float32")[0]
