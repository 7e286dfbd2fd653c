"""Property-based fuzzing of prep's reader: `open_prepared` and the
datasets it opens, on a real prepared folder (the shortest chains of the bundled sample, prepared
once), with its index.json, card.json or an Arrow file mutated (truncation, byte flips, nesting,
huge numbers, replaced values; tests/support/fuzz.py). The only allowed outcomes: records, or one
one-line InputError, under an address-space limit. Fixed, derandomized profile."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import open_prepared
from tests.support.fuzz import FUZZ, SAMPLE, check_outcomes, mutated, mutated_json

NAMES = ("index.json", "card.json", "train.arrow", "validation.arrow")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A real prepared folder of the 12 shortest sample chains (8 train, 2 validation, 2 test)."""
    root = tmp_path_factory.mktemp("prepared")
    lines = sorted(gzip.open(SAMPLE, "rb").read().splitlines(keepends=True), key=len)[:12]
    names = [json.loads(line)["name"] for line in lines]
    (root / "set.jsonl").write_bytes(b"".join(lines))
    (root / "splits.json").write_text(json.dumps({"train": names[:8], "validation": names[8:10], "test": names[10:]}))
    run_prep(PrepConfig(input=str(root / "set.jsonl"), out=str(root / "seed"), split_file=str(root / "splits.json")))
    return root


def _read_everything(root):
    data = open_prepared(root)
    assert isinstance(data.card, dict)
    records = []
    for name in data.datasets:
        dataset = data.open(name)
        assert len(dataset.lengths) == len(dataset)
        records.extend(dataset[i] for i in range(len(dataset)))
    return records


def _seed(prepared, name: str) -> bytes:
    return (prepared / "seed" / name).read_bytes()


@FUZZ
@given(name=st.sampled_from(NAMES), how=st.data())
@example(name="card.json", how=None)  # found by this test: a card that is not JSON was a raw JSONDecodeError
def test_a_damaged_prepared_folder(prepared, name, how):
    work = prepared / "work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(prepared / "seed", work)
    seed = _seed(prepared, name)
    if how is None:
        data = seed[: len(seed) // 2]
    elif name.endswith(".json") and how.draw(st.booleans()):
        data = json.dumps(how.draw(mutated_json(json.loads(seed)))).encode()
    else:
        data = how.draw(mutated(seed))
    (work / name).write_bytes(data)
    check_outcomes(lambda: _read_everything(work))


def test_the_seed_folder_reads_whole(prepared):
    assert len(check_outcomes(lambda: _read_everything(prepared / "seed"))) == 12
