"""Start a training job behind one interface: local processes (`LocalLauncher`) or a Kubeflow
Trainer v2 TrainJob (`KubernetesLauncher`); `select_launcher()` picks by where the step runs."""

from invfold.components.launch.base import (
    Launcher,
    LaunchError,
    LaunchResult,
    Resources,
    on_kubernetes,
    select_launcher,
)

__all__ = ["LaunchError", "Launcher", "LaunchResult", "Resources", "on_kubernetes", "select_launcher"]
