"""Distributed strategies: one `StrategySpec` record each, and one `Strategy` class each (base.py).

Everything that differs between ddp, horovod and deepspeed outside their classes is in
`STRATEGIES`, read by TrainConfig (choices, ZeRO, checkpoint storage) and so by the CLIs and the
pipeline's flags, by the local launcher (launch/processes.py), by distributed.py (who sets up the
process group, with which env) and by the TrainJob builder (launch/trainjob.py: runtime, replicated
jobs, command). Adding a strategy = one record here + one Strategy class (+ its runtime for
clusters in charts/invfold/templates/runtimes.yaml, then `make generate`, whose
scripts/generate_k8s_base.py rewrites the generated k8s/base/runtimes.yaml from it). Importing this
module is light: a strategy's class, and with it Horovod or DeepSpeed, is imported only when that
strategy is chosen."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Literal

from invfold.errors import ConfigError


@dataclass(frozen=True)
class StrategySpec:
    """What one strategy needs from everything around its class.

    strategy_class: "module:Class", the module relative to this package.
    local_launchers: what may start it on one machine (`invfold train --launcher`); the first is
        the default.
    cluster_launcher: what the TrainJob runs: torchrun (Trainer's torch runtime sets PET_*) or
        mpirun (the MPI runtimes' launcher pod, with the hostfile Trainer writes).
    replicated_jobs: the replicated jobs of its runtime `invfold-<name>` (the chart's
        templates/runtimes.yaml), every one patched alike (node selector, tolerations, workspace volume).
    process_group: who sets up the process group (distributed.py): torch.distributed, DeepSpeed's
        init_distributed (over torch.distributed), or Horovod's own.
    zero_stages: the DeepSpeed ZeRO stages it can run (0: none).
    remote_checkpoints: whether its checkpoints can go to object storage (an fsspec URI);
        False: local files only (a shared volume on clusters).
    cpu_env: environment defaults of every training process on CPU (the operator's values win).
    """

    name: str
    strategy_class: str
    local_launchers: tuple[str, ...]
    cluster_launcher: Literal["torchrun", "mpirun"]
    replicated_jobs: tuple[str, ...]
    process_group: Literal["torch", "deepspeed", "horovod"]
    zero_stages: tuple[int, ...] = (0,)
    remote_checkpoints: bool = True
    cpu_env: dict[str, str] = field(default_factory=dict)

    def load(self) -> type:
        """The Strategy class (imports its framework)."""
        module, _, cls = self.strategy_class.partition(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        StrategySpec(
            name="ddp",
            strategy_class="ddp:DDPStrategy",
            local_launchers=("torchrun",),
            cluster_launcher="torchrun",
            replicated_jobs=("node",),
            process_group="torch",
        ),
        StrategySpec(
            name="horovod",
            strategy_class="horovod:HorovodStrategy",
            local_launchers=("horovodrun", "mpirun"),
            cluster_launcher="mpirun",
            # Upstream's MPI runtimes list `node` first and start the launcher once the nodes are
            # Ready (kubeflow/trainer manifests/base/runtimes/deepspeed_distributed.yaml).
            replicated_jobs=("node", "launcher"),
            process_group="horovod",
            # Horovod's background thread negotiates every HOROVOD_CYCLE_TIME ms (upstream default
            # 1 ms, set in BackgroundThreadLoop of horovod/common/operations.cc), even with nothing
            # to reduce. On CPU it shares the core with the rank's compute thread; 20 ms cut the
            # 2-process step time of the `small` preset in bench/scaling_bench.py (bench/README.md).
            cpu_env={"HOROVOD_CYCLE_TIME": "20"},
        ),
        StrategySpec(
            name="deepspeed",
            strategy_class="deepspeed:DeepSpeedStrategy",
            local_launchers=("torchrun", "mpirun"),
            cluster_launcher="mpirun",
            replicated_jobs=("node", "launcher"),
            process_group="deepspeed",
            zero_stages=(0, 1, 2, 3),
            remote_checkpoints=False,
        ),
    )
}


def strategy_spec(name: str) -> StrategySpec:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; expected one of {tuple(STRATEGIES)}") from None


def local_launchers() -> tuple[str, ...]:
    """Every launcher some strategy can be started with on one machine."""
    return tuple(dict.fromkeys(name for spec in STRATEGIES.values() for name in spec.local_launchers))


def make_strategy(cfg, info):
    """The Strategy for cfg.strategy; heavy imports (horovod, deepspeed) only when chosen."""
    return strategy_spec(cfg.strategy).load()(cfg, info)
