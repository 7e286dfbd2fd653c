"""Small realistic batches for model tests, collated by the model's input contract."""

from __future__ import annotations

import pytest
import torch

from invfold.components.protein.batch import collate
from tests.support.records import synthetic_records


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
