"""What a training run records in MLflow, the same from the pipeline's train step and from
`invfold train --tracking-uri`: its run gets every option; the run a person opens first (the
pipeline's run, or the ad-hoc run itself) gets the options that decide what the run was (preset,
init_from, lr, budget, processes, strategy), the data and its card; then the metric histories of
metrics.jsonl, the run's summary figures (each under one name) and summary.json.
"""

from __future__ import annotations

import json
import os
from typing import Any

from invfold.components.model.config import ModelConfig
from invfold.components.train.config import TrainConfig, preset_of
from invfold.options import fields_in

# TrainConfig fields that decide what a run was (marked on the fields); with the processes and the
# strategy they are the pipeline run's parameters.
DECIDING = fields_in(TrainConfig, "deciding")
# where the run's weights go: the registered version's source run is the training run, and
# `invfold design`, the design pipeline and compare read the checkpoint from there
MODEL_PT_ARTIFACT = "model_pt"
# summary.json figures of the whole run; the per-step ones (epoch, validation) are in the histories
SUMMARY_FIGURES = ("step", "elapsed_s", "residues", "residues_per_s")


def processes(nodes: int, procs_per_node: int, gpus_per_node: int = 0) -> dict[str, int]:
    return {
        "nodes": nodes,
        "procs_per_node": procs_per_node,
        "gpus_per_node": gpus_per_node,
        "processes": nodes * procs_per_node,
    }


def record_start(tracker, cfg: TrainConfig, prepared, data: str, workers: dict[str, int]) -> None:
    """Before training: options, datasets and the dataset card. A fine-tuned run's preset is
    the initial model's architecture, recorded by record_result from the weights that ran."""
    own = {**cfg.to_dict(), **workers, "data_digest": prepared.digest}
    deciding = {"strategy": cfg.strategy, **workers, **{k: getattr(cfg, k) for k in DECIDING}}
    if cfg.init_from:
        own.pop("preset")
        deciding.pop("preset")
    tracker.log_params(own)
    tracker.log_params({**deciding, "data": data, "data_digest": prepared.digest}, parent=True)
    for name, context in (("train", "training"), ("validation", "validation")):
        if name in prepared.datasets:
            for parent in (False, True):
                tracker.log_dataset(name, prepared.digest, data, context, prepared.index["datasets"][name], parent)
    for card in ("card.md", "card.json"):
        for parent in (False, True):
            tracker.log_artifact(str(prepared.root / card), "dataset", parent=parent)


def record_result(tracker, cfg: TrainConfig, out: str) -> dict[str, Any]:
    """After training (outputs in the local folder `out`): the preset that ran, metric histories,
    summary figures, summary.json and the weights (model.pt). Returns summary.json."""
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    if cfg.init_from:
        preset = {"preset": preset_that_ran(os.path.join(out, "model.pt"))}
        tracker.log_params(preset)
        tracker.log_params(preset, parent=True)
    tracker.log_metrics_file(os.path.join(out, "metrics.jsonl"))
    tracker.log_metrics({k: float(summary[k]) for k in SUMMARY_FIGURES if isinstance(summary.get(k), (int, float))})
    if summary.get("checkpoint_pruning", "on") != "on":  # the store refused deletes (checkpoint.Pruner)
        tracker.set_tags({"invfold.checkpoint_pruning": summary["checkpoint_pruning"]})
    tracker.log_artifact(os.path.join(out, "summary.json"))
    tracker.log_artifact(os.path.join(out, "model.pt"), MODEL_PT_ARTIFACT)
    return summary


def preset_that_ran(model_file: str) -> str:
    """The preset of the weights in model.pt (their config, no weights loaded into a network)."""
    import torch

    payload = torch.load(model_file, map_location="cpu", weights_only=True)
    return preset_of(ModelConfig.from_dict(payload["config"]))
