"""`asr decode` with bad inputs: every bad manifest row and unreadable audio is found before anything is written;
by default the command lists them and refuses, with --skip-bad it decodes the rest and lists the bad ones in
skipped.jsonl. A bad --out is refused before the model loads. Tiny random package (conftest.tiny_package)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.data.manifest import ManifestError, read_manifest


def nan_wav(path):
    x = np.full(8000, 0.1, np.float32)
    x[1000] = np.nan
    sf.write(path, x, 16000, subtype="FLOAT")  # the header is fine: found only when the samples are read
    return path


def good_lines(package) -> list[str]:
    return [line for line in (package / "test.jsonl").read_text().splitlines() if '"id"' in line]


def row(uid: str, audio, duration: float = 0.5) -> str:
    return json.dumps({"id": uid, "audio": str(audio), "duration": duration, "text": "one"})


@pytest.fixture
def bad_manifest(tiny_package, tmp_path):
    """The package's 4 good utterances and, at lines 3-7, five bad rows: not JSON, a missing field, a Latin-1 line,
    a missing audio file, an empty audio file."""
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    good = good_lines(tiny_package)
    lines = [line.encode() for line in good[:2]] + [
        b"{not json",
        b'{"id": "nofield", "audio": "x.wav", "duration": 1.0}',
        row("latin", "x.wav").replace("one", "caf\u00e9").encode("latin-1"),
        row("missing", tmp_path / "missing.wav").encode(),
        row("empty", empty).encode(),
    ] + [line.encode() for line in good[2:]]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def decode(package, manifest, out, *args):
    return CliRunner().invoke(app, ["decode", str(package / "model.pt"), str(manifest), "-o", str(out),
                                    "--mode", "ctc", "--threads", "1", "--no-score", *args])


def hyp_ids(folder) -> list[str]:
    return [json.loads(line)["id"] for line in (folder / "hyp.jsonl").read_text().splitlines()]


def test_read_manifest_collects_every_bad_line(bad_manifest):
    with pytest.raises(ManifestError, match=r"bad.jsonl:3: not valid JSON"):
        read_manifest(bad_manifest)  # the other callers: the first bad line stops them
    errors = []
    utts = read_manifest(bad_manifest, errors)
    assert [u.id for u in utts] == ["u0", "u1", "missing", "empty", "u2", "u3"]
    assert [e.split(": ")[0][-len("bad.jsonl:3"):] for e in errors] == ["bad.jsonl:3", "bad.jsonl:4", "bad.jsonl:5"]
    assert "missing field 'text'" in errors[1] and "not UTF-8" in errors[2]


def test_decode_refuses_listing_every_bad_row(tiny_package, bad_manifest, tmp_path):
    out = tmp_path / "dec"
    result = decode(tiny_package, bad_manifest, out)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 6 and "Traceback" not in result.output
    assert [line.split(": ")[0] for line in lines[:5]] == ["bad"] * 5
    for where in ("bad.jsonl:3", "bad.jsonl:4", "bad.jsonl:5", "utterance 'missing'", "utterance 'empty'"):
        assert sum(where in line for line in lines[:5]) == 1, where
    assert lines[5].startswith("error: ") and "5 of 9 utterances" in lines[5] and "--skip-bad" in lines[5]
    assert not out.exists()  # nothing written


def test_decode_skip_bad_decodes_the_rest(tiny_package, bad_manifest, tmp_path):
    out = tmp_path / "dec"
    result = decode(tiny_package, bad_manifest, out, "--skip-bad")
    assert result.exit_code == 0, result.output
    assert hyp_ids(out) == ["u0", "u1", "u2", "u3"]
    skipped = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
    assert [r["id"] for r in skipped] == [None, None, None, "missing", "empty"]
    assert all(r["error"] in result.stderr for r in skipped)
    assert json.loads((out / "rtf.json").read_text())["utterances"] == 4
    # a later run without bad rows leaves no stale list behind
    result = decode(tiny_package, tiny_package / "test.jsonl", out, "--skip-bad")
    assert result.exit_code == 0 and not (out / "skipped.jsonl").exists()


def test_audio_unreadable_only_when_decoding_follows_the_policy(tiny_package, tmp_path):
    good = good_lines(tiny_package)
    manifest = tmp_path / "nan.jsonl"
    manifest.write_text("\n".join(good[:2] + [row("nan", nan_wav(tmp_path / "nan.wav"))] + good[2:]) + "\n")
    out = tmp_path / "dec"
    result = decode(tiny_package, manifest, out, "--mode", "ctc,greedy")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "utterance 'nan'" in result.stderr and "NaN" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ") and "1 of 5 utterances" in result.stderr
    assert not out.exists()
    result = decode(tiny_package, manifest, out, "--mode", "ctc,greedy", "--skip-bad")
    assert result.exit_code == 0, result.output
    for mode in ("ctc", "greedy"):
        assert hyp_ids(out / mode) == ["u0", "u1", "u2", "u3"]
    assert [json.loads(line)["id"] for line in (out / "skipped.jsonl").read_text().splitlines()] == ["nan"]
    manifest.write_text(row("nan", tmp_path / "nan.wav") + "\n")  # nothing left to decode: an error, not empty results
    result = decode(tiny_package, manifest, tmp_path / "none", "--skip-bad")
    assert result.exit_code == 1 and "none of its utterances could be decoded" in result.stderr
    assert not (tmp_path / "none").exists()


def test_many_bad_rows_are_listed_up_to_a_limit(tiny_package, tmp_path):
    manifest = tmp_path / "many.jsonl"
    rows = [row(f"gone{i}", tmp_path / f"gone{i}.wav") for i in range(25)]
    manifest.write_text("\n".join(good_lines(tiny_package) + rows) + "\n")
    result = decode(tiny_package, manifest, tmp_path / "dec")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 22 and lines[20] == "… and 5 more" and "25 of 29" in lines[21]


def test_bad_out_is_refused_before_the_model_loads(tiny_package, tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("a file, not a folder")
    for out in (blocker, blocker / "sub"):
        result = CliRunner().invoke(app, ["decode", str(tmp_path / "not_a_model.pt"), str(tiny_package / "test.jsonl"),
                                          "-o", str(out)])
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {out}") and "is a file" in lines[0]


def test_exported_model_follows_the_same_policy(tiny_package, bad_manifest, tmp_path):
    pytest.importorskip("onnxruntime", reason="ONNX export needs the onnx extra: pip install -e '.[onnx]'")
    from asr_transformer.inference.export import export_package
    from asr_transformer.inference.exported import ExportedRecognizer

    export_package(tiny_package / "model.pt", tmp_path / "onnx")
    rec = ExportedRecognizer(tmp_path / "onnx", threads=1, mode="ctc")
    with pytest.raises(ManifestError, match="5 of 9 utterances cannot be decoded"):
        rec.decode_manifest(bad_manifest, tmp_path / "dec", score=False)
    assert not (tmp_path / "dec").exists()
    shutil.copy(nan_wav(tmp_path / "nan.wav"), tmp_path / "empty.wav")  # now found only when read
    bad_manifest.write_text("\n".join(good_lines(tiny_package) + [row("empty", tmp_path / "empty.wav")]) + "\n")
    with pytest.raises(ManifestError, match="1 of 5 utterances"):
        rec.decode_manifest(bad_manifest, tmp_path / "dec", score=False)
    rec.decode_manifest(bad_manifest, tmp_path / "dec", score=False, skip_bad=True)
    assert hyp_ids(tmp_path / "dec") == ["u0", "u1", "u2", "u3"]
    assert "utterance 'empty'" in (tmp_path / "dec" / "skipped.jsonl").read_text()


def bad_audio_files(root) -> dict[str, tuple]:
    """Audio a user may hand `asr transcribe`, written here: {name: (path, what the one error line says)}."""
    t = np.arange(16000) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    sf.write(root / "whole.wav", np.tile(tone, 3), 16000, subtype="PCM_16")
    data = (root / "whole.wav").read_bytes()
    (root / "truncated.wav").write_bytes(data[:len(data) // 3])
    sf.write(root / "huge.wav", tone * 1e30, 16000, subtype="FLOAT")
    nan_wav(root / "nan.wav")
    sf.write(root / "empty.wav", np.zeros(0, np.float32), 16000)
    (root / "text.wav").write_text("not audio at all")
    (root / "folder.wav").mkdir()
    return {"truncated": (root / "truncated.wav", "truncated: header says 3.00 s"),
            "huge": (root / "huge.wav", "samples out of range"),
            "nan": (root / "nan.wav", "NaN"),
            "empty": (root / "empty.wav", "no samples"),
            "not audio": (root / "text.wav", "cannot decode audio"),
            "a folder": (root / "folder.wav", "directory"),
            "missing": (root / "missing.wav", "not found")}


def test_transcribe_answers_every_bad_audio_file_with_one_line(tiny_package, tmp_path):
    """Each bad file is one `error: <file>: <what>` line, the good file beside it is still transcribed, and the
    exit status says that some failed; never a traceback."""
    cases = bad_audio_files(tmp_path)
    paths = [str(path) for path, _ in cases.values()]
    result = CliRunner().invoke(app, ["transcribe", str(tmp_path / "whole.wav"), *paths, "--model",
                                      str(tiny_package / "model.pt"), "--mode", "ctc", "--threads", "1"])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    for name, (path, what) in cases.items():
        lines = [line for line in errors if line.startswith(f"error: {path}: ")]
        assert len(lines) == 1 and what in lines[0], (name, errors)
    assert f"{len(cases)} of {len(cases) + 1} input(s) failed" in result.stderr
    assert result.stdout.startswith(f"{tmp_path / 'whole.wav'}\t")  # the good file's line
    assert "Traceback" not in result.output


def test_the_python_api_checks_arrays_and_arguments_as_the_command_line_checks_files(tiny_package):
    """Recognizer takes arrays through the one gate (`checked_samples`): NaN, empty, out of
    range, integer or oddly shaped arrays get an AudioError naming the array; a stereo array is averaged as a stereo
    file is; a wrong argument type names what is taken."""
    from asr_transformer.data.audio import AudioError
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.recognizer import Recognizer

    rec = Recognizer(tiny_package / "model.pt", threads=1, mode="ctc")
    good = (0.1 * np.sin(np.arange(8000) / 5)).astype(np.float32)
    bad = {"NaN": np.full(8000, np.nan, np.float32), "no samples": np.zeros(0, np.float32),
           "out of range": good * 5000, "int16": (good * 30000).astype(np.int16),
           "shape": np.zeros((3, 4, 5), np.float32)}
    messages = {"NaN": "array 1: audio contains NaN", "no samples": "array 1: audio has no samples",
                "out of range": "array 1: samples out of range", "int16": "array 1: expected float samples",
                "shape": r"array 1: expected samples \(n,\) or \(n, channels"}
    for kind, wave in bad.items():
        with pytest.raises(AudioError, match=messages[kind]):
            rec.recognize_arrays([good, wave])
        with pytest.raises(AudioError):
            rec.transcribe(wave)
    stereo = np.stack([good, good], axis=1)
    assert rec.recognize_arrays([stereo]) == rec.recognize_arrays([good])
    with pytest.raises(DecodeError, match="takes a list of arrays"):
        rec.recognize_arrays(good)
    for wrong, named in ((None, "NoneType"), (["a.wav", "b.wav"], "several files"), (3.5, "float")):
        with pytest.raises(DecodeError, match=named):
            rec.transcribe(wrong)
