"""Leak-free splits on real structures (the bundled sample's chains): CATH groups merged over every
topology a chain carries, held-out chains bounded in identity to train, subsets checked against
train, all of it reported in the card."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import open_prepared
from invfold.components.prep.split import best_hits, cath_topologies, merge_groups
from invfold.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "src" / "invfold" / "data" / "sample_chain_set.jsonl.gz"
SAMPLE_SPLITS = ROOT / "src" / "invfold" / "data" / "sample_chain_set_splits.json"
THRESHOLD = 0.4


@pytest.fixture(scope="module")
def sample_objects() -> list[dict]:
    with gzip.open(SAMPLE, "rt") as fh:
        return [json.loads(line) for line in fh][:80]


def _write(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


def _split_of(prepared) -> dict[str, str]:
    return {r.name: split for split in ("train", "validation", "test") for r in prepared.open(split)}


def test_union_find_merges_chains_that_share_any_topology():
    labels = {
        "a": ("1.10.1",),
        "b": ("1.10.1", "2.30.4"),  # multi-domain: links a and c
        "c": ("2.30.4",),
        "d": ("3.40.5",),
        "e": ("3.40.5", "3.40.5"),
    }
    groups = merge_groups(labels)
    assert groups["a"] == groups["b"] == groups["c"] != groups["d"] == groups["e"]
    assert cath_topologies(("1.10.1.10", "2.30.4.1", "1.10.1.20")) == ("1.10.1", "2.30.4")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cath_split_keeps_every_shared_topology_on_one_side(tmp_path, sample_objects, seed):
    # Labels that follow the chain's position, not its sequence; every third chain carries a second
    # topology: its first topology's group and the next one must end up on one side.
    objects = []
    for i, o in enumerate(sample_objects):
        group = i // 4
        cath = [f"1.{group}.1.1"] + ([f"1.{group + 1}.1.7"] if i % 12 == 0 else [])
        objects.append({**o, "CATH": cath})
    path = _write(tmp_path / "set.jsonl", objects)
    result = run_prep(PrepConfig(input=str(path), out=str(tmp_path / "out"), seed=seed, identity_tool="kmer"))
    prepared = open_prepared(tmp_path / "out")
    owner: dict[str, str] = {}
    for name, split in _split_of(prepared).items():
        for topology in cath_topologies(next(o["CATH"] for o in objects if o["name"] == name)):
            assert owner.setdefault(topology, split) == split, f"topology {topology} in {owner[topology]} and {split}"
    split = result.card["split"]
    assert split["method"] == "cath"
    assert split["groups"] < len({o["CATH"][0] for o in objects})  # merged
    assert {s: o["topologies"] for s, o in split["topology_overlap"].items()} == {"test": 0, "validation": 0}
    assert "CATH topologies shared by train and test: 0" in (tmp_path / "out" / "card.md").read_text()


@pytest.mark.parametrize("tool", ["mmseqs", "kmer"])
def test_held_out_chains_similar_to_train_are_dropped_and_counted(tmp_path, sample_objects, tool):
    # Topology labels that ignore homology (the sample has homologous chains, e.g. trypsins): the
    # grouping alone leaks, the identity bound removes the leaking held-out chains.
    objects = [{**o, "CATH": [f"1.{i % 20}.1.1"]} for i, o in enumerate(sample_objects)]
    path = _write(tmp_path / "set.jsonl", objects)
    result = run_prep(
        PrepConfig(input=str(path), out=str(tmp_path / "out"), identity_tool=tool, identity_threshold=THRESHOLD)
    )
    bound = result.card["split"]["identity_bound"]
    dropped = bound["dropped"]["validation"] + bound["dropped"]["test"]
    assert dropped > 0 and bound["examples"][0]["identity"] >= THRESHOLD
    assert result.card["dropped"]["similar_to_train"] == dropped
    assert result.counts["read"] == result.counts["kept"] + result.counts["skipped"]
    prepared = open_prepared(tmp_path / "out")
    seqs = {o["name"]: o["seq"] for o in objects}
    splits = _split_of(prepared)
    train = {n: seqs[n] for n, s in splits.items() if s == "train"}
    held_out = {n: seqs[n] for n, s in splits.items() if s != "train"}
    assert held_out and all(h.identity < THRESHOLD for h in best_hits(held_out, train, tool).values())
    assert result.card["split"]["highest_train_test_identity"]["identity"] < THRESHOLD
    assert f"test {bound['dropped']['test']}." in (tmp_path / "out" / "card.md").read_text()


def test_subsets_are_checked_against_train(tmp_path):
    splits = json.loads(SAMPLE_SPLITS.read_text())
    # an evaluation list holding two train chains and two test chains
    subset = tmp_path / "test_split_external.json"
    subset.write_text(json.dumps({"test": splits["train"][:2] + splits["test"][:2]}))
    result = run_prep(
        PrepConfig(
            input=str(SAMPLE),
            out=str(tmp_path / "out"),
            split_file=str(SAMPLE_SPLITS),
            subset_files=[str(subset)],
            check_identity=True,
            identity_tool="mmseqs",
        )
    )
    overlap = result.card["split"]["subset_overlap"]["external"]
    assert overlap["chains"] == 4 and overlap["in_train"] == 2
    assert set(splits["train"][:2]) <= set(overlap["examples"])
    # the sample's split is cluster-disjoint at 40% identity with 80% coverage; over the shorter chain's
    # length a test chain may still align above the threshold: whatever is found is counted
    assert 0 <= overlap["above_threshold"] <= 2
    assert "| external | 4 | 2 |" in (tmp_path / "out" / "card.md").read_text()


def test_an_external_list_prepared_on_its_own_is_checked_against_a_training_set(tmp_path, sample_objects):
    """A TS50-style JSON list prepared as a test-only set, checked against the train split of the
    sample's own prepared folder (the data a model was trained on)."""
    splits = json.loads(SAMPLE_SPLITS.read_text())
    reference = run_prep(PrepConfig(input=str(SAMPLE), out=str(tmp_path / "train"), split_file=str(SAMPLE_SPLITS)))
    by_name = {o["name"]: o for o in sample_objects}
    train_names = [n for n in splits["train"] if n in by_name][:3]
    test_names = [n for n in splits["test"] if n in by_name][:3]
    assert len(train_names) == 3 and len(test_names) == 3
    copy = {**by_name[train_names[2]], "name": "copy.A"}  # a train chain under another name
    entries = [by_name[n] for n in train_names[:2] + test_names] + [copy]
    entries = [{"name": o["name"], "seq": o["seq"], "coords": o["coords"]} for o in entries]
    external = tmp_path / "ts50_like.json"
    external.write_text(json.dumps(entries))
    names = [e["name"] for e in entries]
    split_file = tmp_path / "external_splits.json"
    split_file.write_text(json.dumps({"train": [], "validation": [], "test": names}))

    result = run_prep(
        PrepConfig(
            input=str(external),
            out=str(tmp_path / "external"),
            split_file=str(split_file),
            check_against=str(tmp_path / "train"),
        )
    )
    checked = result.card["split"]["external_overlap"]
    assert checked["reference_digest"] == reference.digest and checked["train_chains"] == len(splits["train"])
    overlap = checked["datasets"]["test"]
    assert overlap["chains"] == 6 and overlap["in_train"] == 2  # by name
    assert overlap["above_threshold"] >= 1 and "copy.A" in overlap["examples"]  # by sequence
    assert overlap["highest_identity"]["identity"] == pytest.approx(1.0)
    assert set(checked["datasets"]) == {"test"}  # the empty validation split has nothing to check
    assert (
        f"| test | 6 | 2 | {overlap['above_threshold']} (>= 0.4) |" in (tmp_path / "external" / "card.md").read_text()
    )

    # the external set has no train chains: checking against it is a clear error, before any reading
    with pytest.raises(InputError, match="datasets.train.*a prepared folder with train chains"):
        run_prep(PrepConfig(input=str(SAMPLE), out=str(tmp_path / "x"), check_against=str(tmp_path / "external")))
    assert not (tmp_path / "x").exists()
