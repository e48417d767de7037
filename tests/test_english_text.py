"""recipes/kathleen/local/english_text.py: sentences from Debian packages, held-out prompts left out."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "recipes/kathleen/local/english_text.py"

FORTUNES = ("The early bird gets the worm, but the second mouse gets the cheese.\n"
            "\t\t-- Steven Wright\n%\nFour score and seven years ago our fathers brought forth.\n%\n"
            "Too short.\n%\n")
WORDNET = ("  1 This software and database is being provided to you\n"
           "00001740 03 n 01 entity 0 003 | that which is perceived to have its own distinct existence; "
           "\"the cat sat on the warm mat all day\"  \n")
GCIDE = ("Affect \\Af*fect\"\\, v. t. [L. affectus.]\n   1. To act upon; to produce an effect or change upon.\n"
         "      [1913 Webster]\n\n            The climate affected their health and spirits.\n"
         "                                                  --Macaulay.\n      [1913 Webster]\n")


def deb(path: Path, files: dict[str, bytes]) -> None:
    """A Debian package: an ar archive whose data.tar.xz holds `files`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = b"!<arch>\n"
    for name, data in (("debian-binary", b"2.0\n"), ("control.tar.xz", b""), ("data.tar.xz", buf.getvalue())):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data + b"\n" * (len(data) % 2)
    path.write_bytes(out)


@pytest.fixture
def debs(tmp_path: Path) -> Path:
    d = tmp_path / "debs"
    d.mkdir()
    deb(d / "fortunes_1.0_all.deb", {"usr/share/games/fortunes/wisdom": FORTUNES.encode(),
                                     "usr/share/games/fortunes/wisdom.dat": b"\x00\x01binary index"})
    deb(d / "wordnet-base_3.0_all.deb", {"usr/share/wordnet/data.noun": WORDNET.encode(),
                                         "usr/share/wordnet/index.noun": b"entity n 1 1 @ 1 0 00001740"})
    deb(d / "dict-gcide_0.48_all.deb", {"usr/share/dictd/gcide.dict.dz": gzip.compress(GCIDE.encode())})
    return d


def script(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def run(tmp_path: Path, debs: Path, *exclude: str) -> tuple[list[str], str]:
    manifest = tmp_path / "test.jsonl"
    manifest.write_text(json.dumps({"format": "asr-manifest", "version": 1}) + "\n" + "".join(
        json.dumps({"id": f"u{i}", "audio": "x.flac", "duration": 1.0, "text": t}) + "\n" for i, t in enumerate(exclude)))
    out = tmp_path / "english_text.txt"
    done = script("--debs", debs, "--exclude", manifest, "--out", out)
    assert done.returncode == 0, done.stderr
    return out.read_text().splitlines(), done.stdout


def test_sentences_from_each_package(tmp_path, debs):
    lines, report = run(tmp_path, debs)
    assert lines == [
        "the early bird gets the worm but the second mouse gets the cheese",  # attribution dropped
        "four score and seven years ago our fathers brought forth",  # "Too short." has < 4 words
        "that which is perceived to have its own distinct existence",  # gloss and example, licence lines not
        "the cat sat on the warm mat all day",
        "the climate affected their health and spirits",  # quotation without "--Macaulay."
    ]
    assert "0 left out" in report


def test_held_out_prompts_are_left_out(tmp_path, debs):
    # five words in a row shared with a test prompt drop the sentence; four do not
    lines, report = run(tmp_path, debs, "Yes, the cat sat on the warm bed.", "Our fathers brought forth nothing.")
    assert "the cat sat on the warm mat all day" not in lines
    assert "four score and seven years ago our fathers brought forth" in lines
    assert len(lines) == 4 and "1 left out" in report


def test_missing_package_is_named(tmp_path, debs):
    (debs / "dict-gcide_0.48_all.deb").unlink()
    done = script("--debs", debs, "--out", tmp_path / "o.txt")
    assert done.returncode != 0 and "dict-gcide_*.deb" in done.stderr
    assert not (tmp_path / "o.txt").exists()


def test_damaged_package_is_named(tmp_path, debs):
    broken = debs / "wordnet-base_3.0_all.deb"
    broken.write_bytes(broken.read_bytes()[:200])
    done = script("--debs", debs, "--out", tmp_path / "o.txt")
    assert done.returncode != 0 and str(broken) in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o.txt").exists()
