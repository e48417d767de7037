"""Corpus importers on small corpora written here in each corpus's layout, plus real data in ../shared/data."""

from __future__ import annotations

import os
import tarfile
from collections import Counter
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr_transformer.data.corpora import an4, commonvoice, folder, fsdd, kaldi, kathleen, librispeech
from asr_transformer.data.corpora.common import (
    CorpusError,
    download,
    extract,
    measure,
    read_lines,
    split_by_group,
    write_splits,
)
from asr_transformer.data.manifest import Utterance, read_manifest
from asr_transformer.fileio import read_json

SHARED_DATA = Path(os.environ.get("ASR_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def tone(path: Path, seconds: float, rate: int = 16000, **kwargs) -> float:
    """Write a short sine + noise file; return its exact duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.01 * np.random.default_rng(n).standard_normal(n)
    sf.write(str(path), x.astype(np.float32), rate, **kwargs)
    return n / rate


def text(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")


def corrupt(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not audio at all" * 10)


def manifests(out: Path, names=("train", "dev", "test")) -> dict[str, list[Utterance]]:
    return {name: read_manifest(out / f"{name}.jsonl") for name in names}


def all_utts(splits: dict[str, list[Utterance]]) -> list[Utterance]:
    return [u for utts in splits.values() for u in utts]


def speakers(utts: list[Utterance]) -> set[str]:
    return {u.speaker for u in utts}


def assert_disjoint(groups: dict[str, set]) -> None:
    names = list(groups)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not groups[a] & groups[b], f"{a} and {b} share {groups[a] & groups[b]}"


# --- common -----------------------------------------------------------------------------------


def test_measure_skips_and_counts(tmp_path):
    skipped = Counter()
    assert measure(tmp_path / "absent.wav", skipped) is None
    corrupt(tmp_path / "bad.wav")
    assert measure(tmp_path / "bad.wav", skipped) is None
    sf.write(str(tmp_path / "empty.wav"), np.zeros(0, np.float32), 16000)
    assert measure(tmp_path / "empty.wav", skipped) is None
    assert measure(tmp_path / "ok.flac", skipped) is None  # missing too
    d = tone(tmp_path / "ok.wav", 0.25)
    assert measure(tmp_path / "ok.wav", skipped) == pytest.approx(d)
    assert skipped == {"missing": 2, "unreadable": 1, "empty": 1}


def test_sphere_and_mp3_are_measured(tmp_path):
    d = tone(tmp_path / "a.sph", 0.5, format="NIST", subtype="PCM_16")
    assert measure(tmp_path / "a.sph", Counter()) == pytest.approx(d)
    tone(tmp_path / "a.mp3", 0.5, format="MP3")
    assert measure(tmp_path / "a.mp3", Counter()) == pytest.approx(0.5, abs=0.1)


def test_read_lines_names_line_of_bad_encoding(tmp_path):
    path = tmp_path / "text"
    path.write_bytes(b"a ok\nb ok\nc \xff\xfe bad\n")
    with pytest.raises(CorpusError, match=r"text:3: not UTF-8"):
        read_lines(path)


def test_split_by_group_is_deterministic_and_disjoint():
    utts = [Utterance(f"u{i}", "x.wav", 1.0, "t", f"s{i % 10}") for i in range(100)]
    a = split_by_group(utts, lambda u: u.speaker, 0.2, 0.1, seed=3)
    b = split_by_group(list(reversed(utts)), lambda u: u.speaker, 0.2, 0.1, seed=3)
    assert {k: speakers(v) for k, v in a.items()} == {k: speakers(v) for k, v in b.items()}
    assert [len(speakers(a[k])) for k in ("train", "dev", "test")] == [7, 2, 1]
    assert_disjoint({k: speakers(v) for k, v in a.items()})
    c = split_by_group(utts, lambda u: u.speaker, 0.2, 0.1, seed=4)
    assert {k: speakers(v) for k, v in a.items()} != {k: speakers(v) for k, v in c.items()}
    with pytest.raises(CorpusError, match="only 2 groups"):
        split_by_group(utts[:2], lambda u: u.speaker, 0.1, 0.1)


def test_write_splits_writes_manifests_and_summary(tmp_path):
    splits = {
        "train": [Utterance("b", "/b.wav", 1800.0, "x", "s1"), Utterance("a", "/a.wav", 1800.0, "y", "s2")],
        "dev": [Utterance("c", "/c.wav", 36.0, "z", "s3")],
    }
    summary = write_splits(tmp_path / "out", splits, {"unreadable": 2}, corpus="toy", source="/src")
    assert summary == read_json(tmp_path / "out" / "summary.json")
    assert summary["splits"]["train"]["utterances"] == 2
    assert summary["splits"]["train"]["hours"] == pytest.approx(1.0)
    assert summary["splits"]["train"]["speakers"] == 2
    assert summary["splits"]["dev"]["hours"] == pytest.approx(0.01)
    assert summary["skipped"] == {"unreadable": 2}
    assert [u.id for u in read_manifest(tmp_path / "out" / "train.jsonl")] == ["a", "b"]
    with pytest.raises(CorpusError, match="'a'"):
        write_splits(tmp_path / "out2", {"train": splits["train"] * 2})


def test_extract_tar_and_zip(tmp_path):
    text(tmp_path / "src" / "d" / "f.txt", "hello")
    with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as t:
        t.add(tmp_path / "src" / "d", arcname="d")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
        z.write(tmp_path / "src" / "d" / "f.txt", "e/f.txt")
    assert (extract(tmp_path / "a.tar.gz", tmp_path / "x") / "d" / "f.txt").read_text() == "hello"
    assert (extract(tmp_path / "a.zip", tmp_path / "x") / "e" / "f.txt").read_text() == "hello"
    (tmp_path / "x" / "e" / "f.txt").unlink()
    extract(tmp_path / "a.zip", tmp_path / "x")  # done once: a no-op
    assert not (tmp_path / "x" / "e" / "f.txt").exists()
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as z:
        z.writestr("../escape.txt", "x")
    with pytest.raises(CorpusError, match="outside"):
        extract(tmp_path / "evil.zip", tmp_path / "y")
    (tmp_path / "junk.tar.gz").write_bytes(b"junk")
    with pytest.raises(CorpusError, match="not a tar or zip"):
        extract(tmp_path / "junk.tar.gz", tmp_path / "z")


def test_download_is_atomic_and_explains_failures(tmp_path):
    text(tmp_path / "remote.bin", "payload")
    dest = download((tmp_path / "remote.bin").as_uri(), tmp_path / "dl" / "file.bin")
    assert dest.read_text() == "payload"
    with pytest.raises(CorpusError, match="--source"):
        download((tmp_path / "absent.bin").as_uri(), tmp_path / "dl" / "absent.bin")
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["file.bin"]  # no partial file left


# --- folder -----------------------------------------------------------------------------------


def make_folder_corpus(root: Path, n_speakers: int = 10) -> float:
    """spk0..spkN with two utterances each, one top-level file, plus problems; returns total seconds."""
    total = 0.0
    for s in range(n_speakers):
        for u in range(2):
            ext = ["wav", "flac", "ogg"][(s + u) % 3]
            total += tone(root / f"spk{s}" / f"utt{u}.{ext}", 0.2 + 0.01 * s)
            text(root / f"spk{s}" / f"utt{u}.txt", f"speaker {s} says {u}\n")
    total += tone(root / "top.wav", 0.3)
    text(root / "top.txt", "top level")
    total += tone(root / "deep" / "er" / "x.sph", 0.25, format="NIST", subtype="PCM_16")
    text(root / "deep" / "er" / "x.txt", "line one\nline two\n")
    tone(root / "spk0" / "orphan.wav", 0.2)  # no transcript
    corrupt(root / "spk1" / "broken.wav")
    text(root / "spk1" / "broken.txt", "never read")
    tone(root / "spk2" / "silent_text.wav", 0.2)
    text(root / "spk2" / "silent_text.txt", "  \n")
    return total


def test_folder_prepare(tmp_path):
    total = make_folder_corpus(tmp_path / "src")
    summary = folder.prepare(tmp_path / "src", tmp_path / "out", seed=1)
    splits = manifests(tmp_path / "out")
    utts = {u.id: u for u in all_utts(splits)}
    assert len(utts) == 22
    assert sum(u.duration for u in utts.values()) == pytest.approx(total)
    assert utts["spk3-utt1"].text == "speaker 3 says 1"
    assert utts["spk3-utt1"].speaker == "spk3"
    assert utts["top"].speaker == "unknown"
    assert utts["deep-er-x"].speaker == "deep/er"
    assert utts["deep-er-x"].text == "line one line two"
    assert utts["spk3-utt1"].audio == str((tmp_path / "src" / "spk3" / "utt1.flac").absolute())
    assert summary["skipped"] == {"empty_transcript": 1, "no_transcript": 1, "unreadable": 1}
    assert_disjoint({k: speakers(v) for k, v in splits.items()})
    assert all(splits[k] for k in ("train", "dev", "test"))
    assert sum(s["utterances"] for s in summary["splits"].values()) == 22
    again = folder.prepare(tmp_path / "src", tmp_path / "out2", seed=1)
    assert again["splits"] == {k: {**v, "manifest": v["manifest"].replace("out/", "out2/")} for k, v in summary["splits"].items()}


def test_folder_falls_back_to_text_split(tmp_path, capsys):
    for i in range(10):
        tone(tmp_path / "src" / "only" / f"{i}.wav", 0.1)
        text(tmp_path / "src" / "only" / f"{i}.txt", f"utt {i}")
    summary = folder.prepare(tmp_path / "src", tmp_path / "out")
    assert "splitting by text" in capsys.readouterr().err and summary["split_by"] == "text"
    splits = manifests(tmp_path / "out")
    assert [len(splits[k]) for k in ("train", "dev", "test")] == [8, 1, 1]
    by_text = folder.prepare(tmp_path / "src", tmp_path / "out2", split_by="text", dev_fraction=0.2, test_fraction=0.3)
    assert [by_text["splits"][k]["utterances"] for k in ("train", "dev", "test")] == [5, 2, 3]


def test_folder_skips_a_transcript_that_is_not_utf8(tmp_path, capsys):
    for i in range(4):
        tone(tmp_path / "src" / f"{i}.wav", 0.1)
        text(tmp_path / "src" / f"{i}.txt", f"utt {i}")
    (tmp_path / "src" / "2.txt").write_bytes("un café noir\n".encode("latin-1"))
    summary = folder.prepare(tmp_path / "src", tmp_path / "out", split_by="text", dev_fraction=0.34,
                             test_fraction=0.34)
    assert summary["skipped"] == {"not_utf8": 1}
    err = capsys.readouterr().err
    assert "skipped (not_utf8)" in err and f"{tmp_path / 'src' / '2.txt'}:1: not UTF-8" in err
    assert sorted(u.id for u in all_utts(manifests(tmp_path / "out"))) == ["0", "1", "3"]


def test_one_speaker_never_has_a_sentence_on_both_sides_of_a_split(tmp_path):
    """Repeated takes of a sentence (differing in case and punctuation) all land in one split."""
    for i in range(40):
        tone(tmp_path / "src" / f"take{i:02d}.wav", 0.1)
        sentence = f"sentence number {i % 8}"
        text(tmp_path / "src" / f"take{i:02d}.txt", sentence.upper() + "!" if i % 3 else sentence)
    summary = folder.prepare(tmp_path / "src", tmp_path / "out", dev_fraction=0.25, test_fraction=0.25)
    assert summary["split_by"] == "text"
    splits = manifests(tmp_path / "out")
    sentences = {k: {u.text.lower().rstrip("!") for u in v} for k, v in splits.items()}
    assert all(sentences.values()) and sum(len(v) for v in sentences.values()) == 8
    assert_disjoint(sentences)
    assert sum(len(v) for v in splits.values()) == 40


# --- kaldi ------------------------------------------------------------------------------------


def make_kaldi_dir(root: Path, n: int = 12) -> tuple[Path, float]:
    kdir = root / "data" / "all"
    wav, txt, u2s, total = [], [], [], 0.0
    for i in range(n):
        spk = f"s{i % 6}"
        uid = f"{spk}-u{i:02d}"
        total += tone(root / "wav" / f"{uid}.wav", 0.2 + 0.01 * i)
        wav.append(f"{uid} {root / 'wav' / (uid + '.wav')}")
        txt.append(f"{uid} words of utterance {i}")
        u2s.append(f"{uid} {spk}")
    for name, lines in (("wav.scp", wav), ("text", txt), ("utt2spk", u2s)):
        text(kdir / name, "\n".join(lines) + "\n")
    return kdir, total


def test_kaldi_prepare(tmp_path):
    kdir, total = make_kaldi_dir(tmp_path)
    summary = kaldi.prepare(kdir, tmp_path / "out", dev_fraction=0.2, test_fraction=0.2)
    splits = manifests(tmp_path / "out")
    utts = {u.id: u for u in all_utts(splits)}
    assert len(utts) == 12 and summary["skipped"] == {}
    assert sum(u.duration for u in utts.values()) == pytest.approx(total)
    assert utts["s1-u07"].text == "words of utterance 7" and utts["s1-u07"].speaker == "s1"
    assert utts["s1-u07"].offset is None
    assert_disjoint({k: speakers(v) for k, v in splits.items()})


def test_kaldi_errors_name_file_and_line(tmp_path):
    kdir, _ = make_kaldi_dir(tmp_path)
    lines = (kdir / "wav.scp").read_text().splitlines()
    lines[2] = "s2-u02 cat /x/y.wav |"  # a command that fails
    text(kdir / "wav.scp", "\n".join(lines) + "\n")
    with pytest.raises(CorpusError, match=r"wav\.scp:3: recording 's2-u02': the command failed .*stderr: .*/x/y\.wav"):
        kaldi.prepare(kdir, tmp_path / "out")

    kdir, _ = make_kaldi_dir(tmp_path / "b")
    text(kdir / "utt2spk", (kdir / "utt2spk").read_text() + "s0-u00 s0\n")
    with pytest.raises(CorpusError, match=r"utt2spk:13: duplicate id 's0-u00' \(first on line 1\)"):
        kaldi.prepare(kdir, tmp_path / "out")

    kdir, _ = make_kaldi_dir(tmp_path / "c")
    text(kdir / "segments", "s0-u00 s0-u00 0 0.1\ns1-u01 s1-u01 0.2\n")
    with pytest.raises(CorpusError, match=r"segments:2: expected 4 fields"):
        kaldi.prepare(kdir, tmp_path / "out")
    text(kdir / "segments", "s0-u00 s0-u00 0 0.1\ns1-u01 s1-u01 0.2 0.1\n")
    with pytest.raises(CorpusError, match=r"segments:2: need 0 <= start < end"):
        kaldi.prepare(kdir, tmp_path / "out")
    text(kdir / "segments", "s0-u00 nowhere 0 0.1\n")
    with pytest.raises(CorpusError, match=r"segments:1: recording 'nowhere'"):
        kaldi.prepare(kdir, tmp_path / "out")


def test_kaldi_skips_missing_audio_and_text(tmp_path):
    kdir, _ = make_kaldi_dir(tmp_path)
    (tmp_path / "wav" / "s3-u03.wav").unlink()
    corrupt(tmp_path / "wav" / "s4-u04.wav")
    lines = [line for line in (kdir / "text").read_text().splitlines() if not line.startswith("s5-u05")]
    text(kdir / "text", "\n".join("s0-u06" if line.startswith("s0-u06") else line for line in lines) + "\n")
    summary = kaldi.prepare(kdir, tmp_path / "out", split_by="file")
    assert summary["skipped"] == {"missing": 1, "unreadable": 1, "no_transcript": 1, "empty_transcript": 1}
    assert sum(s["utterances"] for s in summary["splits"].values()) == 8


def test_kaldi_round_trip(tmp_path):
    kdir, _ = make_kaldi_dir(tmp_path)
    kaldi.prepare(kdir, tmp_path / "out", dev_fraction=0.0, test_fraction=0.0)
    original = read_manifest(tmp_path / "out" / "train.jsonl")
    out = kaldi.export(tmp_path / "out" / "train.jsonl", tmp_path / "exported")
    assert sorted(p.name for p in out.iterdir()) == ["spk2utt", "text", "utt2spk", "wav.scp"]
    assert (out / "spk2utt").read_text().splitlines()[0] == "s0 s0-u00 s0-u06"
    kaldi.prepare(out, tmp_path / "again", dev_fraction=0.0, test_fraction=0.0)
    assert read_manifest(tmp_path / "again" / "train.jsonl") == original


def test_kaldi_round_trip_with_segments(tmp_path):
    long = tmp_path / "long recording.wav"
    total = tone(long, 2.0)
    whole = tmp_path / "whole.wav"
    tone(whole, 0.4)
    utts = [
        Utterance("a-1", str(long), 0.5, "first part", "a", 0.0),
        Utterance("a-2", str(long), 0.7, "second part", "a", 0.6),
        Utterance("b-1", str(long), 0.6, "last part", "b", 1.4),
        Utterance("c-1", str(whole), 0.4, "whole file", "c"),
    ]
    write_splits(tmp_path / "m", {"all": utts})
    out = kaldi.export(tmp_path / "m" / "all.jsonl", tmp_path / "k")
    assert (out / "segments").read_text().splitlines() == [
        "a-1 long_recording 0.000 0.500", "a-2 long_recording 0.600 1.300",
        "b-1 long_recording 1.400 2.000", "c-1 whole 0 -1",
    ]
    assert (out / "wav.scp").read_text().splitlines()[0] == f"long_recording {long}"
    kaldi.prepare(out, tmp_path / "again", dev_fraction=0.0, test_fraction=0.0)
    back = read_manifest(tmp_path / "again" / "train.jsonl")
    assert [(u.id, u.audio, u.text, u.speaker) for u in back] == [(u.id, u.audio, u.text, u.speaker) for u in utts]
    for b, u in zip(back, utts):
        assert b.duration == pytest.approx(u.duration, abs=1e-3)
        assert (b.offset is None) == (u.offset is None)
        assert (b.offset or 0.0) == pytest.approx(u.offset or 0.0, abs=1e-3)
    assert back[2].offset + back[2].duration == pytest.approx(total)


def test_kaldi_dev_and_test_dirs_are_used_as_given(tmp_path):
    train, _ = make_kaldi_dir(tmp_path / "tr", 6)
    dev, _ = make_kaldi_dir(tmp_path / "dv", 3)
    summary = kaldi.prepare(train, tmp_path / "out", dev_dir=dev, test_dir=dev)
    assert [summary["splits"][k]["utterances"] for k in ("train", "dev", "test")] == [6, 3, 3]
    summary = kaldi.prepare(train, tmp_path / "out2", test_dir=dev, dev_fraction=0.5)
    assert [summary["splits"][k]["utterances"] for k in ("train", "dev", "test")] == [3, 3, 3]


def test_kaldi_export_refuses_whitespace(tmp_path):
    write_splits(tmp_path / "m", {"all": [Utterance("a", "/a.wav", 1.0, "t", "two words")]})
    with pytest.raises(CorpusError, match="speaker 'two words'"):
        kaldi.export(tmp_path / "m" / "all.jsonl", tmp_path / "k")


# --- librispeech ------------------------------------------------------------------------------


def make_librispeech(root: Path, subsets: dict[str, list[str]]) -> float:
    total = 0.0
    for subset, spks in subsets.items():
        for spk in spks:
            chapter = "100"
            lines = []
            for u in range(3):
                uid = f"{spk}-{chapter}-{u:04d}"
                total += tone(root / "LibriSpeech" / subset / spk / chapter / f"{uid}.flac", 0.2)
                lines.append(f"{uid} WORDS OF {spk} NUMBER {u}")
            text(root / "LibriSpeech" / subset / spk / chapter / f"{spk}-{chapter}.trans.txt", "\n".join(lines) + "\n")
    return total


def test_librispeech_prepare(tmp_path):
    layout = {"train-clean-100": ["19", "26"], "dev-clean": ["84"], "test-clean": ["61"], "test-other": ["1688"]}
    total = make_librispeech(tmp_path / "src", layout)
    (tmp_path / "src" / "LibriSpeech" / "train-clean-100" / "26" / "100" / "26-100-0001.flac").unlink()
    summary = librispeech.prepare(tmp_path / "src", tmp_path / "out")
    names = ("train", "dev", "test", "train_clean_100", "dev_clean", "test_clean", "test_other")
    assert list(summary["splits"]) == list(names)
    splits = manifests(tmp_path / "out", names)
    assert [len(splits[n]) for n in names] == [5, 3, 6, 5, 3, 3, 3]
    assert summary["skipped"] == {"missing": 1}
    assert {u.id for u in splits["test"]} == {u.id for u in splits["test_clean"] + splits["test_other"]}
    u = next(u for u in splits["dev"] if u.id == "84-100-0002")
    assert (u.text, u.speaker) == ("WORDS OF 84 NUMBER 2", "84")
    assert sum(u.duration for u in splits["train"] + splits["dev"] + splits["test"]) == pytest.approx(total - 0.2)
    # the LibriSpeech folder itself is accepted too
    assert librispeech.prepare(tmp_path / "src" / "LibriSpeech", tmp_path / "out2")["skipped"] == {"missing": 1}


def test_librispeech_errors(tmp_path):
    make_librispeech(tmp_path / "src", {"dev-clean": ["84"]})
    with pytest.raises(CorpusError, match="train-clean-100.*not found"):
        librispeech.prepare(tmp_path / "src", tmp_path / "out")
    trans = tmp_path / "src" / "LibriSpeech" / "dev-clean" / "84" / "100" / "84-100.trans.txt"
    text(trans, trans.read_text() + "BROKEN LINE HERE\n")
    with pytest.raises(CorpusError, match=r"84-100\.trans\.txt:4: expected"):
        librispeech.prepare(tmp_path / "src", tmp_path / "out", train_subsets=["dev-clean"], dev_subsets=[], test_subsets=[])
    with pytest.raises(CorpusError, match="unknown LibriSpeech subset"):
        librispeech.download(["train-clean-1000"], tmp_path / "dl")


# --- common voice -----------------------------------------------------------------------------


def make_commonvoice(root: Path) -> float:
    total = 0.0
    header = "client_id\tpath\tsentence_id\tsentence\tup_votes\tdown_votes\tage"
    rows = {"train": [], "dev": [], "test": []}
    for i in range(9):
        split = ["train", "train", "train", "train", "train", "dev", "dev", "test", "test"][i]
        client = f"client{i % 3 if split == 'train' else i}"
        clip = f"common_voice_en_{i}.mp3"
        total += tone(root / "clips" / clip, 0.5, format="MP3")
        rows[split].append(f"{client}\t{clip}\tsid{i}\tSentence number {i}, with \"quotes\".\t2\t0\t")
    for split, lines in rows.items():
        text(root / f"{split}.tsv", "\n".join([header, *lines]) + "\n")
    text(root / "validated.tsv", "\n".join([header, *rows["train"], *rows["dev"], *rows["test"]]) + "\n")
    return total


def test_commonvoice_prepare(tmp_path):
    make_commonvoice(tmp_path / "en")
    corrupt(tmp_path / "en" / "clips" / "common_voice_en_4.mp3")
    summary = commonvoice.prepare(tmp_path / "en", tmp_path / "out")
    splits = manifests(tmp_path / "out")
    assert [len(splits[k]) for k in ("train", "dev", "test")] == [4, 2, 2]
    assert summary["skipped"] == {"unreadable": 1}
    u = next(u for u in splits["dev"] if u.id == "common_voice_en_5")
    assert (u.text, u.speaker) == ('Sentence number 5, with "quotes".', "client5")
    assert u.duration == pytest.approx(0.5, abs=0.1)
    assert_disjoint({k: speakers(v) for k, v in splits.items()})
    # validated.tsv as train: rows of dev/test clips and speakers are left out
    summary = commonvoice.prepare(tmp_path / "en", tmp_path / "out2", train_tsv="validated.tsv")
    assert summary["splits"]["train"]["utterances"] == 4


def test_commonvoice_errors(tmp_path):
    make_commonvoice(tmp_path / "en")
    text(tmp_path / "en" / "dev.tsv", (tmp_path / "en" / "dev.tsv").read_text() + "only\ttwo\n")
    with pytest.raises(CorpusError, match=r"dev\.tsv:4: expected 7 tab-separated fields, found 2"):
        commonvoice.prepare(tmp_path / "en", tmp_path / "out")
    text(tmp_path / "en" / "dev.tsv", "client_id\tfile\tsentence\n")
    with pytest.raises(CorpusError, match=r"dev\.tsv:1: header lacks column\(s\) path"):
        commonvoice.prepare(tmp_path / "en", tmp_path / "out")
    with pytest.raises(CorpusError, match="commonvoice.mozilla.org/datasets.*--source"):
        commonvoice.download(tmp_path)


# --- an4 --------------------------------------------------------------------------------------


def make_an4(root: Path, n_train_speakers: int = 10) -> float:
    an4_dir = root / "an4"
    total = 0.0
    for part, wav_dir, spks in (("train", "an4_clstk", [f"m{i:03d}" for i in range(n_train_speakers)]),
                                ("test", "an4test_clstk", ["fcaw", "mjgm"])):
        lines, fileids = [], []
        for spk in spks:
            for u in range(2):
                uid = f"an{u + 1}-{spk}-b"
                total += tone(an4_dir / "wav" / wav_dir / spk / f"{uid}.sph", 0.3, format="NIST", subtype="PCM_16")
                lines.append(f"<s> {'YES' if u else 'RUBOUT G M E'} </s> ({uid})")
                fileids.append(f"{wav_dir}/{spk}/{uid}")
        text(an4_dir / "etc" / f"an4_{part}.transcription", "\n".join(lines) + "\n")
        text(an4_dir / "etc" / f"an4_{part}.fileids", "\n".join(fileids) + "\n")
    return total


def test_an4_prepare(tmp_path):
    total = make_an4(tmp_path / "src")
    summary = an4.prepare(tmp_path / "src", tmp_path / "out", dev_fraction=0.2)
    splits = manifests(tmp_path / "out")
    assert [len(splits[k]) for k in ("train", "dev", "test")] == [16, 4, 4]
    assert summary["skipped"] == {}
    assert speakers(splits["test"]) == {"fcaw", "mjgm"}
    assert len(speakers(splits["dev"])) == 2
    assert_disjoint({k: speakers(v) for k, v in splits.items()})
    u = next(u for u in splits["test"] if u.id == "an1-fcaw-b")
    assert (u.text, u.speaker) == ("RUBOUT G M E", "fcaw")
    assert sum(u.duration for u in all_utts(splits)) == pytest.approx(total)
    # the an4 folder itself is accepted too
    assert an4.prepare(tmp_path / "src" / "an4", tmp_path / "out2", dev_fraction=0.2)["splits"] == {
        k: {**v, "manifest": v["manifest"].replace("out/", "out2/")} for k, v in summary["splits"].items()
    }


def test_an4_bad_line_and_skips(tmp_path):
    make_an4(tmp_path / "src")
    etc = tmp_path / "src" / "an4" / "etc"
    (tmp_path / "src" / "an4" / "wav" / "an4_clstk" / "m001" / "an1-m001-b.sph").unlink()
    corrupt(tmp_path / "src" / "an4" / "wav" / "an4_clstk" / "m002" / "an1-m002-b.sph")
    summary = an4.prepare(tmp_path / "src", tmp_path / "out")
    assert summary["skipped"] == {"missing": 1, "unreadable": 1}
    text(etc / "an4_test.transcription", (etc / "an4_test.transcription").read_text() + "<s> NO </s>\n")
    with pytest.raises(CorpusError, match=r"an4_test\.transcription:5: expected"):
        an4.prepare(tmp_path / "src", tmp_path / "out")


# --- fsdd -------------------------------------------------------------------------------------


def make_fsdd(root: Path, speakers_=("george", "jackson", "nicolas", "theo"), indices=range(12)) -> float:
    total = 0.0
    for spk in speakers_:
        for digit in (0, 7):
            for index in indices:
                total += tone(root / "recordings" / f"{digit}_{spk}_{index}.wav", 0.1, rate=8000)
    return total


def test_fsdd_prepare_by_speaker(tmp_path):
    total = make_fsdd(tmp_path / "fsdd")
    corrupt(tmp_path / "fsdd" / "recordings" / "3_george_0.wav")
    tone(tmp_path / "fsdd" / "recordings" / "stray.wav", 0.1)
    summary = fsdd.prepare(tmp_path / "fsdd", tmp_path / "out")
    splits = manifests(tmp_path / "out")
    assert speakers(splits["test"]) == {"theo"} and speakers(splits["dev"]) == {"jackson"}
    assert speakers(splits["train"]) == {"george", "nicolas"}
    assert summary["skipped"] == {"unreadable": 1, "bad_name": 1}
    u = next(u for u in splits["test"] if u.id == "7_theo_3")
    assert u.text == "seven" and u.duration == pytest.approx(0.1)
    assert sum(u.duration for u in all_utts(splits)) == pytest.approx(total)
    with pytest.raises(CorpusError, match="test_speaker 'yweweler'.*george, jackson"):
        fsdd.prepare(tmp_path / "fsdd", tmp_path / "out", test_speaker="yweweler")
    with pytest.raises(CorpusError, match="test_speaker '' has no recordings"):  # a dev speaker may be "", not a test one
        fsdd.prepare(tmp_path / "fsdd", tmp_path / "out", test_speaker="")


def test_fsdd_without_a_dev_speaker_validates_on_the_training_speakers_first_recordings(tmp_path):
    make_fsdd(tmp_path / "fsdd")
    fsdd.prepare(tmp_path / "fsdd", tmp_path / "out", dev_speaker="")
    splits = manifests(tmp_path / "out")
    assert speakers(splits["test"]) == {"theo"} and len(splits["test"]) == 24  # all of theo's recordings
    assert speakers(splits["train"]) == speakers(splits["dev"]) == {"george", "jackson", "nicolas"}
    index = {k: {int(u.id.split("_")[2]) for u in v} for k, v in splits.items() if k != "test"}
    assert index == {"dev": set(range(5)), "train": set(range(5, 12))}


def test_fsdd_prepare_by_index(tmp_path):
    make_fsdd(tmp_path / "fsdd")
    fsdd.prepare(tmp_path / "fsdd" / "recordings", tmp_path / "out", split="index")
    splits = manifests(tmp_path / "out")
    index = {k: {int(u.id.split("_")[2]) for u in v} for k, v in splits.items()}
    assert index == {"test": set(range(5)), "dev": set(range(5, 10)), "train": {10, 11}}


# --- kathleen ---------------------------------------------------------------------------------


def make_kathleen(root: Path, n_prompts: int = 30) -> float:
    total = 0.0
    for p in range(n_prompts):
        prompt = f"arctic_{'ab'[p % 2]}{p:04d}"
        for take in range(1 + p % 3):
            total += tone(root / "audio" / f"{prompt}_{1592748000 + take}.flac", 0.15)
            text(root / "audio" / f"{prompt}_{1592748000 + take}.txt", f"Prompt {p}, take {take}.\n")
    return total


def test_kathleen_prepare(tmp_path):
    total = make_kathleen(tmp_path / "kathleen")
    corrupt(tmp_path / "kathleen" / "audio" / "arctic_a0100_1.flac")
    text(tmp_path / "kathleen" / "audio" / "arctic_a0100_1.txt", "Broken.")
    summary = kathleen.prepare(tmp_path / "kathleen", tmp_path / "out")
    splits = manifests(tmp_path / "out")
    prompts = {k: {kathleen.prompt_of(u.id) for u in v} for k, v in splits.items()}
    assert [len(prompts[k]) for k in ("train", "dev", "test")] == [24, 3, 3]
    assert_disjoint(prompts)
    assert summary["skipped"] == {"unreadable": 1}
    assert sum(u.duration for u in all_utts(splits)) == pytest.approx(total)
    assert speakers(all_utts(splits)) == {"kathleen"}
    u = next(u for u in all_utts(splits) if u.id == "arctic_b0005_1592748001")
    assert u.text == "Prompt 5, take 1."
    again = kathleen.prepare(tmp_path / "kathleen" / "audio", tmp_path / "out2")
    assert {k: v["utterances"] for k, v in again["splits"].items()} == {k: v["utterances"] for k, v in summary["splits"].items()}


# --- real data in ../shared/data --------------------------------------------------------------


def shared(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"{path} not found (set ASR_SHARED_DATA to the folder holding {name}/)")
    return path


def test_real_kathleen(tmp_path):
    source = shared("kathleen")
    summary = kathleen.prepare(source, tmp_path / "out")
    splits = manifests(tmp_path / "out")
    utts = all_utts(splits)
    files = sorted((source / "audio").glob("*.flac"))
    assert len(utts) == len(files) == 1426 and summary["skipped"] == {}
    assert_disjoint({k: {kathleen.prompt_of(u.id) for u in v} for k, v in splits.items()})
    expected = sum(sf.info(str(f)).duration for f in files)
    assert sum(u.duration for u in utts) == pytest.approx(expected)
    assert expected / 60 == pytest.approx(72.4, abs=0.05)
    fractions = [summary["splits"][k]["utterances"] / len(utts) for k in ("train", "dev", "test")]
    assert fractions == pytest.approx([0.8, 0.1, 0.1], abs=0.03)


def test_real_fsdd(tmp_path):
    source = shared("fsdd")
    summary = fsdd.prepare(source, tmp_path / "out")
    splits = manifests(tmp_path / "out")
    assert len(all_utts(splits)) == 2500 and summary["skipped"] == {}
    assert speakers(splits["test"]) == {"theo"} and "theo" not in speakers(splits["train"])
    assert [summary["splits"][k]["utterances"] for k in ("train", "dev", "test")] == [1500, 500, 500]
    assert {u.text for u in splits["train"]} == set(fsdd.DIGITS)
