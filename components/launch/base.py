"""One interface for starting a training job: local processes or a Kubeflow Trainer TrainJob.

The train step asks `select_launcher()` (in the package's `__init__`) for the backend that fits where it runs (inside a
Kubernetes pod: a TrainJob; anywhere else: processes on this machine) and calls `run()`; both
return when the job has ended and raise `LaunchError` with the job's own reason when it failed.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

from invfold.components.train.config import TrainConfig
from invfold.errors import ConfigError, InvfoldError
from invfold.options import check_values, option


class LaunchError(InvfoldError, RuntimeError):
    """The training job failed; the message carries the job's own reason."""


@dataclass
class Resources:
    """How many machines and processes a job gets. nodes: training nodes; procs_per_node:
    processes per node (on a GPU node, one per GPU); gpus_per_node: 0 trains on CPU."""

    nodes: int = option(1, "training nodes", min=1, cli=False)
    procs_per_node: int = option(2, "processes per node", min=1, cli=False)
    gpus_per_node: int = option(0, "GPUs per node (0: CPU)", min=0, cli=False)

    def __post_init__(self) -> None:
        check_values(self)
        if self.gpus_per_node and self.procs_per_node > self.gpus_per_node:
            raise ConfigError(
                f"Resources: {self.procs_per_node} processes per node need as many GPUs, "
                f"got gpus_per_node={self.gpus_per_node}"
            )

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node


@dataclass
class LaunchResult:
    """Where the finished job left its outputs (a local folder) and what ran it."""

    out: str
    backend: str
    job_name: str | None = None
    details: dict = field(default_factory=dict)


class Launcher(ABC):
    name: str

    @abstractmethod
    def run(self, cfg: TrainConfig, resources: Resources) -> LaunchResult:
        """Run the job to its end; raise LaunchError with the reason when it fails."""


def on_kubernetes(env: Mapping[str, str] = os.environ) -> bool:
    """True inside a pod (the kubelet sets KUBERNETES_SERVICE_HOST in every container)."""
    return bool(env.get("KUBERNETES_SERVICE_HOST"))
