"""Prepared datasets for training tests: a small synthetic set (the bundled sample is tests/conftest.py's)."""

from __future__ import annotations

import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set


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
