"""Test tiers are declared in the test modules, and collection fails on a test that leaves its out."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from tests.support.paths import REPO
from tests.support.tiers import SLOW_S, Declared, check_tiers, missing_marks, runs_pipeline


def _collected(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_horovod_and_deepspeed_whole_pipeline_tests_declare_pipeline_and_multiproc():
    selected = _collected("-m", "pipeline and multiproc and slow", "tests/pipelines/test_strategies_pipeline.py")
    assert len(selected) == 2 and all("horovod" in s or "deepspeed" in s for s in selected), selected


def test_a_fully_declared_test_passes():
    tests = [
        Declared("tests/cluster/test_x.py::test_a", frozenset({"cluster", "slow"}), frozenset({"cpu_images"})),
        Declared("tests/deploy/test_images.py::test_b", frozenset({"images", "slow"}), frozenset({"docker_engine"})),
        Declared("tests/pipelines/test_p.py::test_c", frozenset({"pipeline", "slow"}), runs_pipeline=True),
        Declared("tests/cluster/test_k.py::test_k", frozenset({"cluster", "kfp", "slow"}), frozenset({"kfp_host"})),
        Declared("tests/train/test_t.py::test_d", frozenset({"multiproc", "slow"})),
        Declared("tests/design/test_e.py::test_e", frozenset({"slow"})),
        Declared("tests/design/test_f.py::test_f", frozenset()),
    ]
    recorded = {"tests/design/test_e.py::test_e": SLOW_S + 1, "tests/design/test_f.py::test_f": SLOW_S - 1}
    assert missing_marks(tests, recorded) == []


@pytest.mark.parametrize(
    "test, recorded, expected",
    [
        (
            Declared("tests/cluster/test_x.py::test_a", frozenset({"slow"})),
            {},
            "tests/cluster/test_x.py::test_a: not marked `cluster`, but it is under tests/cluster/",
        ),
        (
            Declared("tests/deploy/test_y.py::test_b", frozenset({"slow"}), frozenset({"cpu_images"})),
            {},
            "tests/deploy/test_y.py::test_b: not marked `images`, but it uses cpu_images",
        ),
        (
            Declared("tests/pipelines/test_p.py::test_c", frozenset({"slow"}), runs_pipeline=True),
            {},
            "tests/pipelines/test_p.py::test_c: not marked `pipeline`, but its module holds "
            "invfold.pipelines.local's whole-pipeline runner",
        ),
        (
            Declared("tests/cluster/test_k.py::test_k", frozenset({"cluster", "slow"}), frozenset({"kfp_host"})),
            {},
            "tests/cluster/test_k.py::test_k: not marked `kfp`, but it uses kfp_host",
        ),
        (
            Declared("tests/train/test_t.py::test_d", frozenset({"multiproc"})),
            {},
            "tests/train/test_t.py::test_d: not marked `slow`, but it is multiproc",
        ),
        (
            Declared("tests/design/test_e.py::test_e[one]", frozenset()),
            {"tests/design/test_e.py::test_e[one]": 35.4},
            "tests/design/test_e.py::test_e[one]: not marked `slow`, "
            "but tests/durations.json records 35.4 s (over 20 s)",
        ),
    ],
)
def test_a_test_that_leaves_out_its_tier_is_named(test, recorded, expected):
    assert missing_marks([test], recorded) == [expected]


def _module(**names) -> types.ModuleType:
    module = types.ModuleType("test_fake")
    vars(module).update(names)
    return module


def test_a_whole_pipeline_module_is_recognised_by_the_runner_it_holds():
    def run_local():
        pass

    assert not runs_pipeline(_module(run_local=run_local))  # a name alone is not the runner
    run_local.__module__ = "invfold.pipelines.local"
    assert runs_pipeline(_module(runner=run_local))
    assert not runs_pipeline(_module(other=print))


class _Item:
    """As much of a collected pytest item as the collection hook reads."""

    def __init__(self, nodeid: str, marks: tuple[str, ...] = ()):
        self.nodeid, self.fixturenames, self.module = nodeid, (), _module()
        self._marks = [getattr(pytest.mark, name).mark for name in marks]

    def iter_markers(self):
        return iter(self._marks)


def test_collection_fails_naming_every_test_that_leaves_out_its_tier():
    items = [_Item("tests/cluster/test_new.py::test_a"), _Item("tests/cluster/test_new.py::test_b", ("cluster",))]
    with pytest.raises(pytest.UsageError) as raised:
        check_tiers(items, {})
    lines = str(raised.value).splitlines()
    assert lines[0] == "test tiers (tests/README.md):"
    assert lines[1:] == [
        "tests/cluster/test_new.py::test_a: not marked `cluster`, but it is under tests/cluster/",
        "tests/cluster/test_new.py::test_a: not marked `slow`, but it is cluster",
        "tests/cluster/test_new.py::test_b: not marked `slow`, but it is cluster",
    ]
    check_tiers([_Item("tests/cluster/test_new.py::test_c", ("cluster", "slow"))], {})
