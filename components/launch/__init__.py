"""Start a training job behind one interface: local processes (`LocalLauncher`) or a Kubeflow
Trainer v2 TrainJob (`KubernetesLauncher`); `select_launcher()` picks by where the step runs.

The factory lives here, above both backends, so that `base.py` (the interface both subclass) never
imports its own implementations."""

import os
from collections.abc import Mapping

from invfold.components.launch.base import Launcher, LaunchError, LaunchResult, Resources, on_kubernetes


def select_launcher(env: Mapping[str, str] = os.environ, **cluster_options) -> Launcher:
    """The Kubernetes backend inside a pod, local processes elsewhere. cluster_options go to
    ClusterOptions (ignored locally)."""
    # Imported here: a local run never loads the Kubernetes client, a pod never starts torchrun.
    if on_kubernetes(env):
        from invfold.components.launch.kubernetes import KubernetesLauncher
        from invfold.components.launch.trainjob import ClusterOptions

        return KubernetesLauncher(ClusterOptions(**cluster_options))
    from invfold.components.launch.local import LocalLauncher

    return LocalLauncher()


__all__ = ["LaunchError", "Launcher", "LaunchResult", "Resources", "on_kubernetes", "select_launcher"]
