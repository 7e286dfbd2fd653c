"""The StrategySpec table as a table of cases: each row is what one strategy must be, checked
against the table and against every reader of it (config, CLI, local launcher, process-group
setup, TrainJob builder, the runtimes in k8s/). The last test adds a strategy with one record
and sees every reader take it."""

from __future__ import annotations

import argparse
import os
import re
import sys
import types
from pathlib import Path

import pytest
import torch
import yaml

from invfold.cli import build_parser
from invfold.components.launch import Resources
from invfold.components.launch.processes import LocalProcesses, launch_command
from invfold.components.launch.schema import validate
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob
from invfold.components.train import distributed
from invfold.components.train.config import TrainConfig
from invfold.components.train.strategies import STRATEGIES, StrategySpec, make_strategy, strategy_spec
from invfold.components.train.strategies.base import Strategy
from invfold.errors import ConfigError
from invfold.pipelines.parameters import pipeline_parameters
from tests.support.docs import code_spans, generated_files

ROOT = Path(__file__).resolve().parents[2]

# name, class, local launchers (default first), cluster command, replicated jobs, process group,
# ZeRO stages, checkpoints to object storage, CPU env
CASES = [
    ("ddp", "DDPStrategy", ("torchrun",), "torchrun", ("node",), "torch", (0,), True, {}),
    (
        "horovod",
        "HorovodStrategy",
        ("horovodrun", "mpirun"),
        "mpirun",
        ("node", "launcher"),
        "horovod",
        (0,),
        True,
        {"HOROVOD_CYCLE_TIME": "20"},
    ),
    (
        "deepspeed",
        "DeepSpeedStrategy",
        ("torchrun", "mpirun"),
        "mpirun",
        ("node", "launcher"),
        "deepspeed",
        (0, 1, 2, 3),
        False,
        {},
    ),
]
ROWS = [pytest.param(*case, id=case[0]) for case in CASES]
ALL_LAUNCHERS = ("torchrun", "horovodrun", "mpirun")


def test_the_table_has_exactly_the_rows():
    assert list(STRATEGIES) == [case[0] for case in CASES]


@pytest.mark.parametrize("name, cls, local, cluster, jobs, group, zero, remote, env", ROWS)
def test_the_record(name, cls, local, cluster, jobs, group, zero, remote, env):
    spec = strategy_spec(name)
    assert (spec.local_launchers, spec.cluster_launcher, spec.replicated_jobs) == (local, cluster, jobs)
    assert (spec.process_group, spec.zero_stages, spec.remote_checkpoints, spec.cpu_env) == (group, zero, remote, env)
    loaded = spec.load()
    assert loaded.__name__ == cls and issubclass(loaded, Strategy)


@pytest.mark.parametrize("name, cls, local, cluster, jobs, group, zero, remote, env", ROWS)
def test_the_config_takes_its_zero_stages_and_checkpoint_storage(
    name, cls, local, cluster, jobs, group, zero, remote, env
):
    for stage in (0, 1, 2, 3):
        if stage in zero:
            assert TrainConfig(data="d", out="o", max_steps=1, strategy=name, zero_stage=stage).zero_stage == stage
        else:
            with pytest.raises(ConfigError, match="needs strategy 'deepspeed'"):
                TrainConfig(data="d", out="o", max_steps=1, strategy=name, zero_stage=stage)
    make = lambda: TrainConfig(data="d", out="o", max_steps=1, strategy=name, checkpoint_dir="s3://b/c")  # noqa: E731
    if remote:
        assert make().checkpoint_dir == "s3://b/c"
    else:
        with pytest.raises(ConfigError, match="writes checkpoints as local files"):
            make()


@pytest.mark.parametrize("name, cls, local, cluster, jobs, group, zero, remote, env", ROWS)
def test_the_local_launcher_starts_it_with_its_launchers_only(
    name, cls, local, cluster, jobs, group, zero, remote, env
):
    cfg = TrainConfig(data="d", out="o", max_steps=1, strategy=name)
    default = launch_command(cfg, 2, "c.json")
    assert any(local[0] in part for part in default[:3]) or (
        local[0] == "torchrun" and "torch.distributed.run" in default
    )
    for launcher in ALL_LAUNCHERS:
        if launcher in local:
            launch_command(cfg, 2, "c.json", launcher)
        else:
            with pytest.raises(ConfigError, match=f"cannot start strategy '{name}'"):
                launch_command(cfg, 2, "c.json", launcher)


@pytest.mark.parametrize("name, cls, local, cluster, jobs, group, zero, remote, env", ROWS)
def test_the_trainjob_uses_its_runtime_command_and_replicated_jobs(
    name, cls, local, cluster, jobs, group, zero, remote, env
):
    cfg = TrainConfig(data="s3://b/p", out="/tmp/o", checkpoint_dir="/workspace/c", strategy=name, max_steps=1)
    job = build_trainjob(
        f"invfold-{name}-x",
        cfg,
        Resources(nodes=2, procs_per_node=2),
        ClusterOptions(storage_root="s3://b/r", node_selector={"pool": "cpu"}),
        "s3://b/r/x",
        environ={},
    )
    validate(job)
    assert job["spec"]["runtimeRef"]["name"] == f"invfold-{name}"
    assert job["spec"]["trainer"]["command"] == [cluster]
    patched = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert tuple(r["name"] for r in patched) == jobs
    runtimes = {
        d["metadata"]["name"]: d for d in yaml.safe_load_all((ROOT / "k8s/base/runtimes.yaml").read_text()) if d
    }
    in_k8s = runtimes[f"invfold-{name}"]["spec"]["template"]["spec"]["replicatedJobs"]
    assert tuple(r["name"] for r in in_k8s) == jobs


ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "HOROVOD_CYCLE_TIME")


def _clean_env(monkeypatch, *extra: str) -> None:
    """Unset what setup() writes, and have it restored (or removed again) after the test."""
    for variable in (*ENV, *extra):
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)


def _fake_frameworks(monkeypatch, calls: list) -> None:
    """Stand-ins for the three process-group initialisers: this test checks which one is called
    with which env; tests/train/test_strategies.py runs the real ones on several processes."""
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **k: calls.append("torch"))
    deepspeed = types.SimpleNamespace(
        ops=types.SimpleNamespace(__compatible_ops__={}), init_distributed=lambda **k: calls.append("deepspeed")
    )
    hvd = types.SimpleNamespace(
        init=lambda: calls.append("horovod"),
        rank=lambda: 0,
        size=lambda: 1,
        local_rank=lambda: 0,
        gloo_enabled=lambda: True,
    )
    monkeypatch.setitem(sys.modules, "deepspeed", deepspeed)
    monkeypatch.setitem(sys.modules, "deepspeed.ops", deepspeed.ops)
    monkeypatch.setitem(sys.modules, "horovod", types.SimpleNamespace(torch=hvd))
    monkeypatch.setitem(sys.modules, "horovod.torch", hvd)


@pytest.mark.parametrize("name, cls, local, cluster, jobs, group, zero, remote, env", ROWS)
def test_distributed_sets_up_its_process_group_with_its_env(
    name, cls, local, cluster, jobs, group, zero, remote, env, monkeypatch
):
    calls: list = []
    _fake_frameworks(monkeypatch, calls)
    _clean_env(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    info = distributed.setup(name)
    assert calls == [group] and info.strategy == name
    assert {k: os.environ[k] for k in env} == env
    assert "HOROVOD_CYCLE_TIME" in os.environ if env else "HOROVOD_CYCLE_TIME" not in os.environ


def test_the_clis_offer_the_table():
    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for command in ("train", "run", "submit"):
        action = next(a for a in subparsers.choices[command]._actions if a.dest == "strategy")
        assert tuple(action.choices) == tuple(STRATEGIES), command
    launcher = next(a for a in subparsers.choices["train"]._actions if a.dest == "launcher")
    assert set(launcher.choices) == set(ALL_LAUNCHERS)
    # the pipeline's parameter is documented (KFP copies the docstring) with every strategy
    described = pipeline_parameters()["strategy"]["description"]
    assert all(name in described for name in STRATEGIES), described


def test_a_new_strategy_is_one_record(monkeypatch, tmp_path):
    spec = StrategySpec(
        name="toy",
        strategy_class="ddp:DDPStrategy",
        local_launchers=("mpirun",),
        cluster_launcher="torchrun",
        replicated_jobs=("node",),
        process_group="torch",
        zero_stages=(0, 3),
        cpu_env={"TOY_KNOB": "1"},
    )
    monkeypatch.setitem(STRATEGIES, "toy", spec)
    cfg = TrainConfig(data="d", out=str(tmp_path), max_steps=1, strategy="toy", zero_stage=3)
    assert launch_command(cfg, 2, "c.json")[0] == "mpirun"
    assert LocalProcesses(launcher="mpirun").launcher == "mpirun"
    job = build_trainjob("invfold-toy-x", cfg, Resources(), ClusterOptions(storage_root="s3://b/r"), "s3://b/r/x", {})
    assert job["spec"]["runtimeRef"]["name"] == "invfold-toy" and job["spec"]["trainer"]["command"] == ["torchrun"]
    args = build_parser().parse_args(["train", "--data", "d", "--out", "o", "--strategy", "toy", "--max-steps", "1"])
    assert args.strategy == "toy"
    calls: list = []
    _fake_frameworks(monkeypatch, calls)
    _clean_env(monkeypatch, "TOY_KNOB")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    info = distributed.setup("toy")
    assert calls == ["torch"] and os.environ["TOY_KNOB"] == "1"
    assert spec.load().__name__ == "DDPStrategy"

    class ToyStrategy:  # the one class a new strategy brings
        def __init__(self, cfg, info):
            self.cfg, self.info = cfg, info

    monkeypatch.setattr(StrategySpec, "load", lambda self: ToyStrategy if self.name == "toy" else None)
    made = make_strategy(cfg, info)
    assert isinstance(made, ToyStrategy) and made.cfg is cfg


def test_adding_a_strategy_sends_its_author_to_sources_not_to_generated_files():
    """The package docstring's recipe for a new strategy: every file it names exists, and a
    generated one (ARCHITECTURE.md's table) comes with its source and `make generate`."""
    from invfold.components.train import strategies

    recipe = re.search(r"Adding a strategy.*?\)\.", strategies.__doc__, re.DOTALL).group(0)
    named = re.findall(r"[\w.-]+(?:/[\w.-]+)+\.(?:py|yaml)", recipe)
    assert named and all((ROOT / name).exists() for name in named), named
    generated = generated_files()
    for name in named:
        if (ROOT / name) in generated:
            sources = code_spans(generated[ROOT / name]["source"])
            assert any(other.startswith(sources[0]) for other in named), f"{name}: name its source {sources[0]}"
            assert "make generate" in recipe, f"{name}: say how it is regenerated"
