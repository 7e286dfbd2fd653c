"""Small realistic batches for model tests: synthetic chains (ideal backbone geometry) read back
through the project's own chain-set parser and collated by the model's input contract."""

from __future__ import annotations

import json

import pytest
import torch
from invfold.components.protein.batch import collate
from invfold.components.protein.jsonl import parse_line
from invfold.components.protein.synthetic import SyntheticConfig, generate_chains


def synthetic_records(
    num: int,
    seed: int = 0,
    min_length: int = 20,
    max_length: int = 60,
    gap_fraction: float = 0.0,
    break_fraction: float = 0.0,
):
    cfg = SyntheticConfig(
        num_chains=num,
        seed=seed,
        min_length=min_length,
        max_length=max_length,
        median_length=(min_length + max_length) / 2,
        gap_fraction=gap_fraction,
        break_fraction=break_fraction,
        family_size=1.0,
    )
    return [
        parse_line(json.dumps(entry).encode(), "synthetic", i + 1) for i, (entry, _) in enumerate(generate_chains(cfg))
    ]


@pytest.fixture(scope="session")
def records():
    return synthetic_records(3, seed=1)


@pytest.fixture()
def batch(records):
    return collate(records)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    torch.set_num_threads(1)
