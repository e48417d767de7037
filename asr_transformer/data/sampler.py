"""Training batches bounded by feature frames: `FrameBatchSampler` plans each epoch's batches of utterance indices,
``len(batch) × padded longest ≤ max_frames``, from length-sorted utterances (bucketing) shuffled from a seed, each
utterance counted at the length that epoch plays it (`draws.epoch_frames`).
"""

from __future__ import annotations

import random

import torch

from asr_transformer.data.draws import Margins, epoch_frames, perturbed_frames

# Padded batch shapes are rounded up to these multiples: far fewer distinct tensor shapes, so
# oneDNN (CPU convolutions, bf16 matmuls) reuses its compiled kernels instead of building new
# ones for nearly every batch. Padding is masked, so results do not change. (Frames: 8, not 32:
# on the synthetic corpus (1.8-s utterances) 32 gives batches 6 % more frames, and ~50 shapes are few.)
FRAME_MULTIPLE = 8
TOKEN_MULTIPLE = 8


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class FrameBatchSampler(torch.utils.data.Sampler):
    """Batches of indices with ``len(batch) × padded longest ≤ max_frames`` and ``len(batch) ≤ max_batch``
    (the longest utterance rounded up to FRAME_MULTIPLE, as `collate` pads it).

    Utterances are sorted by length with a random jitter (bucketing), cut into batches, and the
    batches shuffled; all from ``seed + epoch``. With speed perturbation (``factors``) each utterance
    counts with its length at the factor the dataset draws for it in that epoch (`speed_factor`), not at
    the slowest factor, so batches are not padded for speeds they do not get. With ``world > 1`` each
    rank takes every ``world``-th batch (the tail that cannot be shared evenly is dropped). ``start``
    skips batches already done in this epoch (resume).
    """

    readers = 1  # its batches do not depend on the loader's worker count (a shard sampler's do)

    def __init__(self, frames: list[int], max_frames: int, max_batch: int, seed: int = 0,
                 shuffle: bool = True, jitter: float = 0.1, rank: int = 0, world: int = 1,
                 factors=(1.0,), margins: Margins = Margins()):
        """frames: feature frames of each utterance at its own speed; factors: speed perturbation factors;
        margins: the silence and sounds added around utterances (`margin_frames`)."""
        check_fits(frames, max_frames, factors, margins)
        self.frames, self.max_frames, self.max_batch, self.factors = frames, max_frames, max_batch, tuple(factors)
        self.margins = margins
        self.seed, self.shuffle, self.jitter, self.rank, self.world = seed, shuffle, jitter, rank, world
        self.epoch, self.start = 0, 0
        self._planned: tuple[int, list[list[int]]] | None = None  # (epoch, its batches)

    def epoch_frames(self, epoch: int) -> list[int]:
        """Each utterance's frames in `epoch`, at its speed factor, with its silence and sound."""
        return epoch_frames(self.frames, self.factors, self.margins, self.seed, epoch)

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def batches(self, epoch: int) -> list[list[int]]:
        if self._planned is None or self._planned[0] != epoch:
            self._planned = epoch, self._plan(epoch)
        return self._planned[1]

    def _plan(self, epoch: int) -> list[list[int]]:
        frames = self.epoch_frames(epoch)
        rng = random.Random(self.seed * 100_003 + epoch)
        if self.shuffle:
            keys = [n * (1.0 + rng.uniform(-self.jitter, self.jitter)) for n in frames]
        else:
            keys = list(frames)
        order = sorted(range(len(frames)), key=lambda i: (keys[i], i))
        batches, current, longest = [], [], 0
        for i in order:
            longer = max(longest, frames[i])
            if current and not fits(len(current) + 1, longer, self.max_frames, self.max_batch):
                batches.append(current)
                current, longer = [], frames[i]
            current.append(i)
            longest = longer
        if current:
            batches.append(current)
        if self.shuffle:
            rng.shuffle(batches)
        if self.world > 1:
            usable = len(batches) - len(batches) % self.world
            batches = batches[self.rank:usable:self.world]
        return batches

    def __len__(self) -> int:
        return max(0, len(self.batches(self.epoch)) - self.start)

    def __iter__(self):
        for batch in self.batches(self.epoch)[self.start:]:
            yield [(i, self.epoch) for i in batch]


def check_fits(frames: list[int], max_frames: int, factors, margins: Margins) -> None:
    """ValueError unless each utterance of `frames` fits a batch of `max_frames` alone, at its slowest speed factor
    with the most silence and sound `margins` can add."""
    slowest = min(factors)
    too_long = sum(not fits(1, perturbed_frames(n, slowest) + margins.most(), max_frames, 1) for n in frames)
    if too_long:
        raise ValueError(f"{too_long} utterances are longer than data.max_frames={max_frames} "
                         f"frames{' at speed ' + str(slowest) if slowest != 1.0 else ''}"
                         f"{' with silence and sound around them' if margins.most() else ''}; "
                         f"raise data.max_frames or lower data.max_duration")


def fits(count: int, longest: int, max_frames: int, max_batch: int) -> bool:
    """Whether `count` utterances, the longest of `longest` frames, make a batch within `max_frames` (padded as
    `collate` pads) and `max_batch`."""
    return count <= max_batch and round_up(longest, FRAME_MULTIPLE) * count <= max_frames
