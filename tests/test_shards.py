"""Tar shards: writing and reading them (paths, URLs, pipes), the planned streaming batches, and training from
them: exact resume in one process and across ranks (torchrun, 2 processes, and 2 node ranks on this machine)."""

import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asr_transformer.checkpoint_io import load_checkpoint
from asr_transformer.config import FeatureConfig, load_config
from asr_transformer.data.audio import load_utterance
from asr_transformer.data.draws import utterance_frames
from asr_transformer.data.loader import UtteranceDataset
from asr_transformer.data.manifest import Utterance, read_manifest
from asr_transformer.data.sampler import FRAME_MULTIPLE, round_up
from asr_transformer.data.shard_loader import ShardBatchSampler, shard_loader
from asr_transformer.data.shards import (ShardError, is_shard_list, read_shard, read_shard_list, shard_utterances,
                                         write_shards)
from asr_transformer.data.tokenizer import load_tokenizer
from asr_transformer.train.trainer import TrainError, train

TINY = ["model.preset=tiny", "data.max_frames=800", "data.max_batch=8", "train.warmup_steps=5", "train.lr=2e-3",
        "data.shuffle_buffer=8", "data.buckets=3", "model.dropout=0.0"]


@pytest.fixture(scope="module")
def shards(tone_corpus, tmp_path_factory) -> Path:
    """The tone corpus's training set in shards of 5 utterances (8 shards), in manifest order."""
    return write_shards(read_manifest(tone_corpus / "train.jsonl"), tmp_path_factory.mktemp("shards"), per_shard=5)


def test_shards_hold_each_utterances_audio_file_as_stored_and_the_list_indexes_them(tone_corpus, shards):
    utts = read_manifest(tone_corpus / "train.jsonl")
    listed = read_shard_list(shards)
    assert is_shard_list(shards) and not is_shard_list(tone_corpus / "train.jsonl")
    assert [len(s.keys) for s in listed] == [5] * 8
    assert [u.id for u in shard_utterances(listed)] == [u.id for u in utts]
    with tarfile.open(listed[1].location) as tar:  # any tar reader: KEY.json, KEY.wav pairs
        names = tar.getnames()
        assert names[:2] == ["000000.json", "000000.wav"]
        record = json.load(tar.extractfile("000000.json"))
        assert record["id"] == utts[5].id and record["text"] == utts[5].text
    got = dict(read_shard(listed[1].location))
    assert got["000003"] == Path(utts[8].audio).read_bytes()


def test_a_segment_of_a_longer_file_is_stored_cut_out(tmp_path):
    rate = 8000
    wave = (0.3 * np.sin(np.arange(3 * rate) / 7.0)).astype(np.float32)
    sf.write(tmp_path / "long.wav", wave, rate)
    utt = Utterance("seg", str(tmp_path / "long.wav"), 1.0, "a b", offset=1.5)
    listed = read_shard_list(write_shards([utt], tmp_path / "out"))
    (key, data), = read_shard(listed[0].location)
    samples, got_rate = sf.read(__import__("io").BytesIO(data), dtype="float32")
    assert got_rate == rate and len(samples) == rate
    np.testing.assert_allclose(samples, load_utterance(utt, rate), atol=1e-6)


def test_a_missing_audio_file_is_named_and_no_shard_list_is_written(tmp_path):
    utts = [Utterance("gone", str(tmp_path / "gone.wav"), 1.0, "a")]
    with pytest.raises(ShardError, match="utterance 'gone': .*gone.wav: cannot read its audio"):
        write_shards(utts, tmp_path / "out")
    assert not (tmp_path / "out/shards.jsonl").exists()


def test_a_bad_shard_list_names_its_file_line_and_field(tmp_path):
    path = tmp_path / "shards.jsonl"
    header = '{"format": "asr-shards", "version": 1}\n'
    good = {"shard": "a.tar", "utterances": [{"key": "0", "id": "u1", "duration": 1.0, "text": "x"}]}
    cases = [("{not json\n", "line 2|:2: not valid JSON"),
             (json.dumps({"utterances": []}) + "\n", ":2: expected an object with a field 'shard'"),
             (json.dumps({**good, "utterances": [{"key": "0", "id": "u", "text": "x"}]}) + "\n",
              r":2: utterances\[0\]: field 'duration'"),
             (json.dumps(good) + "\n" + json.dumps({**good, "shard": "b.tar"}) + "\n", ":3: utterance id 'u1' is also on line 2")]
    for body, message in cases:
        path.write_text(header + body)
        with pytest.raises(ShardError, match=message.split("|")[-1]):
            read_shard_list(path)
    path.write_text('{"format": "asr-shards", "version": 9}\n')
    with pytest.raises(ShardError, match="newer than this toolkit"):
        read_shard_list(path)


@pytest.fixture
def http_folder(shards):
    """The shards' folder served over HTTP on a free localhost port; yields its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(shards.parent))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_shard_reads_the_same_from_a_path_an_http_url_and_a_pipe(shards, http_folder, tmp_path):
    local = read_shard_list(shards)
    lines = [json.loads(line) for line in shards.read_text().splitlines()]
    for name, make in (("url", lambda s: f"{http_folder}/{s}"), ("pipe", lambda s: f"pipe:cat {shards.parent / s}")):
        moved = [lines[0]] + [{**line, "shard": make(line["shard"])} for line in lines[1:]]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in moved))
        for a, b in zip(local, read_shard_list(path)):
            assert b.location == make(Path(a.location).name)
            assert list(read_shard(b.location)) == list(read_shard(a.location))
    with pytest.raises(ShardError, match="pipe:exit 3: the command exited with status 3"):
        list(read_shard("pipe:exit 3"))
    with pytest.raises(ShardError, match="missing.tar: cannot open the shard"):
        list(read_shard(str(tmp_path / "missing.tar")))
    with pytest.raises(ShardError, match="404"):
        list(read_shard(f"{http_folder}/missing.tar"))
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ShardError, match="junk.tar: not a readable tar shard"):
        list(read_shard(str(tmp_path / "junk.tar")))


def _sampler(tone_corpus, shards, **kwargs) -> ShardBatchSampler:
    listed = read_shard_list(shards)
    frames = utterance_frames(shard_utterances(listed), FeatureConfig())
    members, n = [], 0
    for shard in listed:
        members.append(list(range(n, n + len(shard.keys))))
        n += len(shard.keys)
    options = dict(max_frames=800, max_batch=8, seed=3, buffer=8, buckets=3)
    options.update(kwargs)
    return ShardBatchSampler(members, frames, **options)


def test_an_epoch_reads_every_utterance_once_in_batches_within_the_bounds(tone_corpus, shards):
    sampler = _sampler(tone_corpus, shards)
    batches = sampler.batches(0)
    assert sorted(i for b in batches for i in b) == list(range(40))
    for batch in batches:
        assert len(batch) <= 8 and len(batch) * round_up(max(sampler.frames[i] for i in batch), FRAME_MULTIPLE) <= 800
    assert batches != sampler.batches(1)  # shards, buffer and buckets are drawn afresh each epoch
    assert _sampler(tone_corpus, shards).batches(1) == sampler.batches(1)  # ... from the seed and the epoch alone


def test_ranks_and_workers_read_their_own_shards_and_every_rank_steps_alike(tone_corpus, shards):
    ranks = [_sampler(tone_corpus, shards, rank=r, world=2, workers=2) for r in range(2)]
    for epoch in range(3):
        per_rank = [s.batches(epoch) for s in ranks]
        assert len(per_rank[0]) == len(per_rank[1]) > 0
        read = [i for batches in per_rank for b in batches for i in b]
        assert len(read) == len(set(read))  # nobody reads an utterance twice; a rank's surplus batches are left out
        shard_sets = [set(s.reader_shards(epoch, w)) for s in ranks for w in range(2)]
        assert sum(map(len, shard_sets)) == 8 and len(set().union(*shard_sets)) == 8


def test_duration_buckets_batch_utterances_of_similar_length(tone_corpus, shards):
    def spread(sampler):
        ratios = [min(sampler.frames[i] for i in b) / max(sampler.frames[i] for i in b)
                  for e in range(4) for b in sampler.batches(e) if len(b) > 1]
        return sum(ratios) / len(ratios)

    assert spread(_sampler(tone_corpus, shards, buckets=4, buffer=40)) > spread(
        _sampler(tone_corpus, shards, buckets=1, buffer=40)) + 0.05


def _loader(tone_corpus, shards, workers: int, augment: bool = True):
    cfg = load_config(None, TINY + [f"data.num_workers={workers}"])
    listed = read_shard_list(shards)
    utts = shard_utterances(listed)
    tokenizer = load_tokenizer(tone_corpus / "tokenizer")
    dataset = UtteranceDataset(utts, [tokenizer.encode(u.text) for u in utts], tokenizer, cfg.features,
                               cfg.augment if augment else None, seed=cfg.train.seed)
    return shard_loader(listed, utts, dataset, cfg.data, cfg.train.seed, 0, 1, (1.0,), False)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_gives_the_planned_batches_in_order_from_any_batch(tone_corpus, shards, workers):
    sampler, loader = _loader(tone_corpus, shards, workers)
    ids = [u.id for u in shard_utterances(read_shard_list(shards))]
    for epoch, start in ((0, 0), (1, 3), (1, 4), (2, 5)):
        sampler.set_epoch(epoch, start)
        planned = [[ids[i] for i in batch] for batch in sampler.batches(epoch)[start:]]
        got = [batch.ids for batch in loader]
        assert got == planned, (epoch, start)


def test_a_batch_holds_the_features_of_its_utterances_audio(tone_corpus, shards):
    from asr_transformer.data.features import fbank

    _, loader = _loader(tone_corpus, shards, 0, augment=False)
    batch = next(iter(loader))
    by_id = {u.id: u for u in read_manifest(tone_corpus / "train.jsonl")}
    for n, utt_id in enumerate(batch.ids):
        expected = fbank(torch.from_numpy(load_utterance(by_id[utt_id], 16000)), FeatureConfig())
        assert batch.feat_lens[n] == len(expected)
        torch.testing.assert_close(batch.feats[n, :len(expected)], expected)


def test_a_shard_that_cannot_be_read_leaves_out_its_utterances_and_the_epoch_goes_on(tone_corpus, shards, tmp_path,
                                                                                     capsys):
    lines = shards.read_text().splitlines()
    broken = json.loads(lines[3])
    lines[3] = json.dumps({**broken, "shard": str(tmp_path / "gone.tar")})
    (tmp_path / "shards.jsonl").write_text("\n".join(lines).replace('"shard-', f'"{shards.parent}/shard-') + "\n")
    _, loader = _loader(tone_corpus, tmp_path / "shards.jsonl", 0)
    read = [utt_id for batch in loader for utt_id in batch.ids]
    lost = {u["id"] for u in broken["utterances"]}
    assert len(read) == 35 and not lost & set(read) and loader.skipped == 5
    assert "gone.tar: cannot open the shard" in capsys.readouterr().err


def _train(tone_corpus, shards, exp, overrides=(), **kwargs):
    cfg = load_config(None, TINY + list(overrides))
    return train(cfg, shards, tone_corpus / "dev.jsonl", tone_corpus / "tokenizer", exp, device="cpu", threads=1,
                 **kwargs)


def _weights(path):
    return load_checkpoint(path)["weights"]


def test_training_from_shards_resumes_mid_epoch_to_the_same_weights(tone_corpus, shards, tmp_path):
    args = ["train.max_epochs=2", "data.num_workers=2", "augment.speed_factors=[0.9,1.0,1.1]"]
    _train(tone_corpus, shards, tmp_path / "full", args)
    state = _train(tone_corpus, shards, tmp_path / "split", args, stop_after_batches=3)
    assert state.epoch == 0 and state.batch == 3
    with pytest.raises(TrainError, match="planned for 1 process\\(es\\) of 2 shard readers"):
        _train(tone_corpus, shards, tmp_path / "split", args[:1] + ["data.num_workers=0"] + args[2:])
    _train(tone_corpus, shards, tmp_path / "split", args)
    full, split = _weights(tmp_path / "full/checkpoints/last.pt"), _weights(tmp_path / "split/checkpoints/last.pt")
    for name in full:
        assert torch.equal(full[name], split[name]), name


def test_too_few_shards_for_the_readers_is_explained(tone_corpus, tmp_path, capsys):
    few = write_shards(read_manifest(tone_corpus / "train.jsonl")[:10], tmp_path / "few", per_shard=10)
    assert _train(tone_corpus, few, tmp_path / "exp", ["data.num_workers=2", "train.max_epochs=1"]).epoch == 1
    assert "1 shards for 2 readers (processes × data.num_workers): 1 of them idle" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ across ranks

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
RANKS_ARGS = ["train.max_epochs=2", "train.checkpoint_minutes=0"]


def _torchrun(launch: list[str], data: Path, shards: Path, exp: Path) -> list[str]:
    return ([TORCHRUN] + launch + ["-m", "asr_transformer", "train", "--data", str(data), "--exp", str(exp),
                                    "--train-manifest", str(shards), "--device", "cpu", "--threads", "1"]
            + [f"--set={o}" for o in TINY + RANKS_ARGS])


STARTED: list[subprocess.Popen] = []


def _start(cmd, log: Path):
    """Start `cmd` in its own session, its output into `log`."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    proc.log = log
    STARTED.append(proc)
    return proc


def _output(procs) -> str:
    return "\n".join(f"--- {p.log.name}:\n" + p.log.read_text()[-2500:] for p in procs)


@pytest.fixture
def no_strays():
    """Whatever happens, no torchrun agent or worker of the test outlives it (one would hold its ports)."""
    yield
    for proc in STARTED:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    STARTED.clear()


def _wait_for_step(exp: Path, step: int, procs, timeout: float = 240.0) -> dict:
    """The progress in EXP's last.pt once it reached `step` (the processes still running)."""
    last = exp / "checkpoints/last.pt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise AssertionError("a training process ended early:\n" + _output(procs))
        if last.exists():
            progress = load_checkpoint(last)["progress"]
            if progress["step"] >= step:
                return progress
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint at step {step} in {timeout} s")


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_killed_ranks_resume_to_the_weights_of_an_uninterrupted_run(tone_corpus, shards, tmp_path, no_strays):
    """Two processes (torchrun) trained from shards: SIGKILLed mid-run, or two node ranks (`--nnodes 2`, c10d
    rendezvous on localhost) of which one process is sent SIGTERM; each resumes to the uninterrupted run's weights."""
    one_node = ["--nproc_per_node=2", "--master_port=29531"]
    full = subprocess.run(_torchrun(one_node, tone_corpus, shards, tmp_path / "full"), capture_output=True, text=True,
                          timeout=400, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert full.returncode == 0, full.stderr[-3000:]
    reference = _weights(tmp_path / "full/checkpoints/last.pt")

    killed = _start(_torchrun(one_node, tone_corpus, shards, tmp_path / "killed"), tmp_path / "killed.log")
    _wait_for_step(tmp_path / "killed", 3, [killed])
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()

    nodes = [_torchrun(["--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29533",
                        "--rdzv_id=shards"], tone_corpus, shards, tmp_path / "nodes")] * 2
    agents = [_start(cmd, tmp_path / f"node{n}.log") for n, cmd in enumerate(nodes)]
    progress = _wait_for_step(tmp_path / "nodes", 2, agents)
    worker = _children(agents[1].pid)[0]  # one process of one node: the other rank must stop with it
    os.kill(worker, signal.SIGTERM)
    assert [agent.wait(timeout=120) for agent in agents] == [0, 0], _output(agents)
    stopped = load_checkpoint(tmp_path / "nodes/checkpoints/last.pt")["progress"]
    assert stopped["step"] >= progress["step"] and (stopped["epoch"], stopped["batch"]) != (2, 0)

    for launch, exp in ((one_node, "killed"), (None, "nodes")):
        if launch:
            result = subprocess.run(_torchrun(launch, tone_corpus, shards, tmp_path / exp), capture_output=True,
                                    text=True, timeout=400, env={**os.environ, "OMP_NUM_THREADS": "1"})
            assert result.returncode == 0, result.stderr[-3000:]
        else:
            agents = [_start(cmd, tmp_path / f"resume{n}.log") for n, cmd in enumerate(nodes)]
            assert [agent.wait(timeout=400) for agent in agents] == [0, 0], _output(agents)
        resumed = _weights(tmp_path / exp / "checkpoints/last.pt")
        for name in reference:
            torch.testing.assert_close(resumed[name], reference[name], atol=1e-6, rtol=1e-5, msg=f"{exp}: {name}")
