"""`invfold evaluate`, `score` and `export` re-run themselves under jemalloc (invfold/allocator.py)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

SCRIPT = (
    "from invfold.allocator import reexec_under_jemalloc\n"
    "reexec_under_jemalloc()\n"
    "print('jemalloc' if 'libjemalloc' in open('/proc/self/maps').read() else 'glibc')\n"
)


def _run(env, tmp_path):
    command = tmp_path / "invfold"  # the process is the `invfold` command, the only one that re-runs itself
    command.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(command)], env=env, capture_output=True, text=True, check=True)


@pytest.mark.skipif(
    ctypes.util.find_library("jemalloc") is None, reason="libjemalloc2 is not installed (make test installs it)"
)
def test_a_command_reruns_itself_once_under_jemalloc(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_CONF")}
    done = _run(env, tmp_path)
    assert done.stdout.splitlines() == ["jemalloc"]  # printed once: the first process was replaced


def test_an_allocator_the_user_chose_is_kept(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["GLIBC_TUNABLES"] = "glibc.malloc.trim_threshold=1000000"
    assert _run(env, tmp_path).stdout.splitlines() == ["glibc"]


def test_a_handler_called_in_process_never_replaces_its_caller(monkeypatch):
    """A CLI handler run by a test or a notebook (invfold.cli.main([...])) must not exec: the
    caller (here pytest) would start over as another process."""
    from invfold import allocator

    monkeypatch.delenv(allocator.REEXEC_MARK, raising=False)
    monkeypatch.setattr(allocator, "allocator_env", lambda: {"LD_PRELOAD": "libjemalloc.so.2"})

    def refuse(*args):
        raise AssertionError(f"execve{args[:2]}")

    monkeypatch.setattr(os, "execve", refuse)
    allocator.reexec_under_jemalloc()  # pytest's argv[0]: returns
    assert allocator.is_invfold_command("/venv/bin/invfold") and allocator.is_invfold_command("/x/invfold/cli.py")
    assert not allocator.is_invfold_command(sys.argv[0]) and not allocator.is_invfold_command("-c")
