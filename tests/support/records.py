"""Synthetic chains (ideal backbone geometry) read back through the project's own chain-set parser."""

from __future__ import annotations

import json

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
