"""Several training processes (torchrun): this one's rank, the world size, the process group, and the flags and
timings they must agree on."""

from __future__ import annotations

import os

import torch


class Distributed:
    """torchrun environment: rank, world size, and the process group when world > 1."""

    def __init__(self, device: torch.device):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group(self.backend)
        # stop flags go through gloo on the CPU: agreeing on them never waits for a GPU
        self.flags = torch.distributed.new_group(backend="gloo") if self.world > 1 and self.backend != "gloo" else None

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def from_main(self, *values: float) -> list[float]:
        """Rank 0's `values` on every rank, so that decisions taken from timings agree."""
        if self.world == 1:
            return list(values)
        device = torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")
        shared = torch.tensor(values, dtype=torch.float64, device=device)
        torch.distributed.broadcast(shared, src=0)
        return shared.tolist()

    def any(self, flag: bool) -> bool:
        """Whether `flag` is true on any rank (every rank gets the same answer)."""
        if self.world == 1:
            return flag
        shared = torch.tensor([int(flag)])
        torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX, group=self.flags)
        return bool(shared.item())

    def close(self) -> None:
        if self.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def layout(processes: int, readers: int) -> str:
    return f"{processes} process(es)" + (f" of {readers} shard readers (data.num_workers)" if readers > 1 else "")
