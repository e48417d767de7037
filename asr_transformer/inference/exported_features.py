"""Log-mel features in numpy, for the exported recognizer: the twins of `data/features.py`'s `fbank` (Kaldi's
filterbank) and `whisper_log_mel` (Whisper's), equal to them within float32 rounding (tests/test_export.py)."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from asr_transformer.config import FeatureConfig

INT16_SCALE = 32768.0


@lru_cache(maxsize=8)
def _mel_banks(num_bins: int, padded: int, sample_rate: int, low_freq: float = 20.0) -> np.ndarray:
    """Kaldi's triangular mel filters (num_bins, padded // 2 + 1), as features.mel_banks."""
    def mel(f):
        return 1127.0 * np.log1p(f / 700.0)

    low, high = mel(low_freq), mel(0.5 * sample_rate)
    delta = (high - low) / (num_bins + 1)
    i = np.arange(num_bins, dtype=np.float64)[:, None]
    left, center, right = low + i * delta, low + (i + 1) * delta, low + (i + 2) * delta
    m = mel(sample_rate / padded * np.arange(padded // 2, dtype=np.float64))[None, :]
    banks = np.maximum(np.minimum((m - left) / (center - left), (right - m) / (right - center)), 0.0)
    return np.pad(banks, ((0, 0), (0, 1))).astype(np.float32)  # the Nyquist bin gets no weight


def fbank(wave: np.ndarray, cfg: FeatureConfig = FeatureConfig()) -> np.ndarray:
    """(samples,) float in [-1, 1] → (frames, num_mel_bins) float32 log-mel energies; the numpy twin of
    `data.features.fbank` (Kaldi's: povey window, pre-emphasis 0.97, DC removal, snip edges); with
    ``cfg.kind == "whisper"`` Whisper's features (`whisper_log_mel`), as there."""
    if cfg.kind == "whisper":
        return whisper_log_mel(wave, cfg.num_mel_bins, int(cfg.pad_to_seconds * cfg.sample_rate))
    win = int(cfg.sample_rate * cfg.frame_length_ms / 1000)
    hop = int(cfg.sample_rate * cfg.frame_shift_ms / 1000)
    padded = 1 << (win - 1).bit_length()
    wave = np.asarray(wave, dtype=np.float32)
    if wave.size < win:
        return np.zeros((0, cfg.num_mel_bins), np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(wave * np.float32(INT16_SCALE), win)[::hop]
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = np.concatenate([frames[:, :1] * (1 - 0.97), frames[:, 1:] - 0.97 * frames[:, :-1]], axis=1)
    window = ((0.5 - 0.5 * np.cos(2 * math.pi * np.arange(win) / (win - 1))) ** 0.85).astype(np.float32)
    power = np.abs(np.fft.rfft(frames * window, n=padded)) ** 2
    mel = power.astype(np.float32) @ _mel_banks(cfg.num_mel_bins, padded, cfg.sample_rate).T
    return np.log(np.maximum(mel, np.finfo(np.float32).eps)).astype(np.float32)


def whisper_log_mel(wave: np.ndarray, num_bins: int = 80, pad_to: int = 0) -> np.ndarray:
    """(samples,) float in [-1, 1] → (samples // 160, num_bins) float32; the numpy twin of
    `data.features.whisper_log_mel` (Whisper's features)."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.size < pad_to:
        wave = np.pad(wave, (0, pad_to - wave.size))
    n_fft, hop, frames = 400, 160, wave.size // 160
    if frames == 0:
        return np.zeros((0, num_bins), np.float32)
    if wave.size <= n_fft // 2:  # too short to reflect: zeros beyond the end, as the torch version
        wave = np.pad(wave, (0, n_fft // 2 + 1 - wave.size))
    padded = np.pad(wave, n_fft // 2, mode="reflect")
    window = (0.5 - 0.5 * np.cos(2 * math.pi * np.arange(n_fft) / n_fft)).astype(np.float32)  # periodic Hann
    chunks = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop][:frames]
    power = np.abs(np.fft.rfft(chunks * window, n=n_fft)) ** 2  # (frames, 201)
    log_mel = np.log10(np.maximum(power.astype(np.float32) @ _slaney_banks(num_bins, n_fft).T, 1e-10))
    log_mel = np.maximum(log_mel, log_mel.max() - 8.0)
    return ((log_mel + 4.0) / 4.0).astype(np.float32)


@lru_cache(maxsize=4)
def _slaney_banks(num_bins: int, n_fft: int, sample_rate: int = 16000) -> np.ndarray:
    """Slaney-scale triangular filters of unit area (num_bins, n_fft // 2 + 1), as features.slaney_mel_banks."""
    step = math.log(6.4) / 27.0
    to_mel = lambda hz: np.where(hz < 1000.0, 3.0 * hz / 200.0, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / step)  # noqa: E731
    to_hz = lambda mel: np.where(mel < 15.0, 200.0 * mel / 3.0, 1000.0 * np.exp(step * (mel - 15.0)))  # noqa: E731
    fft_hz = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = to_hz(np.linspace(0.0, float(to_mel(np.float64(sample_rate / 2))), num_bins + 2))
    left, center, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    banks = np.maximum(np.minimum((fft_hz - left) / (center - left), (right - fft_hz) / (right - center)), 0.0)
    return (banks * (2.0 / (right - left))).astype(np.float32)
