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


def _run(env):
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)


@pytest.mark.skipif(
    ctypes.util.find_library("jemalloc") is None, reason="libjemalloc2 is not installed (make test installs it)"
)
def test_a_command_reruns_itself_once_under_jemalloc():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_CONF")}
    done = _run(env)
    assert done.stdout.splitlines() == ["jemalloc"]  # printed once: the first process was replaced


def test_an_allocator_the_user_chose_is_kept():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["GLIBC_TUNABLES"] = "glibc.malloc.trim_threshold=1000000"
    assert _run(env).stdout.splitlines() == ["glibc"]
