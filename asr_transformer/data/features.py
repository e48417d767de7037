"""Log-mel filterbank features (Kaldi-compatible, with Kaldi's VTLN warp; or Whisper's log-mel spectrogram),
global CMVN statistics, per-speaker means, augmentation (speed perturbation, white noise, a random microphone,
SpecAugment).

`fbank` matches ``torchaudio.compliance.kaldi.fbank`` for the same settings (povey window,
pre-emphasis 0.97, DC removal, power spectrum, snip edges, mel floor 20 Hz) but is vectorized
and runs on any device. Audio is scaled to 16-bit range first, as Kaldi reads it.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

import numpy as np
import torch

from asr_transformer.config import AugmentConfig, FeatureConfig
from asr_transformer.data.manifest import UNKNOWN_SPEAKER
from asr_transformer.fileio import read_json, write_json

CMVN_FORMAT = "asr-cmvn"
CMVN_VERSION = 1
INT16_SCALE = 32768.0
MAX_FBANK_PEAK = 1e6  # |sample| up to which fbank's power spectrum stays far below float32's limit (3.4e38)


def _mel(freq):
    return 1127.0 * torch.log1p(freq / 700.0)


def _hz(mel):
    return 700.0 * torch.expm1(mel / 1127.0)


def vtln_warp(freq: torch.Tensor, warp: float, low_freq: float, high_freq: float, vtln_low: float = 100.0,
              vtln_high: float | None = None) -> torch.Tensor:
    """Kaldi's piecewise-linear vocal tract length warp of frequencies in Hz: ``f / warp`` between the cutoffs
    (``vtln_low · max(1, warp)`` and ``vtln_high · min(1, warp)``; vtln_high defaults to 500 Hz below
    `high_freq`), and straight lines from there that keep `low_freq` and `high_freq` where they are."""
    vtln_high = high_freq - 500.0 if vtln_high is None else vtln_high
    low, high = vtln_low * max(1.0, warp), vtln_high * min(1.0, warp)
    below = low_freq + (low / warp - low_freq) / (low - low_freq) * (freq - low_freq)
    above = high_freq + (high_freq - high / warp) / (high_freq - high) * (freq - high_freq)
    warped = torch.where(freq < low, below, torch.where(freq < high, freq / warp, above))
    return torch.where((freq < low_freq) | (freq > high_freq), freq, warped)


@lru_cache(maxsize=32)
def mel_banks(num_bins: int, padded_window: int, sample_rate: int, low_freq: float = 20.0,
              warp: float = 1.0) -> torch.Tensor:
    """Kaldi's triangular mel filters → (num_bins, padded_window // 2 + 1), float32; with `warp` ≠ 1 the
    filters' edges move by `vtln_warp` (Kaldi's VTLN, as ``torchaudio.compliance.kaldi.fbank(vtln_warp=…)``)."""
    num_fft_bins = padded_window // 2
    nyquist = 0.5 * sample_rate
    mel_low, mel_high = _mel(torch.tensor(low_freq, dtype=torch.float64)), _mel(torch.tensor(nyquist, dtype=torch.float64))
    delta = (mel_high - mel_low) / (num_bins + 1)
    i = torch.arange(num_bins, dtype=torch.float64).unsqueeze(1)
    left, center, right = mel_low + i * delta, mel_low + (i + 1) * delta, mel_low + (i + 2) * delta
    if warp != 1.0:
        left, center, right = (_mel(vtln_warp(_hz(m), warp, low_freq, nyquist)) for m in (left, center, right))
    mel = _mel(sample_rate / padded_window * torch.arange(num_fft_bins, dtype=torch.float64)).unsqueeze(0)
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    banks = torch.clamp(torch.minimum(up, down), min=0.0)
    return torch.nn.functional.pad(banks, (0, 1)).float()  # the Nyquist bin gets no weight


@lru_cache(maxsize=8)
def povey_window(length: int) -> torch.Tensor:
    n = torch.arange(length, dtype=torch.float64)
    return (0.5 - 0.5 * torch.cos(2 * math.pi * n / (length - 1))).pow(0.85).float()


def num_frames(num_samples: int, cfg: FeatureConfig = FeatureConfig()) -> int:
    """Frames `fbank` makes from `num_samples` samples (Kaldi: snip edges; Whisper: one per hop, padding included)."""
    if cfg.kind == "whisper":
        return max(num_samples, int(cfg.pad_to_seconds * cfg.sample_rate)) // WHISPER_HOP
    win = int(cfg.sample_rate * cfg.frame_length_ms / 1000)
    hop = int(cfg.sample_rate * cfg.frame_shift_ms / 1000)
    return 0 if num_samples < win else 1 + (num_samples - win) // hop


def fbank(waveform: torch.Tensor, cfg: FeatureConfig = FeatureConfig(), dither: float = 0.0,
          warp: float = 1.0) -> torch.Tensor:
    """(samples,) float in [-1, 1] → (frames, num_mel_bins) log-mel energies; `warp` ≠ 1 warps the frequency
    axis of the filterbank (vocal tract length perturbation, `vtln_warp`).

    Finite input gives finite output: a waveform peaking above MAX_FBANK_PEAK (whose power would overflow
    float32) is scaled down to that peak and its log-energies raised by 2·log of the scale, which leaves every
    other waveform's features as they were, bit for bit.

    With ``cfg.kind == "whisper"`` this is `whisper_log_mel` (no dither or warp)."""
    if cfg.kind == "whisper":
        return whisper_log_mel(waveform, cfg.num_mel_bins, int(cfg.pad_to_seconds * cfg.sample_rate))
    win = int(cfg.sample_rate * cfg.frame_length_ms / 1000)
    hop = int(cfg.sample_rate * cfg.frame_shift_ms / 1000)
    padded = 1 << (win - 1).bit_length()
    if waveform.numel() < win:
        return waveform.new_zeros(0, cfg.num_mel_bins)
    gain = torch.clamp(waveform.detach().abs().amax() / MAX_FBANK_PEAK, min=1.0)
    frames = (waveform / gain * INT16_SCALE).unfold(0, win, hop)  # (frames, win)
    if dither > 0:
        frames = frames + dither * torch.randn_like(frames)
    frames = frames - frames.mean(dim=1, keepdim=True)
    frames = torch.cat([frames[:, :1] * (1 - 0.97), frames[:, 1:] - 0.97 * frames[:, :-1]], dim=1)
    frames = frames * povey_window(win).to(frames.device)
    power = torch.fft.rfft(frames, n=padded).abs().pow(2)  # (frames, padded // 2 + 1)
    mel = power @ mel_banks(cfg.num_mel_bins, padded, cfg.sample_rate, warp=warp).to(frames.device).T
    return torch.clamp(mel, min=torch.finfo(torch.float32).eps).log() + 2 * gain.log()


# ---------------------------------------------------------------- Whisper's log-mel spectrogram

WHISPER_FFT, WHISPER_HOP = 400, 160  # 25 ms window, 10 ms hop at 16 kHz


def _slaney_mel(hz: torch.Tensor) -> torch.Tensor:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    log_step = math.log(6.4) / 27.0
    return torch.where(hz < 1000.0, 3.0 * hz / 200.0, 15.0 + torch.log(hz.clamp(min=1e-10) / 1000.0) / log_step)


def _slaney_hz(mel: torch.Tensor) -> torch.Tensor:
    log_step = math.log(6.4) / 27.0
    return torch.where(mel < 15.0, 200.0 * mel / 3.0, 1000.0 * torch.exp(log_step * (mel - 15.0)))


@lru_cache(maxsize=4)
def slaney_mel_banks(num_bins: int, n_fft: int = WHISPER_FFT, sample_rate: int = 16000) -> torch.Tensor:
    """Triangular filters on Slaney's mel scale from 0 Hz to Nyquist, each normalised to unit area (librosa's
    default `filters.mel`, which Whisper uses) → (num_bins, n_fft // 2 + 1), float32."""
    fft_hz = torch.linspace(0.0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)
    edges = _slaney_hz(torch.linspace(0.0, float(_slaney_mel(torch.tensor(sample_rate / 2.0))), num_bins + 2,
                                      dtype=torch.float64))
    left, center, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (fft_hz - left) / (center - left)
    down = (right - fft_hz) / (right - center)
    banks = torch.clamp(torch.minimum(up, down), min=0.0) * (2.0 / (right - left))
    return banks.float()


def whisper_log_mel(waveform: torch.Tensor, num_bins: int = 80, pad_to: int = 0) -> torch.Tensor:
    """Whisper's features: (samples,) float in [-1, 1] → (samples // 160, num_bins).

    Power STFT (periodic Hann window of 400, hop 160, centred with reflected edges, the last frame dropped), Slaney
    mel filters, log10 floored at 1e-10 and at 8 below the utterance's peak, then (x + 4) / 4. `pad_to`: zero-pad
    the waveform to that many samples first (Whisper pads to 30 s).
    """
    if waveform.numel() < pad_to:
        waveform = torch.nn.functional.pad(waveform, (0, pad_to - waveform.numel()))
    frames = waveform.numel() // WHISPER_HOP
    if frames == 0:
        return waveform.new_zeros(0, num_bins)
    padded = waveform
    if waveform.numel() <= WHISPER_FFT // 2:  # too short to reflect: zeros beyond the end
        padded = torch.nn.functional.pad(waveform, (0, WHISPER_FFT // 2 + 1 - waveform.numel()))
    window = torch.hann_window(WHISPER_FFT, device=waveform.device)
    spec = torch.stft(padded.float(), WHISPER_FFT, WHISPER_HOP, window=window, return_complex=True)
    power = spec[:, :frames].abs().pow(2)  # (bins, frames)
    mel = slaney_mel_banks(num_bins, WHISPER_FFT).to(power.device) @ power
    log_mel = torch.clamp(mel, min=1e-10).log10()
    log_mel = torch.maximum(log_mel, log_mel.max() - 8.0)
    return ((log_mel + 4.0) / 4.0).T.contiguous()


# ---------------------------------------------------------------- global CMVN


class CMVNAccumulator:
    """Streaming mean/variance of feature dimensions with float64 sums."""

    def __init__(self, dim: int):
        self.sum = np.zeros(dim, dtype=np.float64)
        self.sum_sq = np.zeros(dim, dtype=np.float64)
        self.frames = 0

    def add(self, feats: torch.Tensor) -> None:
        x = feats.detach().cpu().double().numpy()
        self.sum += x.sum(axis=0)
        self.sum_sq += (x * x).sum(axis=0)
        self.frames += x.shape[0]

    def mean(self) -> np.ndarray:
        """The mean so far (zeros before the first frame)."""
        return self.sum / max(self.frames, 1)

    def stats(self) -> tuple[np.ndarray, np.ndarray]:
        if self.frames == 0:
            raise ValueError("CMVN: no frames were accumulated")
        mean = self.mean()
        var = np.maximum(self.sum_sq / self.frames - mean * mean, 1e-20)
        return mean, np.sqrt(var)


def save_cmvn(path: str | os.PathLike, mean: np.ndarray, std: np.ndarray, frames: int) -> None:
    write_json(path, {"format": CMVN_FORMAT, "version": CMVN_VERSION, "frames": int(frames),
                      "mean": [float(v) for v in mean], "std": [float(v) for v in std]})


def load_cmvn(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    stats = read_json(path)
    if stats.get("format") != CMVN_FORMAT:
        raise ValueError(f"{path}: not a CMVN statistics file (format {stats.get('format')!r})")
    return np.asarray(stats["mean"], dtype=np.float64), np.asarray(stats["std"], dtype=np.float64)


def speaker_means(speakers: list[str], feats_of) -> list[torch.Tensor]:
    """Each utterance's speaker's mean log-mel, (F,) float32 per utterance: the mean over all frames of all the
    utterances with its speaker label (Kaldi's per-speaker CMN). `speakers[i]` is utterance i's label,
    `feats_of(i)` its features (T, F). An utterance of speaker "unknown" gets its own mean."""
    stats: dict[str, CMVNAccumulator] = {}
    keys = []
    for i, speaker in enumerate(speakers):
        key = f"\0utt{i}" if speaker == UNKNOWN_SPEAKER else speaker  # NUL: no manifest label collides
        feats = feats_of(i)
        if key not in stats:
            stats[key] = CMVNAccumulator(feats.size(1))
        stats[key].add(feats)
        keys.append(key)
    means = {k: torch.from_numpy(acc.mean()).float() for k, acc in stats.items()}
    return [means[k] for k in keys]


# ---------------------------------------------------------------- augmentation


def speed_perturb(waveform: torch.Tensor, factor: float) -> torch.Tensor:
    """Play `factor`× faster (pitch shifts too, like sox `speed`): (samples,) → (samples / factor,)."""
    if factor == 1.0:
        return waveform
    import torchaudio.functional as AF

    orig, new = round(factor * 100), 100
    g = math.gcd(orig, new)
    return AF.resample(waveform, orig // g, new // g)


def add_silence(waveform: torch.Tensor, before: int, after: int, rng: torch.Generator) -> torch.Tensor:
    """`before` and `after` samples of silence around the waveform: (samples,) → (before + samples + after,).

    The silence is faint white noise at −90 to −60 dBFS (drawn), or one time in five digital zeros, as recordings
    and generated speech have it."""
    draw = torch.rand(2, generator=rng).tolist()
    level = 0.0 if draw[0] < 0.2 else 10 ** ((-90 + 30 * draw[1]) / 20)
    noise = level * torch.randn(before + after, generator=rng, dtype=waveform.dtype)
    return torch.cat([noise[:before], waveform, noise[before:]])


def add_noise(waveform: torch.Tensor, snr_db: float, rng: torch.Generator) -> torch.Tensor:
    """White Gaussian noise at `snr_db` below the waveform's mean power: (samples,) → (samples,).

    A different noise floor for every utterance and epoch, so that a recording's own floor (its microphone
    and room) stops telling its speaker apart."""
    power = waveform.pow(2).mean()
    noise = torch.randn(waveform.shape, generator=rng, dtype=waveform.dtype)
    return waveform + noise * (power / 10 ** (snr_db / 10)).sqrt()


def random_equalizer(feats: torch.Tensor, max_db: float, rng: torch.Generator, points: int = 6) -> torch.Tensor:
    """A random microphone: log-mel (frames, bins) plus a smooth gain curve over the bins, in dB drawn uniformly
    from ±`max_db` at `points` evenly spaced bins and interpolated linearly between them, as if recorded
    through a filter with that frequency response (smooth on the scale of a mel band)."""
    gains = (2 * torch.rand(points, generator=rng, dtype=torch.float64) - 1) * max_db
    curve = torch.nn.functional.interpolate(gains.view(1, 1, -1), size=feats.size(1), mode="linear",
                                            align_corners=True).view(-1)
    return feats + (curve * math.log(10.0) / 10.0).to(feats.dtype)  # dB of power → natural log


def time_warp(feats: torch.Tensor, max_warp: int, rng: torch.Generator) -> torch.Tensor:
    """Warp (frames, bins) in time around a random centre by up to `max_warp` frames."""
    t = feats.shape[0]
    if max_warp <= 0 or t <= 2 * max_warp + 2:
        return feats
    centre = int(torch.randint(max_warp + 1, t - max_warp, (1,), generator=rng))
    warped = centre + int(torch.randint(-max_warp, max_warp + 1, (1,), generator=rng))
    x = feats.T.unsqueeze(0)  # (1, bins, frames)
    left = torch.nn.functional.interpolate(x[..., :centre], size=warped, mode="linear", align_corners=False)
    right = torch.nn.functional.interpolate(x[..., centre:], size=t - warped, mode="linear", align_corners=False)
    return torch.cat([left, right], dim=-1)[0].T


def spec_augment(feats: torch.Tensor, cfg: AugmentConfig, rng: torch.Generator) -> torch.Tensor:
    """SpecAugment (Park et al. 2019): time warp, frequency masks, time masks. (frames, bins) → same."""
    feats = time_warp(feats, cfg.time_warp, rng).clone()
    frames, bins = feats.shape
    for _ in range(cfg.freq_masks):
        width = int(torch.randint(0, cfg.freq_mask_width + 1, (1,), generator=rng))
        start = int(torch.randint(0, max(1, bins - width), (1,), generator=rng))
        feats[:, start:start + width] = 0.0
    max_time = min(cfg.time_mask_width, int(cfg.time_mask_ratio * frames))
    for _ in range(cfg.time_masks):
        width = int(torch.randint(0, max_time + 1, (1,), generator=rng))
        start = int(torch.randint(0, max(1, frames - width), (1,), generator=rng))
        feats[start:start + width, :] = 0.0
    return feats
