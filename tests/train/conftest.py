"""Prepared datasets for training tests (the bundled real sample; a small synthetic set) and a
helper that runs a real multi-process job through the same launcher as `invfold train`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set
from invfold.components.train.config import TrainConfig
from invfold.components.train.launch import launch_local

from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS


@pytest.fixture(scope="session")
def sample_prepared(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("sample") / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), output=str(out)))
    return str(out)


@pytest.fixture(scope="session")
def synthetic_prepared(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("synthetic")
    written = write_synthetic_set(
        folder,
        SyntheticConfig(
            num_chains=60,
            seed=3,
            min_length=30,
            max_length=120,
            median_length=60,
            gap_fraction=0.3,
            break_fraction=0.2,
            split_fractions=(0.7, 0.15, 0.15),
        ),
    )
    out = folder / "prepared"
    run_prep(PrepConfig(input=str(written.chain_set), split_file=str(written.splits), output=str(out)))
    return str(out)


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
