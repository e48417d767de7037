"""Lhotse interop: cut manifests written by Lhotse itself become manifests (`asr prepare lhotse`), and manifests
written as cuts (`asr combine --format lhotse`) load in Lhotse to the same audio and text."""

import gzip
import json

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.data.audio import load_utterance
from asr_transformer.data.lhotse_cuts import read_cuts
from asr_transformer.data.manifest import ManifestError, Utterance, read_manifest, write_manifest

lhotse = pytest.importorskip("lhotse", reason="Lhotse is in the dev extra: pip install -e '.[dev]'")


@pytest.fixture
def recordings(tmp_path):
    """Two mono 16-kHz files of 2.0 and 3.0 s."""
    paths = []
    for i, seconds in enumerate((2.0, 3.0)):
        t = np.arange(int(16000 * seconds)) / 16000
        path = tmp_path / f"rec{i}.flac"
        sf.write(path, (0.2 * np.sin(2 * np.pi * (220 + 40 * i) * t)).astype(np.float32), 16000)
        paths.append(path)
    return paths


def test_cuts_written_by_lhotse_prepare_as_manifests_of_the_same_audio(recordings, tmp_path):
    from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet

    recs = RecordingSet.from_recordings(Recording.from_file(p) for p in recordings)
    sups = SupervisionSet.from_segments([
        SupervisionSegment("s0", "rec0", 0.0, 2.0, text="HELLO WORLD", speaker="anna"),
        SupervisionSegment("s1", "rec1", 0.0, 3.0, text="GOOD MORNING", speaker="ben")])
    cuts = CutSet.from_manifests(recordings=recs, supervisions=sups)
    first, second = list(cuts)
    part = second.truncate(offset=0.5, duration=1.5)
    train = CutSet.from_cuts([first, part])
    train.to_file(tmp_path / "train_cuts.jsonl.gz")
    cuts.to_file(tmp_path / "dev_cuts.jsonl")

    result = CliRunner().invoke(app, ["prepare", "lhotse", "--train", str(tmp_path / "train_cuts.jsonl.gz"),
                                      "--dev", str(tmp_path / "dev_cuts.jsonl"), "--out", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    utts = {u.text: u for u in read_manifest(tmp_path / "data/train.jsonl")}
    whole, segment = utts["HELLO WORLD"], utts["GOOD MORNING"]
    assert whole.offset is None and whole.duration == 2.0 and whole.speaker == "anna"
    assert segment.offset == 0.5 and segment.duration == 1.5 and segment.speaker == "ben"
    for utt, cut in ((whole, first), (segment, part)):
        np.testing.assert_allclose(load_utterance(utt), cut.load_audio()[0], atol=1e-6)
    assert len(read_manifest(tmp_path / "data/dev.jsonl")) == 2


def test_manifests_written_as_cuts_load_in_lhotse(recordings, tmp_path):
    from lhotse import CutSet

    utts = [Utterance("a", str(recordings[0]), 2.0, "hello world", "anna"),
            Utterance("b", str(recordings[1]), 1.0, "good morning", offset=1.25)]
    write_manifest(tmp_path / "in.jsonl", utts)
    result = CliRunner().invoke(app, ["combine", str(tmp_path / "cuts.jsonl.gz"), str(tmp_path / "in.jsonl"),
                                      "--format", "lhotse"])
    assert result.exit_code == 0, result.output
    cuts = CutSet.from_file(tmp_path / "cuts.jsonl.gz").to_eager()
    for utt in utts:
        cut = cuts[utt.id]
        assert cut.supervisions[0].text == utt.text and cut.duration == utt.duration
        np.testing.assert_allclose(cut.load_audio()[0], load_utterance(utt), atol=1e-6)
    assert [u.to_json() for u in read_cuts(tmp_path / "cuts.jsonl.gz")] == [u.to_json() for u in utts]


def test_a_cut_that_cannot_be_an_utterance_is_named_by_line_and_field(recordings, tmp_path):
    cut = {"id": "c", "start": 0.0, "duration": 2.0, "channel": 0, "supervisions": [],
           "recording": {"id": "r", "sources": [{"type": "url", "channels": [0], "source": "https://x/y.flac"}],
                         "sampling_rate": 16000, "num_samples": 32000, "duration": 2.0}, "type": "MonoCut"}
    path = tmp_path / "cuts.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({**cut, "recording": {**cut["recording"], "sources": [
            {"type": "file", "channels": [0], "source": str(recordings[0])}]}}) + "\n")
        f.write(json.dumps({**cut, "id": "d"}) + "\n")
    with pytest.raises(ManifestError, match=r"cuts.jsonl.gz:2: field 'recording.sources'.*'url'"):
        read_cuts(path)
