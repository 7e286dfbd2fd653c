"""Prep with complexes: multi-chain records of the bundled sample through the Arrow shards, and
splits that never separate the chains of one entry."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import open_prepared
from invfold.components.prep.split import merge_entries
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import ChainRecord

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "src" / "invfold" / "data" / "sample_chain_set.jsonl.gz"
SAMPLE_SPLITS = ROOT / "src" / "invfold" / "data" / "sample_chain_set_splits.json"


def _rows(prepared) -> dict[str, tuple[str, ChainRecord]]:
    out = {}
    for split in ("train", "validation", "test"):
        for record in prepared.open(split):
            out[record.name] = (split, record)
    return out


def test_merge_entries_joins_the_groups_of_one_entry_only():
    groups = {"1abc.A": "cluster:x", "1abc.B": "cluster:y", "2xyz.A": "cluster:y", "3def.A": "cluster:z"}
    merged = merge_entries(groups)
    assert merged["1abc.A"] == merged["1abc.B"] == merged["2xyz.A"] == "cluster:x"
    assert merged["3def.A"] == "cluster:z"


@pytest.fixture(scope="module")
def complexes(tmp_path_factory):
    out = tmp_path_factory.mktemp("complexes")
    cfg = PrepConfig(input=str(SAMPLE), out=str(out), complexes=True, max_length=1000, split_fractions=(1.0, 0.0, 0.0))
    return run_prep(cfg), open_prepared(out)


def test_complex_records_round_trip_through_the_shards(complexes):
    result, prepared = complexes
    rows = _rows(prepared)
    native = {r.name: r for r in read_chain_set(SAMPLE, complexes=True) if isinstance(r, ChainRecord)}
    for entry, chains in {"1BD2": 4, "3KPR": 3, "7CFN": 4, "6WG6": 2, "1tii": 2}.items():
        _, record = rows[entry]
        assert record.is_complex and len(record.chain_names) == chains
        expected = native[entry]
        assert record.chain_names == expected.chain_names and record.seq == expected.seq
        np.testing.assert_array_equal(record.chain_index, expected.chain_index)
        np.testing.assert_array_equal(record.residue_index, expected.residue_index)
        np.testing.assert_array_equal(record.coords, expected.coords)
        assert not any(f"{entry}.{c}" in rows for c in record.chain_names)
    single = next(r for _, r in rows.values() if not r.is_complex)
    assert single.chain_index is None and single.chain_names == ()
    # the 71-chain ribosome is longer than max_length as a whole: one drop, counted
    assert result.card["dropped"].get("too_long", 0) >= 1
    assert result.counts["read"] == result.counts["kept"] + result.counts["skipped"]


def test_own_split_keeps_the_chains_of_an_entry_together(tmp_path):
    # the sample's cluster ids put chains of one entry in different clusters (1BD2.D is in 3KPR.D's)
    result = run_prep(PrepConfig(input=str(SAMPLE), out=str(tmp_path / "out"), identity_tool="kmer", seed=3))
    assert result.card["split"]["method"] == "cluster"
    by_entry = defaultdict(set)
    for name, (split, _) in _rows(open_prepared(tmp_path / "out")).items():
        by_entry[name.rsplit(".", 1)[0]].add(split)
    assert {e: s for e, s in by_entry.items() if len(s) > 1} == {}
    assert len(by_entry["1BD2"]) == 1 and len(by_entry["7CFN"]) == 1


def test_split_file_naming_chains_places_complexes(tmp_path):
    splits = json.loads(SAMPLE_SPLITS.read_text())
    where = {n: s for s in ("train", "validation", "test") for n in splits[s]}
    result = run_prep(
        PrepConfig(
            input=str(SAMPLE),
            out=str(tmp_path / "out"),
            split_file=str(SAMPLE_SPLITS),
            complexes=True,
            max_length=1000,
        )
    )
    rows = _rows(open_prepared(tmp_path / "out"))
    assert rows["1BD2"][0] == where["1BD2.A"] and rows["3KPR"][0] == where["3KPR.A"]
    # the sample's split file names 1tii.A train and 1tii.D validation: that complex cannot be placed
    assert "1tii" not in rows and result.card["dropped"]["split_conflict"] >= 1
    assert result.card["split"]["absent_from_set"] == {"train": 0, "validation": 0, "test": 0}


def test_pipeline_prep_step_passes_complexes(tmp_path):
    """The pipeline's `complexes` parameter reaches prep (pipelines/pipeline.py -> prep_op -> prep_step)."""
    from invfold.components.prep.step import prep_step

    out, card = tmp_path / "prepared", tmp_path / "card.md"
    meta = prep_step(str(SAMPLE), str(SAMPLE_SPLITS), "sha256:test", str(out), str(card), complexes=True)
    rows = _rows(open_prepared(out))
    made = [r for _, r in rows.values() if r.is_complex]
    assert made and not any(f"{r.name}.{c}" in rows for r in made for c in r.chain_names)
    assert sum(meta["datasets"].values()) == len(rows) and card.read_text().strip()
