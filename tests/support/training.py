"""Training-test helpers: a tiny fast config, a real multi-process job through the same launcher
as `invfold train`, and readers of its outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from invfold.components.launch.processes import launch_local
from invfold.components.train.config import TrainConfig


def tiny_config(data: str, out: Path, **overrides) -> TrainConfig:
    """A few fast steps of the tiny model that still visibly learn."""
    options = dict(
        data=data,
        out=str(out),
        preset="tiny",
        max_steps=8,
        tokens_per_batch=1500,
        lr=5e-3,
        warmup_steps=1,
        checkpoint_every=4,
        validate_every=4,
        log_every=1,
        threads=1,
        dist_timeout_s=120.0,
    )
    options.update(overrides)
    return TrainConfig(**options)


def read_metrics(out: Path, split: str = "train") -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def run_job(cfg: TrainConfig, nproc: int = 2, launcher: str | None = None) -> int:
    return launch_local(cfg, nproc, launcher=launcher)


# the three training strategies as the multi-process tests parametrize them
STRATEGIES = [
    pytest.param("ddp", {}, id="ddp"),
    pytest.param("horovod", {}, id="horovod"),
    pytest.param("deepspeed", {"zero_stage": 2}, id="deepspeed-zero2"),
]
