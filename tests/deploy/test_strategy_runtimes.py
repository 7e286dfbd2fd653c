"""STRATEGIES (components/train/strategies) is the one record of the strategies; the runtimes the
chart and the overlays ship, and the images those runtimes run, must follow it. Checked both ways
in every rendering: each strategy has the runtimes the launcher references (one node and several,
with the replicated jobs its TrainJobs patch), each runtime belongs to a strategy, and each image
a runtime runs is one scripts/build_images.sh builds. A strategy added to STRATEGIES without its
runtime or its image fails here."""

from __future__ import annotations

import re
import sys

import pytest

from invfold.components.launch.trainjob import RUNTIME_PREFIX, replicated_jobs, runtime_name
from invfold.components.train.strategies import STRATEGIES, StrategySpec
from tests.support.deploy_tools import RENDERINGS, documents, rendering
from tests.support.paths import REPO

BUILD_IMAGES = REPO / "scripts" / "build_images.sh"


def expected_runtimes() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Runtime name -> (its strategy, its replicated jobs), for every job size the launcher knows
    (one node: an MPI strategy's launcher-only runtime; several)."""
    return {runtime_name(s, nodes=n): (s, tuple(replicated_jobs(s, n))) for s in STRATEGIES for n in (1, 2)}


def built_images() -> set[str]:
    """The images build_images.sh builds: `invfold-NAME` for each `build_pair NAME` / `build NAME`."""
    names = re.findall(r"^\s*(?:[A-Z_]+=\S+ )?build(?:_pair)? ([\w-]+) ", BUILD_IMAGES.read_text(), re.MULTILINE)
    return {f"invfold-{name}" for name in names}


def runtime_problems(docs: list[dict]) -> list[str]:
    """What keeps the rendered runtimes `docs` from matching STRATEGIES, one line each."""
    shipped = {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")
        and d["metadata"]["name"].startswith(RUNTIME_PREFIX)
    }
    problems = []
    for name, (strategy, jobs) in expected_runtimes().items():
        if name not in shipped:
            problems.append(f"{name}: no such runtime (strategy {strategy!r} needs it)")
            continue
        have = tuple(j["name"] for j in shipped[name]["spec"]["template"]["spec"]["replicatedJobs"])
        if have != jobs:
            problems.append(f"{name}: replicated jobs {have}, the launcher patches {jobs}")
    for name in sorted(set(shipped) - set(expected_runtimes())):
        problems.append(f"{name}: a runtime of no strategy in STRATEGIES")
    built = built_images()
    for name, runtime in sorted(shipped.items()):
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            for container in job["template"]["spec"]["template"]["spec"]["containers"]:
                image = container["image"].rsplit("/", 1)[-1].split(":")[0].split("@")[0]
                if image not in built:
                    problems.append(f"{name}: image {image} is not built by scripts/build_images.sh")
    return problems


@pytest.fixture(scope="module")
def chart_default() -> list[dict]:
    return documents(rendering("chart-default"))


@pytest.mark.parametrize("name", RENDERINGS)
def test_every_strategy_ships_its_runtimes_and_every_runtime_is_a_strategys(name):
    assert runtime_problems(documents(rendering(name))) == []


def test_a_strategy_added_without_its_runtime_is_reported(monkeypatch, chart_default):
    spec = StrategySpec(
        name="newdist",
        strategy_class="ddp:DDPStrategy",
        local_launchers=("mpirun",),
        cluster_launcher="mpirun",
        replicated_jobs=("node", "launcher"),
        process_group="torch",
    )
    monkeypatch.setitem(STRATEGIES, "newdist", spec)
    assert runtime_problems(chart_default) == [
        "invfold-newdist-single-node: no such runtime (strategy 'newdist' needs it)",
        "invfold-newdist: no such runtime (strategy 'newdist' needs it)",
    ]


def test_a_runtime_whose_strategy_is_gone_is_reported(chart_default):
    kept = dict(STRATEGIES)
    try:
        del STRATEGIES["horovod"]
        problems = runtime_problems(chart_default)
    finally:  # the table back in its order (monkeypatch.delitem would put the key back last)
        STRATEGIES.clear()
        STRATEGIES.update(kept)
    assert problems == [
        "invfold-horovod: a runtime of no strategy in STRATEGIES",
        "invfold-horovod-single-node: a runtime of no strategy in STRATEGIES",
    ]


def test_a_runtime_image_that_is_not_built_is_reported(monkeypatch, chart_default):
    monkeypatch.setattr(sys.modules[__name__], "built_images", lambda: {"invfold-runtime", "invfold-horovod"})
    assert set(runtime_problems(chart_default)) == {
        "invfold-deepspeed: image invfold-deepspeed is not built by scripts/build_images.sh",
        "invfold-deepspeed-single-node: image invfold-deepspeed is not built by scripts/build_images.sh",
    }


def test_build_images_builds_the_images_it_names():
    """The parsing above reads build_images.sh as it is written (a rename there shows here)."""
    assert {
        "invfold-runtime",
        "invfold-mpi",
        "invfold-deepspeed",
        "invfold-horovod",
        "invfold-mlflow",
    } <= built_images()
