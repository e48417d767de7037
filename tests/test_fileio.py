"""Atomic writes: the file appears whole or not at all, with the permissions an ordinary write gives it."""

import os
import stat

import pytest

from asr_transformer.fileio import atomic_open, write_json


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        with atomic_open(tmp_path / "b.bin", "wb") as f:
            f.write(b"\0")
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    plain = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
    assert plain == 0o666 & ~umask
    for name in ("a.json", "b.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == plain


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    write_json(tmp_path / "a.json", {"x": 1})
    with pytest.raises(RuntimeError):
        with atomic_open(tmp_path / "a.json") as f:
            f.write("half")
            raise RuntimeError("killed")
    assert (tmp_path / "a.json").read_text() == '{\n  "x": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
