"""The repository speaks to users: no internal work-session labels, no paths of one machine."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SESSION_LABEL = re.compile(r"\bstop\s+\d+", re.IGNORECASE)
# an absolute path into a machine's scratch or home folders (a project path is relative)
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:tmp|work|home|Users|root|mnt|scratch)/")
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()


def tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if name and name != THIS_FILE and path.is_file() and b"\0" not in path.read_bytes()[:8192]:
            files.append(path)
    return files


def offending_lines(pattern: re.Pattern) -> list[str]:
    hits = []
    for path in tracked_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    return hits


def test_no_tracked_file_names_a_work_session():
    """History is dated in docs/experiments/, never labelled 'stop N'."""
    assert offending_lines(SESSION_LABEL) == []


def test_no_tracked_file_names_a_path_outside_the_repository():
    assert offending_lines(MACHINE_PATH) == []


def test_the_patterns_catch_what_they_are_for():
    assert SESSION_LABEL.search("as measured at Stop 21") and not SESSION_LABEL.search("stops at 21 epochs")
    assert MACHINE_PATH.search("see /work/x/s21/fold.sh") and MACHINE_PATH.search("(/tmp/k256)")
    assert not MACHINE_PATH.search("../shared/data/kathleen") and not MACHINE_PATH.search("recipes/work/a")
