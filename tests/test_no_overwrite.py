"""No command writes over what it did not write: transcripts of inputs that share a name, checkpoints, foreign
files and folders, a user's manifests; and an output folder is checked before any decoding."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.cli.output import output_names


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], prog_name="asr")


def test_inputs_that_share_a_name_get_distinct_outputs():
    assert output_names(["a/speech.wav", "b/other.wav"]) == ["speech", "other"]
    assert output_names(["speech.wav", "speech.flac", "x.ogg"]) == ["speech.wav", "speech.flac", "x"]
    assert output_names(["a/speech.wav", "b/speech.wav", "-"]) == ["speech.wav", "speech.wav-2", "stdin"]


def test_transcribe_writes_one_file_per_input(tiny_package, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    wav = tiny_package / "u0.wav"
    inputs = [shutil.copy(wav, tmp_path / "a/speech.wav"), shutil.copy(wav, tmp_path / "b/speech.wav"),
              shutil.copy(tiny_package / "u2.wav", tmp_path / "speech.flac.wav")]
    result = run("transcribe", *inputs, "-m", tiny_package / "model.pt", "-o", tmp_path / "out", "-f", "json",
                 "--threads", "1")
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["speech.flac.json", "speech.wav-2.json", "speech.wav.json"]
    assert all("text" in json.loads(p.read_text()) for p in (tmp_path / "out").iterdir())


def test_transcribe_checks_the_output_folder_before_decoding(tiny_package, tmp_path):
    (tmp_path / "file").write_text("x")
    result = run("transcribe", tiny_package / "u0.wav", "-m", tmp_path / "no-model.pt", "-o", tmp_path / "file/out")
    assert result.exit_code == 1 and "is a file, not a folder" in result.output  # before the model is even looked for


def test_average_and_package_replace_only_model_packages(tiny_package, tmp_path):
    checkpoint = tmp_path / "epoch_10.pt"
    from asr_transformer.checkpoint_io import file_format, save_checkpoint

    save_checkpoint(checkpoint, {"weights": {}}, format="asr-epoch")
    before = checkpoint.read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for target, kind in ((checkpoint, "an asr-epoch file"), (notes, "not a file of this toolkit")):
        result = run("package", tiny_package / "model.pt", "-o", target, "--beam", "3")
        assert result.exit_code == 1 and f"{target}: exists and is {kind}, not a model package" in result.output
    assert checkpoint.read_bytes() == before and notes.read_text() == "mine"
    result = run("average", tmp_path, "--out", checkpoint)
    assert result.exit_code == 1 and "not a model package" in result.output and checkpoint.read_bytes() == before
    again = tmp_path / "again.pt"
    shutil.copy(tiny_package / "model.pt", again)
    assert run("package", again, "-o", again, "--beam", "3").exit_code == 0  # a package replaces a package
    assert run("package", tiny_package / "model.pt", "-o", notes, "--force").exit_code == 0
    assert file_format(notes) == "asr-model" and file_format(tiny_package / "u0.wav") is None


def test_export_writes_only_into_an_export_or_an_empty_folder(tiny_package, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "report.txt").write_text("mine")
    result = run("export", tiny_package / "model.pt", "-o", folder)
    assert result.exit_code == 1 and "holds files but no export (export.json)" in result.output
    assert sorted(p.name for p in folder.iterdir()) == ["report.txt"]


def test_prepare_never_replaces_a_users_manifests(tiny_package, tmp_path):
    source = tmp_path / "audio"
    source.mkdir()
    for i in range(4):
        shutil.copy(tiny_package / f"u{i}.wav", source / f"u{i}.wav")
        (source / f"u{i}.txt").write_text(f"word {i}")
    out = tmp_path / "data"
    out.mkdir()
    (out / "train.jsonl").write_text("my own manifest\n")
    result = run("prepare", "folder", source, "-o", out)
    assert result.exit_code == 1 and "holds train.jsonl that asr prepare did not write" in result.output
    assert (out / "train.jsonl").read_text() == "my own manifest\n"
    assert run("prepare", "folder", source, "-o", out, "--force").exit_code == 0
    assert run("prepare", "folder", source, "-o", out).exit_code == 0  # its own manifests: prepared again


def test_the_first_load_of_an_unsigned_package_on_a_terminal_says_what_that_means(tiny_package, tmp_path):
    """`asr info` says it always; a terminal user's first load of the package says it once (a marker in the cache)."""
    import os
    import pty
    import subprocess
    import sys

    assert "signature:  none: whoever edits this file can recompute its checksum" in run(
        "info", tiny_package / "model.pt").output
    env = {k: v for k, v in os.environ.items() if k != "ASR_PACKAGE_KEY"} | {"XDG_CACHE_HOME": str(tmp_path)}
    notes = []
    for _ in range(2):
        leader, follower = pty.openpty()
        subprocess.run([sys.executable, "-m", "asr_transformer", "transcribe", str(tiny_package / "u0.wav"), "-m",
                        str(tiny_package / "model.pt"), "--threads", "1"], stderr=follower, stdout=subprocess.DEVNULL,
                       env=env, check=True, timeout=300)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        os.close(leader)
        notes.append([line for line in seen.decode().splitlines() if "note:" in line])
    assert len(notes[0]) == 1 and "signature none: whoever edits this file" in notes[0][0] and notes[1] == []
