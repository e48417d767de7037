"""What each training utterance gets in an epoch, drawn from (seed, epoch, utterance) alone: its speed factor, its
vocal tract warp, the silence and non-speech sound around it; and the feature frames that makes, by which the
samplers plan their batches before the dataset plays it (`loader.UtteranceDataset`). Draws that depend on nothing
else come out the same whatever the worker count, and wherever a resumed run restarts.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import torch

from asr_transformer.config import AugmentConfig, FeatureConfig
from asr_transformer.data.features import num_frames
from asr_transformer.data.manifest import Utterance
from asr_transformer.data.sounds import MIN_SOUND_SECONDS


def speed_factor(factors, seed: int, epoch: int, index: int) -> float:
    """The speed perturbation factor of utterance `index` in `epoch`, drawn from `factors` by (seed, epoch,
    index) alone: the dataset plays the utterance at it, and the sampler batches it by the length it gives."""
    return pick(factors, seed, epoch, index)


def vtlp_warp(warps, seed: int, epoch: int, index: int) -> float:
    """The vocal tract warp of utterance `index` in `epoch`, drawn from `warps` by (seed, epoch, index) alone,
    apart from its speed factor."""
    return pick(warps, seed, epoch, index, 4)


class Margins(NamedTuple):
    """What the silence and sounds around utterances are drawn from (`margin_frames`), in feature frames."""
    silence_prob: float = 0.0  # augment.silence_prob
    silence: int = 0  # the most silence on each side (augment.silence_seconds)
    sound_prob: float = 0.0  # augment.sound_prob
    sound: tuple[int, int] = (0, 0)  # the least and most sound on the one side that gets it

    def most(self) -> int:
        """The most frames an utterance gets around it."""
        return 2 * self.silence + self.sound[1]


def silence_frames(margins: Margins, seed: int, epoch: int, index: int) -> tuple[int, int]:
    """The frames of silence utterance `index` gets before and after its audio in `epoch`: with chance
    margins.silence_prob, each uniform in 0…margins.silence frames, drawn by (seed, epoch, index) alone; the dataset
    adds them, and the sampler batches the utterance with them."""
    if margins.silence_prob <= 0 or margins.silence <= 0:
        return 0, 0
    draw = seeded_random(seed, epoch, index, 6)
    if draw.random() >= margins.silence_prob:
        return 0, 0
    return draw.randint(0, margins.silence), draw.randint(0, margins.silence)


def sound_frames(margins: Margins, seed: int, epoch: int, index: int) -> tuple[int, int]:
    """The frames of non-speech sound utterance `index` gets before and after its audio and silence in `epoch`:
    with chance margins.sound_prob, one side (drawn) gets margins.sound[0]…[1] frames, drawn by (seed, epoch, index)
    alone."""
    if margins.sound_prob <= 0:
        return 0, 0
    draw = seeded_random(seed, epoch, index, 7)
    if draw.random() >= margins.sound_prob:
        return 0, 0
    frames = draw.randint(*margins.sound)
    return (frames, 0) if draw.random() < 0.5 else (0, frames)


def margin_frames(augment: AugmentConfig | None, features: FeatureConfig) -> Margins:
    """augment's silence and sound settings in feature frames: what `silence_frames` and `sound_frames` draw
    from."""
    if augment is None:
        return Margins()
    per_second = 1000 / features.frame_shift_ms
    sound = (round(MIN_SOUND_SECONDS * per_second), round(augment.sound_seconds * per_second))
    silence = round(augment.silence_seconds * per_second) if augment.silence_prob > 0 else 0
    return Margins(augment.silence_prob, silence, augment.sound_prob, sound if augment.sound_prob > 0 else (0, 0))


def around_frames(margins: Margins, seed: int, epoch: int, index: int) -> tuple[int, int]:
    """The frames of silence and sound together that utterance `index` gets before and after its audio in
    `epoch`."""
    silence, sound = silence_frames(margins, seed, epoch, index), sound_frames(margins, seed, epoch, index)
    return silence[0] + sound[0], silence[1] + sound[1]


def played_frames(frames: int, factor: float, around: tuple[int, int]) -> int:
    """Feature frames of an utterance of `frames` frames played `factor`× faster with `around` frames before and
    after it."""
    return perturbed_frames(frames, factor) + sum(around)


def pick(values, *key: int):
    """One of `values`, drawn by the tuple of ints `key` alone (the only one when there is one)."""
    return values[0] if len(values) == 1 else values[seeded_random(*key).randrange(len(values))]


def seeded_random(*key: int) -> random.Random:
    """A Python generator seeded by a tuple of ints (hash() of ints, unlike of str, is the same in every process)."""
    return random.Random(hash(key))


def seeded_generator(*key: int) -> torch.Generator:
    """A torch generator seeded by a tuple of ints (hash() of ints is the same in every process)."""
    return torch.Generator().manual_seed(hash(key) & 0x7FFF_FFFF_FFFF)


def perturbed_frames(frames: int, factor: float) -> int:
    """Feature frames of an utterance of `frames` frames played `factor`× faster: never fewer than it gets
    (for factors ≥ 0.75), at most 3 more (the window's overhang and the resampler's rounding)."""
    return frames if factor == 1.0 else int(frames / factor) + 2


def epoch_frames(frames: list[int], factors, margins: Margins, seed: int, epoch: int) -> list[int]:
    """Each utterance's feature frames as `epoch` plays it: at its speed factor, with its silence and sound."""
    return [played_frames(n, speed_factor(factors, seed, epoch, i), around_frames(margins, seed, epoch, i))
            for i, n in enumerate(frames)]


def utterance_frames(utterances: list[Utterance], features: FeatureConfig) -> list[int]:
    """Feature frames of each utterance (before speed perturbation)."""
    return [num_frames(int(u.duration * features.sample_rate), features) for u in utterances]
