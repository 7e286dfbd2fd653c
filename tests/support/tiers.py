"""The test tiers (tests/README.md) and the check that each test declares the one it is in.

A test's tier is a mark written in its module (`pytestmark`) or on the test, never derived from
where it lives or from how long it took on one machine. What can be read off a test is checked
against its marks instead, so a new test lands in its tier or collection fails naming it:
a test under tests/cluster/ is `cluster`; one using the Docker engine's fixtures is `images` or
`cluster`; one using KFP's API server on that cluster (`kfp_host`) is `kfp`; one whose module
holds a whole-pipeline entry point of invfold.pipelines.local is `pipeline`; every tier but `slow`
is also `slow`; and a test recorded past SLOW_S in tests/durations.json is `slow`, so a faster
machine cannot move it into `make test-fast`.
"""

from __future__ import annotations

from dataclasses import dataclass

TIERS = ("pipeline", "multiproc", "images", "cluster", "kfp", "slow")  # what each is for: pyproject.toml's markers
SLOW_S = 20.0
CLUSTER_FOLDER = "tests/cluster/"
DOCKER_FIXTURES = frozenset({"docker_engine", "cpu_images", "gpu_images"})
KFP_FIXTURES = frozenset({"kfp_host"})  # the API server of KFP's own backend on the test cluster
PIPELINE_ENTRY_POINTS = frozenset({"run_local", "run_design_local"})
PIPELINE_MODULE = "invfold.pipelines.local"


@dataclass(frozen=True)
class Declared:
    """What the check reads off one collected test."""

    nodeid: str
    marks: frozenset[str]
    fixtures: frozenset[str] = frozenset()
    runs_pipeline: bool = False  # its module holds run_local or run_design_local


def runs_pipeline(module) -> bool:
    """Whether a test module holds a whole-pipeline entry point (by identity, not by name)."""
    return any(
        getattr(value, "__module__", None) == PIPELINE_MODULE
        and getattr(value, "__name__", None) in PIPELINE_ENTRY_POINTS
        for value in vars(module).values()
    )


def missing_marks(tests: list[Declared], recorded: dict[str, float]) -> list[str]:
    """One line per test whose marks leave out its tier (empty when every test declares its own)."""
    problems = []
    for test in tests:
        needs = {}
        if test.nodeid.startswith(CLUSTER_FOLDER):
            needs["cluster"] = f"it is under {CLUSTER_FOLDER}"
        if DOCKER_FIXTURES & test.fixtures and not {"images", "cluster"} & test.marks:
            needs["images"] = f"it uses {', '.join(sorted(DOCKER_FIXTURES & test.fixtures))}"
        if KFP_FIXTURES & test.fixtures:
            needs["kfp"] = f"it uses {', '.join(sorted(KFP_FIXTURES & test.fixtures))}"
        if test.runs_pipeline:
            needs["pipeline"] = f"its module holds {PIPELINE_MODULE}'s whole-pipeline runner"
        tiers = (test.marks | needs.keys()) & (set(TIERS) - {"slow"})
        if tiers:
            needs["slow"] = f"it is {' and '.join(sorted(tiers))}"
        seconds = recorded.get(test.nodeid, 0.0)
        if seconds > SLOW_S:
            needs["slow"] = f"tests/durations.json records {seconds:.1f} s (over {SLOW_S:.0f} s)"
        for mark, why in needs.items():
            if mark not in test.marks:
                problems.append(f"{test.nodeid}: not marked `{mark}`, but {why}")
    return problems


class _Marks:
    """A pytest plugin that keeps each collected test's marks (after conftest's check has run)."""

    def __init__(self):
        self.marks: dict[str, frozenset[str]] = {}

    def pytest_collection_finish(self, session):
        self.marks = {item.nodeid: frozenset(m.name for m in item.iter_markers()) for item in session.items}


def summary(marks: dict[str, frozenset[str]], recorded: dict[str, float]) -> list[str]:
    """Per tier (and for `not slow`, what `make test-fast` runs): tests, and the seconds
    tests/durations.json records for those it holds."""
    rows = [("tier", "tests", "recorded", "recorded s")]
    selections = {name: (lambda m, name=name: name in m) for name in TIERS}
    selections["not slow"] = lambda m: "slow" not in m
    for name, selected in selections.items():
        ids = [nodeid for nodeid, m in marks.items() if selected(m)]
        seconds = [recorded[nodeid] for nodeid in ids if nodeid in recorded]
        rows.append((name, str(len(ids)), str(len(seconds)), f"{sum(seconds):.0f}"))
    return [" | ".join(row) for row in rows]


if __name__ == "__main__":  # python -m tests.support.tiers: the figures of tests/README.md's table
    import json
    import sys

    import pytest

    from tests.support.paths import REPO

    plugin = _Marks()
    code = pytest.main(["--collect-only", "-p", "no:terminal", str(REPO / "tests")], plugins=[plugin])
    if code != 0:
        sys.exit(code)
    print("\n".join(summary(plugin.marks, json.loads((REPO / "tests" / "durations.json").read_text()))))


def declared(item) -> Declared:
    """What a collected pytest item declares (its marks and fixtures) and what it runs."""
    module = getattr(item, "module", None)
    return Declared(
        nodeid=item.nodeid,
        marks=frozenset(mark.name for mark in item.iter_markers()),
        fixtures=frozenset(getattr(item, "fixturenames", ())),
        runs_pipeline=module is not None and runs_pipeline(module),
    )


def check_tiers(items, recorded: dict[str, float]) -> list[Declared]:
    """The collection hook's check: every test declares its tier, or collection stops naming it."""
    import pytest

    tests = [declared(item) for item in items]
    problems = missing_marks(tests, recorded)
    if problems:
        raise pytest.UsageError("test tiers (tests/README.md):\n" + "\n".join(problems))
    return tests
