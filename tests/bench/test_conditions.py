"""bench/conditions.py reports the allocator each process actually loaded, read from its
/proc/<pid>/maps: the figure a bench prints must name the allocator that ran, not the one the
environment asked for."""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

CONDITIONS = REPO / "bench" / "conditions.py"
JEMALLOC = ctypes.util.find_library("jemalloc")
needs_jemalloc = pytest.mark.skipif(JEMALLOC is None, reason="libjemalloc2 is not installed (make test installs it)")
# the helper's report of its own process beside that process's own reading of /proc/self/maps
SELF_REPORT = f"""
import json, sys
sys.path.insert(0, {str(CONDITIONS.parent)!r})  # as a bench script finds it
import conditions
report = conditions.start(threads=2).finish(torch_info=False)
maps = open("/proc/self/maps").read()
print(json.dumps({{"report": report, "jemalloc_mapped": "libjemalloc" in maps}}))
"""


def load_conditions():
    """bench/conditions.py as a module (bench/ is a folder of scripts, not a package)."""
    name = "bench_conditions"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CONDITIONS)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", "GLIBC_TUNABLES")}
    return {**env, **extra}


def self_report(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", SELF_REPORT], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("preload", "expected"), [pytest.param(True, "jemalloc", marks=needs_jemalloc), (False, "glibc")]
)
def test_the_reported_allocator_is_the_one_proc_self_maps_shows(preload, expected):
    env = clean_env(LD_PRELOAD=JEMALLOC) if preload else clean_env()
    seen = self_report(env)
    (me,) = [p for p in seen["report"]["processes"] if "-c" in p["command"].split()]
    assert me["allocator"] == expected
    assert (me["allocator"] == "jemalloc") == seen["jemalloc_mapped"]
    assert me["environment"].get("LD_PRELOAD") == (JEMALLOC if preload else None)
    assert seen["report"]["threads_per_side"] == 2
    assert len(seen["report"]["load_average"]["start"]) == 3


def test_an_allocator_asked_for_but_missing_is_reported_as_glibc():
    """LD_PRELOAD naming a library that is not there: the loader skips it (with a warning) and the
    process runs on glibc's malloc, which is what the report must say."""
    seen = self_report(clean_env(LD_PRELOAD="libjemalloc-that-is-not-installed.so.9"))
    (me,) = [p for p in seen["report"]["processes"] if "-c" in p["command"].split()]
    assert me["allocator"] == "glibc" and not seen["jemalloc_mapped"]


@needs_jemalloc
def test_a_tracked_child_is_reported_with_its_own_allocator():
    """A bench's measured processes are its children (the reference child, a trainer's ranks):
    Watch reads each one's maps while it runs, so a jemalloc child of a glibc bench shows as such."""
    conditions = load_conditions()
    watch = conditions.start(threads=1)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        env=clean_env(LD_PRELOAD=JEMALLOC),
        stdin=subprocess.PIPE,
    )
    try:
        watch.sample(os.getpid())
        with open(f"/proc/{child.pid}/maps") as fh:
            mapped = "libjemalloc" in fh.read()
    finally:
        child.communicate(b"")
    report = watch.finish(torch_info=False)
    by_pid = {p["pid"]: p for p in report["processes"]}
    assert mapped and by_pid[child.pid]["allocator"] == "jemalloc"
    assert by_pid[os.getpid()]["allocator"] == conditions.allocator_of("self")
    assert "allocator **jemalloc**" in conditions.markdown(report)


def test_the_cpu_flags_are_the_vector_and_matrix_ones():
    conditions = load_conditions()
    flags = conditions.cpu()["flags"]
    assert all(f == "fma" or f.startswith(("avx2", "avx512", "amx")) for f in flags)
    with open("/proc/cpuinfo") as fh:
        assert ("avx2" in fh.read().split()) == ("avx2" in flags)
