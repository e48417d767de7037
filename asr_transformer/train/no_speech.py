"""The no-speech head (`asr no-speech`): a package learns which windows hold no speech.

Whisper learned from its 680,000 hours that a window can hold no speech, and says so with its no-speech token. A
model trained on a corpus of utterances has heard nothing but speech: it writes words for a bell or a jingle that
the voice detector let through. The head is one linear layer on the encoder's output averaged over a window
(`ASRModel.no_speech_prob`), trained here with the rest of the model frozen, so that every transcript of speech
stays what it was; decoding then silences a window as Whisper's rule does (decode.no_speech_threshold with
decode.logprob_threshold).

It learns from windows of speech (utterances of a training manifest; a share of them with a stretch of sound on
one side, as a voice detector's segment can have) and windows without speech (stretches of real recordings from a
folder of sounds, and white or brown noise). Each window is drawn at a level over 18 dB and gets a little faint
noise on each side, as `transcribe` reads a segment with context. A share of the sound files (whole files) and of
the utterances is held out, and the report says how many of those the head gets right.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import torch

from asr_transformer.config import FeatureConfig, from_dict
from asr_transformer.data.audio import load_utterance
from asr_transformer.data.features import fbank
from asr_transformer.data.manifest import read_manifest
from asr_transformer.data.sounds import rms, sound_files, sound_stretch
from asr_transformer.errors import UserError
from asr_transformer.model.asr import pooled
from asr_transformer.package import load_package, read_package, save_package, stored_tokenizer
from asr_transformer.threads import cpu_threads

FAINT = 10 ** (-60 / 20)  # the level of the faint noise around each window (dBFS)


@dataclass
class NoSpeechOptions:
    """How the head is trained: `windows` of each kind (speech, non-speech) to learn from; `held_out`: the share of
    sound files and utterances kept for the report; `sound_beside`: the share of speech windows with sound beside."""
    windows: int = 2000
    held_out: float = 0.2
    sound_beside: float = 0.3
    noise_share: float = 0.2  # of the non-speech windows, generated noise instead of recordings
    weight_decay: float = 1e-3
    seed: int = 0


def _noise(rng: random.Random, samples: int, kind: str) -> np.ndarray:
    """White or brown noise of RMS 1, (samples,)."""
    if samples <= 0:
        return np.zeros(0, np.float32)
    white = np.random.default_rng(rng.randrange(2 ** 32)).standard_normal(samples)
    noise = np.cumsum(white) if kind == "brown" else white
    noise = noise - noise.mean()
    return (noise / max(float(np.sqrt(np.mean(noise ** 2))), 1e-9)).astype(np.float32)


def _around(rng: random.Random, wave: np.ndarray, rate: int) -> np.ndarray:
    """The window with 0–0.3 s of faint white noise on each side."""
    before, after = (int(rng.uniform(0, 0.3) * rate) for _ in range(2))
    return np.concatenate([FAINT * _noise(rng, before, "white"), wave, FAINT * _noise(rng, after, "white")])


def speech_window(rng: random.Random, utt, clips: list[torch.Tensor], opts: NoSpeechOptions, rate: int) -> np.ndarray:
    """An utterance at a gain of −12 to +6 dB, with probability `sound_beside` 0.3–3 s of sound on one side."""
    wave = load_utterance(utt, rate) * 10 ** (rng.uniform(-12, 6) / 20)
    if clips and rng.random() < opts.sound_beside:
        level = max(rms(torch.from_numpy(wave)), 1e-4) * 10 ** (rng.uniform(-10, 5) / 20)
        generator = torch.Generator().manual_seed(rng.randrange(2 ** 62))
        sound = sound_stretch(clips, int(rng.uniform(0.3, 3.0) * rate), level, generator).numpy()
        wave = np.concatenate([sound, wave] if rng.random() < 0.5 else [wave, sound])
    return _around(rng, np.clip(wave, -1, 1).astype(np.float32), rate)


def sound_window(rng: random.Random, clips: list[torch.Tensor], level: float, seconds: float, opts: NoSpeechOptions,
                 rate: int) -> np.ndarray:
    """`seconds` × (0.8 to 1.25) of sound (or, with probability `noise_share`, white or brown noise) at `level` ×
    (−12 to +6 dB)."""
    samples = int(max(0.3, seconds * rng.uniform(0.8, 1.25)) * rate)
    level *= 10 ** (rng.uniform(-12, 6) / 20)
    if not clips or rng.random() < opts.noise_share:
        wave = level * _noise(rng, samples, rng.choice(["white", "brown"]))
    else:
        wave = sound_stretch(clips, samples, level, torch.Generator().manual_seed(rng.randrange(2 ** 62))).numpy()
    return _around(rng, np.clip(wave, -1, 1).astype(np.float32), rate)


def pooled_encodings(model, features: FeatureConfig, waves: list[np.ndarray], batch: int = 16) -> torch.Tensor:
    """Windows of samples → (N, D): each one's encoder output averaged over its frames (`model.asr.pooled`), the
    features computed as `features` says."""
    order = sorted(range(len(waves)), key=lambda i: len(waves[i]))  # similar lengths together: little padding
    out = torch.zeros(len(waves), model.cfg.d_model)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            feats = [fbank(torch.from_numpy(np.ascontiguousarray(waves[i], np.float32)), features) for i in rows]
            lens = torch.tensor([f.size(0) for f in feats], device=device)
            padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True).to(device)
            out[rows] = pooled(*model.encode(padded, lens)).float().cpu()
    return out


def fit_head(x: torch.Tensor, y: torch.Tensor, weight_decay: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Logistic regression: pooled encodings x (N, D), labels y (N,) (1: no speech) → the head's weight (1, D) and
    bias (1,), with both classes weighted equally and an L2 penalty on the standardised features' weights."""
    mean, std = x.mean(0), x.std(0).clamp(min=1e-6)
    z = (x - mean) / std
    w, b = torch.zeros(x.size(1), requires_grad=True), torch.zeros((), requires_grad=True)
    weights = torch.where(y > 0.5, 0.5 / y.sum().clamp(min=1), 0.5 / (1 - y).sum().clamp(min=1))
    optimizer = torch.optim.LBFGS([w, b], lr=1, max_iter=200, line_search_fn="strong_wolfe")

    def loss_fn():
        optimizer.zero_grad()
        loss = (torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y, reduction="none") * weights).sum()
        loss = loss + weight_decay * w.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(loss_fn)
    scale = w.detach() / std  # fold the standardisation into the layer: w·(x − mean)/std + b
    return scale.unsqueeze(0), (b.detach() - (scale * mean).sum()).reshape(1)


def _split(items: list, share: float, rng: random.Random) -> tuple[list, list]:
    """items → (kept, held out): a `share` of them, drawn, held out (at least one when there are two)."""
    items = list(items)
    rng.shuffle(items)
    held = min(len(items) - 1, max(1 if len(items) > 1 else 0, round(share * len(items))))
    return items[held:], items[:held]


def train_no_speech(package: str | os.PathLike, manifest: str | os.PathLike, sounds: str | os.PathLike,
                    opts: NoSpeechOptions = NoSpeechOptions(), threads: int = 0, log=print) -> dict:
    """Train the head of `package` → {"weight": (1, D), "bias": (1,), "report": what it got right}. Every sound file
    under `sounds` (any format soundfile reads) is non-speech; `manifest`'s utterances are speech."""
    torch.set_num_threads(cpu_threads(threads))
    rng = random.Random(opts.seed)
    model, _, cfg = load_package(package)
    rate = cfg.features.sample_rate
    clip_of = sound_files(sounds, rate, "--sounds")  # UserError for a missing or empty folder, an unreadable file
    utts = read_manifest(manifest)
    if len(clip_of) < 2 or len(utts) < 2:
        raise UserError(f"{'--sounds: ' + str(sounds) if len(clip_of) < 2 else '--speech: ' + str(manifest)} holds "
                        "one recording; the head needs two at least, to hold one out and report how well it does")
    train_files, held_files = _split(sorted(clip_of), opts.held_out, rng)
    train_utts, held_utts = _split(utts, opts.held_out, rng)
    level = float(np.median([rms(torch.from_numpy(load_utterance(u, rate))) for u in train_utts[:50]]))

    def windows(part_utts, part_files, count):
        part_clips = [clip_of[f] for f in part_files]
        speech = [speech_window(rng, rng.choice(part_utts), part_clips, opts, rate) for _ in range(count)]
        # as long as utterances are, so that a window's length does not tell speech from sound
        sound = [sound_window(rng, part_clips, level, rng.choice(part_utts).duration, opts, rate)
                 for _ in range(count)]
        return speech, sound

    held_count = max(1, round(opts.windows * opts.held_out))
    log(f"no-speech head: encoding {2 * (opts.windows + held_count)} windows ({len(train_utts)} utterances and "
        f"{len(train_files)} sound files to learn from, {len(held_utts)} and {len(held_files)} held out)")
    speech, sound = windows(train_utts, train_files, opts.windows)
    x = pooled_encodings(model, cfg.features, speech + sound)
    y = torch.cat([torch.zeros(len(speech)), torch.ones(len(sound))])
    weight, bias = fit_head(x, y, opts.weight_decay)
    held_speech, held_sound = windows(held_utts, held_files, held_count)
    report = {"speech_windows": len(speech), "sound_windows": len(sound), "sound_files": len(train_files),
              "learned": _rates(x, y, weight, bias)}
    held_x = pooled_encodings(model, cfg.features, held_speech + held_sound)
    held_y = torch.cat([torch.zeros(len(held_speech)), torch.ones(len(held_sound))])
    report["held_out"] = _rates(held_x, held_y, weight, bias)
    report["held_out_files"] = [str(f.relative_to(sounds)) for f in held_files]
    return {"weight": weight, "bias": bias, "report": report}


def _rates(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> dict:
    """The share of speech windows the head keeps and of non-speech ones it silences, at probabilities 0.5, 0.8."""
    p = torch.sigmoid(x @ weight.squeeze(0) + bias)
    out = {}
    for threshold in (0.5, 0.8):
        out[f"speech_kept_{threshold}"] = round(float((p[y < 0.5] <= threshold).float().mean()), 4)
        out[f"sound_silenced_{threshold}"] = round(float((p[y > 0.5] > threshold).float().mean()), 4)
    return out


def save_with_head(package: str | os.PathLike, out: str | os.PathLike, head: dict) -> None:
    """Copy `package` to `out` (may be the same file) with the head of `train_no_speech` (model.no_speech_head on,
    its report in the package's info under "no_speech")."""
    state = read_package(package)
    cfg = from_dict(state["config"], f"{package}:config")
    cfg.model.no_speech_head = True
    tokenizer = stored_tokenizer(state)
    weights = {**state["weights"], "no_speech.weight": head["weight"], "no_speech.bias": head["bias"]}
    info = {**(state.get("info") or {}), "no_speech": head["report"]}
    save_package(out, cfg, tokenizer, weights, info, state.get("lms"))
