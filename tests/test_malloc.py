"""The glibc malloc tunables that `asr` re-executes itself with (asr_transformer/malloc.py)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from asr_transformer import malloc


def test_tuned_environment_sets_tunables_once_and_respects_the_user():
    env = malloc.tuned_environment({"PATH": "/bin"}, "glibc 2.36")
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": malloc.TUNABLES}
    assert malloc.tuned_environment(env, "glibc 2.36") is None  # after the re-exec: nothing more to do
    other = malloc.tuned_environment({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, "glibc 2.36")
    assert other["GLIBC_TUNABLES"] == "glibc.pthread.rseq=0:" + malloc.TUNABLES  # kept, ours appended
    assert malloc.tuned_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "glibc 2.36") is None
    assert malloc.tuned_environment({malloc.OPT_OUT: "0"}, "glibc 2.36") is None
    assert malloc.tuned_environment({}, None) is None  # macOS, musl: not glibc


REUSE = textwrap.dedent("""
    import os, resource, sys
    from asr_transformer import malloc
    malloc.apply()
    import torch
    faults = []
    for _ in range(3):  # a 64 MiB tensor, allocated, written and freed three times
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        x = torch.empty(16 * 2**20).fill_(1.0)
        del x
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(os.environ.get("GLIBC_TUNABLES"), malloc.active(), faults[-1])
""")


THP_PATH = Path("/sys/kernel/mm/transparent_hugepage/enabled")
THP_ALWAYS = THP_PATH.exists() and "[always]" in THP_PATH.read_text()


@pytest.mark.skipif(not (malloc._libc() or "").startswith("glibc"), reason="needs glibc")
@pytest.mark.parametrize("tuned", [True, False])
def test_reexecuted_process_reuses_freed_memory_without_page_faults(tuned):
    env = {"ASR_MALLOC_TUNING": "1" if tuned else "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", REUSE], capture_output=True, text=True, env=env, check=True)
    tunables, active, faults = out.stdout.split()
    assert active == str(tuned)
    if tuned:
        assert tunables == malloc.TUNABLES
        assert int(faults) < 1000  # the freed block is reused
    else:
        assert tunables == "None"
        if not THP_ALWAYS:  # glibc's default: a fresh mapping, faulted in page by page (16,384 × 4 KiB)
            assert int(faults) > 8000


RELEASE = textwrap.dedent("""
    import os, sys
    from asr_transformer import malloc
    malloc.apply()
    import torch

    def resident_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    blocks = [torch.empty(2**20).fill_(1.0) for _ in range(256)]  # 1 GiB in 4-MiB blocks, then freed
    del blocks
    held = resident_mb()
    malloc.release_free_memory()
    print(held, resident_mb())
""")


@pytest.mark.skipif(not (malloc._libc() or "").startswith("glibc"), reason="needs glibc")
def test_freed_memory_held_by_the_tunables_goes_back_when_released():
    """With the tunables a process keeps what it frees (so a long transcription's peak grows); releasing it
    between batches gives it back."""
    env = {"ASR_MALLOC_TUNING": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, env=env, check=True)
    held, released = map(float, out.stdout.split())
    assert held > released + 700, (held, released)


def test_help_names_the_opt_out():
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert malloc.OPT_OUT + "=0" in result.output
