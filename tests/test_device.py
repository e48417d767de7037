"""Device names and CPU threads, resolved in one place (device.pick_device, threads.cpu_threads), and the
trainer's device setup as a CUDA machine runs it: CUDA is faked (no GPU needed), with torch 2.11's refusal of
an index-less device in `torch.cuda.set_device`."""

from __future__ import annotations

import pytest
import torch

from asr_transformer.device import DeviceError, pick_device
from asr_transformer.threads import ThreadsError, cpu_threads
from asr_transformer.train import setup, trainer


@pytest.fixture
def fake_cuda(monkeypatch):
    """Two CUDA devices that exist only for the device logic; → the devices `set_device` was given."""
    chosen = []

    def set_device(device):  # as torch 2.11 does: an index is required
        device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if device.index is None:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        chosen.append(device)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return chosen


@pytest.mark.parametrize("name", ["auto", "cuda", torch.device("cuda")])
def test_cuda_names_resolve_to_an_indexed_device(fake_cuda, name):
    assert pick_device(name) == torch.device("cuda", 0)


def test_explicit_index_and_local_rank(fake_cuda, monkeypatch):
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match="only 2 CUDA device"):
        pick_device("cuda:2")
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun's second process on this machine
    assert pick_device("auto") == torch.device("cuda", 1)
    monkeypatch.setenv("LOCAL_RANK", "5")
    with pytest.raises(DeviceError, match="LOCAL_RANK=5"):
        pick_device("cuda")


@pytest.mark.parametrize("name", ["auto", "cuda", "cuda:1"])
def test_trainer_setup_makes_the_indexed_device_current(fake_cuda, name):
    dev, dist = setup.place(name, threads=1)
    assert dev.type == "cuda" and dev.index is not None and fake_cuda == [dev]
    assert dist.world == 1 and dist.backend == "nccl"


def test_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto") == torch.device("cpu")
    with pytest.raises(DeviceError, match="CUDA is not available"):
        pick_device("cuda")


def test_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads(3) == 3
    assert cpu_threads(0) >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads(0) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # OpenMP's nested levels: the first is ours
    assert cpu_threads(0) == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "many")  # not a number: every core
    assert cpu_threads(0) >= 1
    with pytest.raises(ThreadsError, match="threads -1"):
        cpu_threads(-1)
    with pytest.raises(trainer.TrainError, match="threads -2"):
        setup.place("cpu", threads=-2)
