"""Training batches streamed from shards: each rank and each loader worker reads its own shards in sequence,
through a shuffle buffer, into duration buckets.

Every epoch the shards are shuffled (from the seed and the epoch) and dealt out to the *readers*: with
``world`` processes of ``workers`` DataLoader workers each (one when ``data.num_workers`` is 0), reader
``rank × workers + w`` gets every ``world × workers``-th shard. A reader streams its shards' utterances through a
shuffle buffer of ``data.shuffle_buffer`` utterances and puts each utterance that leaves it into one of
``data.buckets`` duration buckets (bounds at the training set's duration quantiles); a bucket gives a batch when
the next utterance would take it over ``data.max_frames`` (padding included) or ``data.max_batch``, as icefall's
dynamic bucketing does. A rank's batches are its workers' batches taken in turn (the order in which PyTorch's
DataLoader returns them), cut to the count of the rank with the fewest, so that every rank steps alike.

All of that is a function of the shard list's index (durations, no audio), the seed and the epoch: `plan` runs it
on the index alone, so every rank knows every batch ahead, and a run stopped at batch k of an epoch restarts
each reader at its own next batch: no shuffle-buffer state needs saving, and the resumed run is the same run.
What changes the batches is the reader count: resume with the same processes and workers (the trainer checks).
"""

from __future__ import annotations

import bisect
import random
import sys
from dataclasses import dataclass

import torch

from asr_transformer.data.draws import Margins, epoch_frames
from asr_transformer.data.loader import Unreadable, UtteranceDataset, collate
from asr_transformer.data.sampler import check_fits, fits
from asr_transformer.data.shards import Shard, ShardError, read_shard


@dataclass
class PlannedBatch:
    indices: list[int]  # utterances (indices into the training set)
    ready: int  # how many of its reader's stream items are read when it is complete


@dataclass
class ReaderWork:
    """What one DataLoader worker does: reader `reader`'s batches from its `first` to before its `end`."""

    reader: int
    first: int
    end: int


class ShardBatchSampler:
    """The batches of one rank, planned from the shards' index (the interface of `sampler.FrameBatchSampler`:
    `batches(epoch)`, `set_epoch(epoch, start)`); `work` tells each DataLoader worker what to read.

    shards: each shard's training-set utterance indices in member order (the ones filtering kept).
    """

    def __init__(self, shards: list[list[int]], frames: list[int], max_frames: int, max_batch: int, seed: int = 0,
                 buffer: int = 1000, buckets: int = 10, rank: int = 0, world: int = 1, workers: int = 0,
                 factors=(1.0,), margins: Margins = Margins()):
        check_fits(frames, max_frames, factors, margins)
        if buffer < 1 or buckets < 1:
            raise ValueError(f"data.shuffle_buffer and data.buckets must be at least 1, got {buffer} and {buckets}")
        self.shards, self.frames, self.max_frames, self.max_batch = shards, frames, max_frames, max_batch
        self.seed, self.buffer, self.rank, self.world, self.factors = seed, buffer, rank, world, tuple(factors)
        self.margins = margins
        self.readers = max(1, workers)  # per rank
        ordered = sorted(frames)
        self.bounds = [ordered[len(ordered) * k // buckets] for k in range(1, buckets)] if ordered else []
        self.epoch, self.start = 0, 0
        self._planned: tuple[int, tuple] | None = None

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of `epoch`, in the order training takes them."""
        readers, order = self._plan(epoch)
        return [readers[r][j].indices for r, j in order]

    def __len__(self) -> int:
        return max(0, len(self.batches(self.epoch)) - self.start)

    def reader_shards(self, epoch: int, reader: int, rank: int | None = None) -> list[int]:
        """The shards (indices into the list) reader `reader` of `rank` (this one) reads in `epoch`, in order."""
        order = list(range(len(self.shards)))
        random.Random(hash((self.seed, epoch, 7))).shuffle(order)
        rank = self.rank if rank is None else rank
        return order[rank * self.readers + reader::self.world * self.readers]

    def planned(self, epoch: int, reader: int) -> list[PlannedBatch]:
        return self._plan(epoch)[0][reader]

    def work(self, worker: int, workers: int) -> ReaderWork | None:
        """What DataLoader worker `worker` (of `workers`) reads for the current epoch from batch `start` on: the
        readers that still have batches, taken in turn from the one whose batch is next, one per worker (the
        DataLoader returns its workers' items in turn, so it returns them in the planned order)."""
        if max(1, workers) != self.readers:
            raise ValueError(f"batches planned for {self.readers} loader workers, read by {workers}")
        _, order = self._plan(self.epoch)
        done, end = [0] * self.readers, [0] * self.readers
        for n, (r, j) in enumerate(order):
            end[r] = j + 1
            if n < self.start:
                done[r] = j + 1
        if self.start >= len(order):
            return None
        first = order[self.start][0]
        turn = [r for r in range(first, first + self.readers) if done[r % self.readers] < end[r % self.readers]]
        if worker >= len(turn):
            return None
        reader = turn[worker] % self.readers
        return ReaderWork(reader, done[reader], end[reader])

    def _plan(self, epoch: int) -> tuple:
        """(each reader's planned batches, this rank's order as (reader, its batch) pairs)."""
        if self._planned is None or self._planned[0] != epoch:
            frames = epoch_frames(self.frames, self.factors, self.margins, self.seed, epoch)
            counts = []  # every rank's batch count, so that all cut to the same
            mine = None
            for rank in range(self.world):
                plans = [self._reader_plan(epoch, rank, r, frames) for r in range(self.readers)]
                order = _in_turn([len(p) for p in plans])
                counts.append(len(order))
                if rank == self.rank:
                    mine = plans, order
            plans, order = mine
            self._planned = epoch, (plans, order[:min(counts)])
        return self._planned[1]

    def _reader_plan(self, epoch: int, rank: int, reader: int, frames: list[int]) -> list[PlannedBatch]:
        """One reader's batches: its shards' utterances through the shuffle buffer into the duration buckets."""
        shard_ids = self.reader_shards(epoch, reader, rank)
        rng = random.Random(hash((self.seed, epoch, rank * self.readers + reader)))
        buckets: list[list[int]] = [[] for _ in range(len(self.bounds) + 1)]
        longest = [0] * len(buckets)
        batches: list[PlannedBatch] = []

        def place(i: int, read: int) -> None:
            b = bisect.bisect_right(self.bounds, self.frames[i])
            longer = max(longest[b], frames[i])
            if buckets[b] and not fits(len(buckets[b]) + 1, longer, self.max_frames, self.max_batch):
                batches.append(PlannedBatch(buckets[b], read))
                buckets[b], longer = [], frames[i]
            buckets[b].append(i)
            longest[b] = longer

        held, read = [], 0
        for s in shard_ids:
            for i in self.shards[s]:
                read += 1
                if len(held) < self.buffer:
                    held.append(i)
                    continue
                j = rng.randrange(self.buffer)
                held[j], leaving = i, held[j]
                place(leaving, read)
        rng.shuffle(held)
        for i in held:
            place(i, read)
        batches += [PlannedBatch(bucket, read) for bucket in buckets if bucket]
        return batches


def _in_turn(counts: list[int]) -> list[tuple[int, int]]:
    """(reader, batch) pairs taking each reader's next batch in turn, skipping readers that have none left."""
    return [(r, j) for j in range(max(counts, default=0)) for r, n in enumerate(counts) if j < n]


class ShardStream(torch.utils.data.IterableDataset):
    """The current epoch's batches (`Batch`, or a list of `Unreadable` when none of a batch's audio could be
    read) of one rank, each worker reading its own reader's shards; the order is the sampler's plan."""

    def __init__(self, dataset: UtteranceDataset, sampler: ShardBatchSampler, shards: list[Shard],
                 positions: list[tuple[int, int]]):
        """positions: each training-set utterance's (shard, member) in `shards`."""
        self.dataset, self.sampler, self.shards, self.positions = dataset, sampler, shards, positions

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        work = self.sampler.work(info.id if info else 0, info.num_workers if info else 0)
        if work is not None:
            yield from self._read(work)

    def _read(self, work: ReaderWork):
        epoch = self.sampler.epoch
        batches = self.sampler.planned(epoch, work.reader)[work.first:work.end]
        needed = {i for planned in batches for i in planned.indices}
        pending = iter(batches)
        batch = next(pending, None)
        held: dict[int, bytes] = {}
        failed: dict[int, str] = {}  # shards that could not be read (all or part): why
        read = 0  # this reader's stream items passed (utterances that filtering kept), as the plan counts them
        for s in self.sampler.reader_shards(epoch, work.reader):
            members = self.sampler.shards[s]
            if batch is None:
                return
            if needed.isdisjoint(members):  # nothing of it is still to come: not read at all
                read += len(members)
                continue
            shard = self.shards[s]
            place = {shard.keys[self.positions[i][1]]: (n, i) for n, i in enumerate(members)}
            wanted = {key for key, (_, i) in place.items() if i in needed}
            try:
                for key, data in read_shard(shard.location, wanted):
                    if key not in place:  # an utterance that filtering left out
                        continue
                    n, i = place[key]
                    if data is not None:
                        held[i] = data
                    while batch is not None and batch.ready <= read + n + 1:
                        yield self._batch(batch, held, failed, epoch)
                        batch = next(pending, None)
            except ShardError as e:  # a run of days does not stop for one shard: its utterances are left out
                failed[s] = str(e)
                print(f"warning: {e}; its utterances not read by then are left out of this epoch", file=sys.stderr,
                      flush=True)
            read += len(members)
        while batch is not None:
            yield self._batch(batch, held, failed, epoch)
            batch = next(pending, None)

    def _batch(self, batch: PlannedBatch, held: dict[int, bytes], failed: dict[int, str], epoch: int):
        items = []
        for i in batch.indices:
            data = held.pop(i, None)
            if data is None:
                shard, member = self.positions[i]
                why = failed.get(shard) or (f"{self.shards[shard].location}: member {self.shards[shard].keys[member]} "
                                            f"is not in the shard")
                items.append(Unreadable(self.dataset.utterances[i].id, why))
                continue
            items.append(self.dataset.item_from_bytes(i, epoch, data))
        return collate(items)


def shard_loader(shards: list[Shard], kept: list, dataset: UtteranceDataset, data, seed: int, rank: int, world: int,
                 factors, pin_memory: bool):
    """The sampler and loader of training from `shards`; `kept`: the utterances filtering kept (the dataset's),
    in the shards' order; `data`: the DataConfig. → (ShardBatchSampler, SkippingLoader)."""
    from asr_transformer.data.draws import utterance_frames
    from asr_transformer.data.loader import SkippingLoader, single_thread_worker

    where = {utt.id: (s, m) for s, shard in enumerate(shards) for m, utt in enumerate(shard.utterances)}
    positions = [where[utt.id] for utt in kept]
    members: list[list[int]] = [[] for _ in shards]
    for i, (s, _) in enumerate(positions):
        members[s].append(i)
    sampler = ShardBatchSampler(members, utterance_frames(kept, dataset.features), data.max_frames, data.max_batch,
                                seed=seed, buffer=data.shuffle_buffer, buckets=data.buckets, rank=rank, world=world,
                                workers=data.num_workers, factors=factors, margins=dataset.margins)
    readers = world * sampler.readers
    if len(shards) < readers and rank == 0:
        print(f"warning: {len(shards)} shards for {readers} readers (processes × data.num_workers): "
              f"{readers - len(shards)} of them idle; write more, smaller shards (`asr shard --per-shard`)",
              file=sys.stderr, flush=True)
    stream = ShardStream(dataset, sampler, shards, positions)
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=data.num_workers,
                                         worker_init_fn=single_thread_worker if data.num_workers else None,
                                         generator=torch.Generator(), pin_memory=pin_memory)
    return sampler, SkippingLoader(loader, placeholders=True)
