"""Local backend: the training processes of launch/processes.py on this machine."""

from __future__ import annotations

import logging

from invfold.components.launch.base import Launcher, LaunchError, LaunchResult, Resources
from invfold.components.launch.processes import launch_local
from invfold.components.train.config import TrainConfig

log = logging.getLogger(__name__)


class LocalLauncher(Launcher):
    name = "local"

    def run(self, cfg: TrainConfig, resources: Resources) -> LaunchResult:
        if resources.gpus_per_node:
            log.warning(
                "local launcher: %d GPUs per node requested; the processes use what this machine has",
                resources.gpus_per_node,
            )
        if resources.nodes > 1:
            log.info(
                "local launcher: %d nodes x %d processes run as %d processes on this machine",
                resources.nodes,
                resources.procs_per_node,
                resources.world_size,
            )
        code = launch_local(cfg, resources.world_size)
        if code != 0:
            raise LaunchError(
                f"local {cfg.strategy} job with {resources.world_size} processes exited "
                f"with status {code} (its log is above; outputs in {cfg.out})"
            )
        return LaunchResult(out=cfg.out, backend=self.name, details={"processes": resources.world_size})
