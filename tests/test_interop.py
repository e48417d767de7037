"""Interop with Kaldi, NeMo and sclite: wav.scp commands, Kaldi dirs Kaldi can read, NeMo manifests, scoring of
plain REF/HYP files. Audio is generated here; the only programs run are the shell, cat and this Python."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.data.corpora import kaldi
from asr_transformer.data.corpora.common import CorpusError
from asr_transformer.data.manifest import ManifestError, Utterance, read_manifest, write_manifest
from asr_transformer.scoring import ScoringError, read_transcripts, score_dir, score_files

PYTHON = shlex.quote(sys.executable)


def tone(path: Path, seconds: float, rate: int = 16000, **kwargs) -> np.ndarray:
    """Write a sine + noise file; return the samples as 16-bit integers (what a 16-bit file holds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * 330 * t) + 0.01 * np.random.default_rng(len(t)).standard_normal(len(t))
    sf.write(str(path), x.astype(np.float32), rate, **kwargs)
    return sf.read(str(path), dtype="int16")[0]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def cli(*args) -> tuple[int, str]:
    run = CliRunner().invoke(app, [str(a) for a in args])
    return run.exit_code, run.output


# --- asr prepare kaldi: wav.scp commands ------------------------------------------------------


def test_wav_scp_commands_run_once_and_their_audio_is_kept_as_flac(tmp_path):
    long = tone(tmp_path / "long.wav", 2.0)
    tone(tmp_path / "short.wav", 0.5, rate=8000)
    runs = tmp_path / "runs.log"
    generated = (f"{PYTHON} -c 'import io, sys, numpy, soundfile; b = io.BytesIO(); "
                 f"soundfile.write(b, numpy.full(4000, 0.25, numpy.float32), 8000, format=\"WAV\"); "
                 f"sys.stdout.buffer.write(b.getvalue())'")
    kdir = tmp_path / "data"
    write_lines(kdir / "wav.scp", [
        f"rec1 echo rec1 >> {runs}; cat {tmp_path / 'long.wav'} |",  # used by two segments
        f"rec2 {tmp_path / 'short.wav'}",
        f"rec3 {generated} |",
        f"unused echo unused >> {runs}; cat {tmp_path / 'long.wav'} |",  # no segment uses it
    ])
    write_lines(kdir / "segments", ["a-1 rec1 0 0.5", "a-2 rec1 0.75 2.0", "b-1 rec2 0 -1", "c-1 rec3 0.1 -1"])
    write_lines(kdir / "text", ["a-1 first part", "a-2 second part", "b-1 short file", "c-1 generated"])
    write_lines(kdir / "utt2spk", ["a-1 a", "a-2 a", "b-1 b", "c-1 c"])

    code, output = cli("prepare", "kaldi", kdir, "--out", tmp_path / "out", "--dev-fraction", 0, "--test-fraction", 0)
    assert code == 0, output
    assert runs.read_text().split() == ["rec1"]  # once for both segments; never for a recording no segment uses
    utts = {u.id: u for u in read_manifest(tmp_path / "out" / "train.jsonl")}
    flac = str(tmp_path / "out" / "audio" / "rec1.flac")
    assert (utts["a-1"].audio, utts["a-1"].offset, utts["a-1"].duration) == (flac, 0.0, 0.5)
    assert (utts["a-2"].audio, utts["a-2"].offset, utts["a-2"].duration) == (flac, 0.75, pytest.approx(1.25))
    assert (utts["b-1"].audio, utts["b-1"].offset, utts["b-1"].duration) == (str(tmp_path / "short.wav"), None, 0.5)
    assert utts["c-1"].audio == str(tmp_path / "out" / "audio" / "rec3.flac")
    assert utts["c-1"].duration == pytest.approx(0.5 - 0.1)
    samples, rate = sf.read(flac, dtype="int16")
    assert rate == 16000 and sf.info(flac).format == "FLAC" and np.array_equal(samples, long)  # lossless
    assert sf.read(utts["c-1"].audio, dtype="float32")[1] == 8000


def test_a_wav_written_to_a_pipe_without_its_length_is_read_to_the_end(tmp_path):
    """Programs writing WAV to a pipe cannot seek back to fill in the data size and leave it 0 (Kaldi's stream mode)."""
    kdir = tmp_path / "data"
    streamed = (f"{PYTHON} -c 'import struct, sys; fmt = struct.pack(\"<IHHIIHH\", 16, 1, 1, 8000, 16000, 2, 16); "
                f"sys.stdout.buffer.write(b\"RIFF\" + bytes(4) + b\"WAVEfmt \" + fmt + b\"data\" + bytes(4) "
                f"+ struct.pack(\"<1600h\", *range(1600)))'")
    write_lines(kdir / "wav.scp", [f"r {streamed} |"])
    write_lines(kdir / "text", ["r some words"])
    kaldi.prepare(kdir, tmp_path / "out", dev_fraction=0.0, test_fraction=0.0)
    (utt,) = read_manifest(tmp_path / "out" / "train.jsonl")
    assert utt.duration == pytest.approx(0.2)
    assert np.array_equal(sf.read(utt.audio, dtype="int16")[0], np.arange(1600))


@pytest.mark.parametrize("subtype,depth,tolerance", [("PCM_16", "PCM_16", 0.0), ("PCM_24", "PCM_24", 0.0),
                                                      ("FLOAT", "PCM_24", 2.0 ** -23)])
def test_a_command_s_audio_keeps_its_samples(tmp_path, subtype, depth, tolerance):
    tone(tmp_path / "a.wav", 0.4, subtype=subtype)
    kdir = tmp_path / "data"
    write_lines(kdir / "wav.scp", [f"r cat {tmp_path / 'a.wav'} |"])
    write_lines(kdir / "text", ["r words"])
    kaldi.prepare(kdir, tmp_path / "out", dev_fraction=0.0, test_fraction=0.0)
    flac = tmp_path / "out" / "audio" / "r.flac"
    assert sf.info(str(flac)).subtype == depth
    original, kept = sf.read(str(tmp_path / "a.wav"))[0], sf.read(str(flac))[0]
    assert np.abs(original).max() > 0.25 and np.abs(kept - original).max() <= tolerance


@pytest.mark.parametrize("command,message", [
    (f"{PYTHON} -c 'import sys; sys.stderr.write(\"cannot open x.sph\\n\"); sys.exit(3)'",
     r"failed \(exit status 3\); stderr: cannot open x\.sph$"),
    ("true", r"wrote no audio to stdout; no message on stderr$"),
    ("echo not audio", r"wrote 10 bytes to stdout that are not a WAV file"),
])
def test_a_failing_command_is_one_error_naming_wav_scp_and_line(tmp_path, command, message):
    tone(tmp_path / "a.wav", 0.3)
    kdir = tmp_path / "data"
    write_lines(kdir / "wav.scp", [f"ok cat {tmp_path / 'a.wav'} |", f"bad {command} |"])
    write_lines(kdir / "text", ["ok fine", "bad words"])
    with pytest.raises(CorpusError, match=r"wav\.scp:2: recording 'bad': .*" + message):
        kaldi.prepare(kdir, tmp_path / "out")
    code, output = cli("prepare", "kaldi", kdir, "--out", tmp_path / "out", "--jobs", 1)
    assert code == 1 and "Traceback" not in output
    assert output.strip().startswith(f"error: {kdir / 'wav.scp'}:2: recording 'bad'") and len(output.strip().splitlines()) == 1


def test_a_dir_given_for_dev_and_test_runs_its_commands_once(tmp_path):
    tone(tmp_path / "a.wav", 0.3)
    runs = tmp_path / "runs.log"
    dirs = {}
    for name in ("train", "dev"):
        dirs[name] = tmp_path / name
        write_lines(dirs[name] / "wav.scp", [f"{name}-r echo {name} >> {runs}; cat {tmp_path / 'a.wav'} |"])
        write_lines(dirs[name] / "text", [f"{name}-r words"])
    summary = kaldi.prepare(dirs["train"], tmp_path / "out", dev_dir=dirs["dev"], test_dir=dirs["dev"])
    assert sorted(runs.read_text().split()) == ["dev", "train"]
    assert [summary["splits"][k]["utterances"] for k in ("train", "dev", "test")] == [1, 1, 1]
    assert read_manifest(tmp_path / "out" / "dev.jsonl")[0].audio == str(tmp_path / "out" / "audio" / "dev" / "dev-r.flac")


# --- asr export-kaldi: a dir Kaldi reads ------------------------------------------------------


def fake_flac(bin_dir: Path) -> None:
    """A `flac` on PATH that does what `flac -c -d -s FILE` does: the FILE as WAV on stdout."""
    bin_dir.mkdir()
    script = bin_dir / "flac"
    script.write_text(f"#!{sys.executable}\nimport io, sys, soundfile\n"
                      "data, rate = soundfile.read(sys.argv[-1], dtype='int16')\n"
                      "out = io.BytesIO(); soundfile.write(out, data, rate, format='WAV', subtype='PCM_16')\n"
                      "sys.stdout.buffer.write(out.getvalue())\n")
    script.chmod(0o755)


def test_export_lists_only_16_bit_wav_by_path_and_converts_the_rest(tmp_path):
    audio = {
        "pcm16": tmp_path / "pcm16.wav",
        "float": tmp_path / "float.wav",
        "flac16": tmp_path / "with space.flac",
        "flac24": tmp_path / "deep.flac",
        "ogg": tmp_path / "vorbis.ogg",
    }
    tone(audio["pcm16"], 0.2)
    tone(audio["float"], 0.2, subtype="FLOAT")
    tone(audio["flac16"], 0.2)
    tone(audio["flac24"], 0.2, subtype="PCM_24")
    tone(audio["ogg"], 0.2)
    utts = [Utterance(name, str(path), 0.2, "words", "s") for name, path in audio.items()]
    utts.append(Utterance("elsewhere", "/not/here/remote.flac", 1.0, "words", "s"))  # judged by its extension
    write_manifest(tmp_path / "m.jsonl", utts)
    code, output = cli("export-kaldi", tmp_path / "m.jsonl", tmp_path / "k")
    assert code == 0, output
    wav_scp = dict(line.split(" ", 1) for line in (tmp_path / "k" / "wav.scp").read_text().splitlines())
    assert wav_scp == {
        "pcm16": str(audio["pcm16"]),
        "float": f"sox {audio['float']} -t wav -b 16 - |",
        "flac16": f"flac -c -d -s '{audio['flac16']}' |",
        "flac24": f"sox {audio['flac24']} -t wav -b 16 - |",
        "ogg": f"sox {audio['ogg']} -t wav -b 16 - |",
        "elsewhere": "flac -c -d -s /not/here/remote.flac |",
    }
    assert not (tmp_path / "k" / "segments").exists()


def test_export_of_segments_writes_segments_and_comes_back_through_the_flac_command(tmp_path, monkeypatch):
    long = tone(tmp_path / "talk.flac", 3.0)
    utts = [
        Utterance("s-1", str(tmp_path / "talk.flac"), 1.0, "first words", "s", 0.0),
        Utterance("s-2", str(tmp_path / "talk.flac"), 1.5, "second words", "s", 1.25),
    ]
    write_manifest(tmp_path / "m.jsonl", utts)
    code, output = cli("export-kaldi", tmp_path / "m.jsonl", tmp_path / "k")
    assert code == 0, output
    assert (tmp_path / "k" / "wav.scp").read_text() == f"talk flac -c -d -s {tmp_path / 'talk.flac'} |\n"
    assert (tmp_path / "k" / "segments").read_text().splitlines() == ["s-1 talk 0.000 1.000", "s-2 talk 1.250 2.750"]

    fake_flac(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    kaldi.prepare(tmp_path / "k", tmp_path / "again", dev_fraction=0.0, test_fraction=0.0)
    back = read_manifest(tmp_path / "again" / "train.jsonl")
    assert [(u.id, u.text, u.speaker, u.offset, u.duration) for u in back] == [
        (u.id, u.text, u.speaker, u.offset, u.duration) for u in utts]
    assert np.array_equal(sf.read(back[0].audio, dtype="int16")[0], long)


# --- NeMo manifests ---------------------------------------------------------------------------


def test_toolkit_to_nemo_and_back_gives_the_same_rows(tmp_path):
    utts = [
        Utterance("spk1-a", "/data/a.wav", 1.5, "hello world", "spk1"),
        Utterance("spk1-b", "/data/long.flac", 2.25, "a segment", "spk1", offset=3.5),
        Utterance("c", "/data/c.wav", 0.75, "no speaker"),
    ]
    write_manifest(tmp_path / "in.jsonl", utts)
    code, output = cli("combine", tmp_path / "out.json", tmp_path / "in.jsonl", "--format", "nemo")
    assert code == 0, output
    lines = [json.loads(line) for line in (tmp_path / "out.json").read_text().splitlines()]
    assert lines == [  # no header: every line a NeMo record
        {"audio_filepath": "/data/a.wav", "duration": 1.5, "text": "hello world", "speaker": "spk1", "id": "spk1-a"},
        {"audio_filepath": "/data/long.flac", "duration": 2.25, "text": "a segment", "offset": 3.5, "speaker": "spk1",
         "id": "spk1-b"},
        {"audio_filepath": "/data/c.wav", "duration": 0.75, "text": "no speaker", "id": "c"},
    ]
    assert read_manifest(tmp_path / "out.json") == utts
    code, output = cli("combine", tmp_path / "back.jsonl", tmp_path / "out.json")
    assert code == 0, output
    assert read_manifest(tmp_path / "back.jsonl") == utts
    assert json.loads((tmp_path / "back.jsonl").read_text().splitlines()[0])["format"] == "asr-manifest"


def test_nemo_lines_without_ids_get_unique_ids_from_their_files(tmp_path):
    (tmp_path / "wavs").mkdir()
    (tmp_path / "wavs" / "talk.wav").touch()
    write_lines(tmp_path / "nemo.json", [json.dumps(r) for r in [
        {"audio_filepath": "wavs/talk.wav", "duration": 2.0, "text": "whole"},
        {"audio_filepath": "wavs/talk.wav", "duration": 0.5, "text": "part", "offset": 12.5, "speaker": 7},
        {"audio_filepath": "/elsewhere/talk.wav", "duration": 1.0, "text": "other file", "spk": "s2"},
        {"audio_filepath": "missing/x y.wav", "duration": 1.0, "text": "as written", "offset": None},
    ]])
    utts = read_manifest(tmp_path / "nemo.json")
    assert [(u.id, u.audio, u.offset, u.speaker) for u in utts] == [
        ("talk", str(tmp_path / "wavs" / "talk.wav"), None, "unknown"),  # relative to the manifest's folder
        ("talk-0012500", str(tmp_path / "wavs" / "talk.wav"), 12.5, "7"),
        ("talk-2", "/elsewhere/talk.wav", None, "s2"),
        ("x_y", "missing/x y.wav", None, "unknown"),  # not beside the manifest: as written
    ]


@pytest.mark.parametrize("record,field", [
    ({"audio_filepath": "a.wav", "duration": 1.0}, "text"),
    ({"audio_filepath": "a.wav", "text": "t"}, "duration"),
    ({"audio_filepath": "", "duration": 1.0, "text": "t"}, "audio_filepath"),
    ({"audio_filepath": "a.wav", "duration": 1.0, "text": "t", "speaker": [1]}, "speaker"),
    ({"audio_filepath": "a.wav", "duration": 1.0, "text": "t", "offset": -1}, "offset"),
])
def test_a_bad_nemo_line_names_file_line_and_field(tmp_path, record, field):
    good = {"audio_filepath": "b.wav", "duration": 1.0, "text": "fine"}
    write_lines(tmp_path / "nemo.json", [json.dumps(good), json.dumps(record)])
    with pytest.raises(ManifestError, match=rf"nemo\.json:2: .*'{field}'"):
        read_manifest(tmp_path / "nemo.json")


def test_combine_refuses_an_unknown_format(tmp_path):
    write_manifest(tmp_path / "in.jsonl", [Utterance("a", "/a.wav", 1.0, "t")])
    code, output = cli("combine", tmp_path / "out.json", tmp_path / "in.jsonl", "--format", "csv")
    assert code == 1 and output.strip() == "error: --format csv: choose from jsonl, nemo, lhotse"
    assert not (tmp_path / "out.json").exists()


# --- asr score REF HYP ------------------------------------------------------------------------


SCORED = [  # (id, reference, hypothesis)
    ("u1", "the cat sat on the mat", "the cat sat on a mat"),
    ("u2", "Hello, World!", "hello word"),
    ("u3", "a b c d", "a b c d"),
    ("u4", "one two", ""),
    ("u5", "x", "x y z"),
]


def write_scored(folder: Path) -> dict[str, Path]:
    """The same hypotheses as a decode folder's hyp.jsonl, as Kaldi text files and as trn files."""
    folder.mkdir(parents=True, exist_ok=True)
    write_lines(folder / "hyp.jsonl", [json.dumps({"id": i, "text": h, "ref": r}) for i, r, h in SCORED])
    return {
        "kaldi_ref": write_lines(folder / "ref.txt", [f"{i} {r}" for i, r, _ in SCORED]),
        "kaldi_hyp": write_lines(folder / "hyp.txt", [f"{i} {h}".rstrip() for i, _, h in reversed(SCORED)]),
        "trn_ref": write_lines(folder / "ref.trn", [f"{r} ({i})" for i, r, _ in SCORED]),
        "trn_hyp": write_lines(folder / "hyp.trn", [f"{h} ({i})".lstrip() for i, _, h in SCORED]),
        "trn_no_ext": write_lines(folder / "hyp.sclite", [f"{h} ({i})".lstrip() for i, _, h in SCORED]),
    }


def test_kaldi_text_and_trn_files_score_as_the_decode_folder_does(tmp_path):
    files = write_scored(tmp_path)
    built_in = score_dir(tmp_path)
    assert 0 < built_in.wer < 1 and 0 < built_in.ser < 1
    for ref, hyp in (("kaldi_ref", "kaldi_hyp"), ("trn_ref", "trn_hyp"), ("kaldi_ref", "trn_no_ext"),
                     ("trn_ref", "kaldi_hyp")):
        report, missing = score_files(files[ref], files[hyp])
        assert missing == []
        assert (report.wer, report.cer, report.ser) == (built_in.wer, built_in.cer, built_in.ser), (ref, hyp)
        assert (report.words, report.chars) == (built_in.words, built_in.chars)
        assert [u.id for u in report.utterances] == [i for i, _, _ in SCORED]

    code, output = cli("score", files["kaldi_ref"], files["trn_hyp"])
    assert code == 0, output
    assert built_in.summary_table(title=str(files["trn_hyp"])) in output
    code, output = cli("score", tmp_path)  # the decode-folder form as before
    assert code == 0 and built_in.summary_table() in output


def test_utterances_missing_from_hyp_count_as_deletions(tmp_path):
    files = write_scored(tmp_path)
    write_lines(tmp_path / "part.txt", [f"{i} {h}" for i, _, h in SCORED[:3]])
    report, missing = score_files(files["kaldi_ref"], tmp_path / "part.txt")
    assert missing == ["u4", "u5"]
    full, _ = score_files(files["kaldi_ref"], files["kaldi_hyp"])
    assert report.utterances[3] == full.utterances[3]  # u4's hypothesis is empty either way
    assert (report.utterances[4].words.dele, report.utterances[4].words.ins) == (1, 0)  # u5: "x" deleted
    assert (report.words.dele, report.words.ins) == (full.words.dele + 1, full.words.ins - 2)
    code, output = cli("score", files["kaldi_ref"], tmp_path / "part.txt")
    assert code == 0 and "2 utterance(s) of" in output and "counted as deletions" in output


def test_score_file_errors_name_file_and_line(tmp_path):
    files = write_scored(tmp_path)
    write_lines(tmp_path / "extra.txt", ["u1 the cat", "nope words", "u2 hello", "zzz"])
    with pytest.raises(ScoringError, match=r"extra\.txt:2: 2 hypothesis id\(s\) not in the reference .*'nope', 'zzz'"):
        score_files(files["kaldi_ref"], tmp_path / "extra.txt")
    write_lines(tmp_path / "dup.trn", ["a b (u1)", "c (u2)", "d (u1)"])
    with pytest.raises(ScoringError, match=r"dup\.trn:3: duplicate id 'u1' \(first on line 1\)"):
        read_transcripts(tmp_path / "dup.trn")
    write_lines(tmp_path / "dup.txt", ["u1 a", "", "u1 b"])
    with pytest.raises(ScoringError, match=r"dup\.txt:3: duplicate id 'u1'"):
        score_files(tmp_path / "dup.txt", files["kaldi_hyp"])
    write_lines(tmp_path / "bad.trn", ["a b (u1)", "no id here"])
    with pytest.raises(ScoringError, match=r"bad\.trn:2: a trn line ends in its utterance id"):
        read_transcripts(tmp_path / "bad.trn")
    code, output = cli("score", files["kaldi_ref"], tmp_path / "extra.txt")
    assert code == 1 and output.strip().startswith(f"error: {tmp_path / 'extra.txt'}:2: ") and "Traceback" not in output
    code, output = cli("score", tmp_path, files["kaldi_hyp"])
    assert code == 1 and "a folder" in output


def test_transcript_format_is_detected(tmp_path):
    kaldi_text = write_lines(tmp_path / "text", ["u1 a (laughs) b", "u2", "u3 c (noise)"])
    assert read_transcripts(kaldi_text) == {"u1": (1, "a (laughs) b"), "u2": (2, ""), "u3": (3, "c (noise)")}
    trn = write_lines(tmp_path / "t", ["a b (spk-u1)", "(u2)"])
    assert read_transcripts(trn) == {"spk-u1": (1, "a b"), "u2": (2, "")}
