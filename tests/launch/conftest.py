from __future__ import annotations

import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS


@pytest.fixture(scope="session")
def prepared_sample(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("launch-sample") / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), out=str(out)))
    return str(out)
