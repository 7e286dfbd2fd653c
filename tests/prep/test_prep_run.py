"""run_prep end to end: synthetic, bundled sample and real sets; determinism; each split method;
the Arrow datasets read back through open_prepared, locally and over HTTP."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import open_prepared
from invfold.components.prep.split import resolve_tool
from invfold.components.protein.errors import InputError
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.synthetic import SyntheticConfig, generate_chains, write_synthetic_set
from tests.support.corpus import good_entries, line, write_lines, write_splits

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "src" / "invfold" / "data" / "sample_chain_set.jsonl.gz"
SAMPLE_SPLITS = ROOT / "src" / "invfold" / "data" / "sample_chain_set_splits.json"
REAL = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return write_synthetic_set(
        tmp_path_factory.mktemp("synthetic"),
        SyntheticConfig(num_chains=120, seed=7, family_size=3.0, median_length=120),
    )


def _prep(tmp_path, input, out="out", **kw) -> tuple:
    cfg = PrepConfig(input=str(input), out=str(tmp_path / out), **kw)
    return run_prep(cfg), open_prepared(tmp_path / out)


def _names(prepared, dataset) -> list[str]:
    return [r.name for r in prepared.open(dataset)]


def test_split_file_round_trip(tmp_path, synthetic):
    result, prepared = _prep(tmp_path, synthetic.chain_set, split_file=synthetic.splits, batch_rows=16)
    splits = json.loads(synthetic.splits.read_text())
    assert result.counts == {"read": 120, "kept": 120, "skipped": 0, "reader_skipped": 0, "filtered": 0}
    originals = {r.name: r for r in read_chain_set(synthetic.chain_set)}
    for split in ("train", "validation", "test"):
        dataset = prepared.open(split)
        assert _names(prepared, split) == [n for n in originals if n in set(splits[split])]
        assert dataset.lengths.dtype == np.int32
        assert dataset.lengths.tolist() == [len(originals[n].seq) for n in _names(prepared, split)]
        assert prepared.index["datasets"][split]["lengths"] == dataset.lengths.tolist()
    record = prepared.open("train")[-1]
    original = originals[record.name]
    np.testing.assert_array_equal(record.coords, original.coords)  # NaN-aware
    np.testing.assert_array_equal(record.mask, original.mask)
    np.testing.assert_array_equal(record.residue_index, original.residue_index)
    assert record.seq == original.seq and record.cath == original.cath
    assert prepared.digest == result.digest == prepared.card["digest"]
    md = (tmp_path / "out" / "card.md").read_text()
    assert "Read 120 = kept 120 + skipped 0" in md and result.digest in md
    kept = prepared.card["kept"]
    assert sum(b["chains"] for b in kept["length"]["histogram"]) == 120
    assert abs(sum(kept["composition"].values()) - 1.0) < 1e-3
    assert 0 < kept["missing_coordinate_rate"] < 0.1


def test_filters_count_every_drop(tmp_path):
    good = good_entries(9)
    long_entry = next(
        generate_chains(
            SyntheticConfig(num_chains=1, min_length=150, max_length=200, gap_fraction=0.0, break_fraction=0.0)
        )
    )[0]
    long_entry["name"] = "9lng.A"
    path = write_lines(tmp_path / "set.jsonl", [line(e) for e in good] + [line(long_entry)])
    names = [e["name"] for e in good]
    splits = write_splits(tmp_path / "splits.json", train=names[:6] + [long_entry["name"]], test=names[6:8])
    result, prepared = _prep(
        tmp_path,
        path,
        split_file=splits,
        max_length=149,
        min_length=len(min(good, key=lambda e: len(e["seq"]))["seq"]) + 1,
    )
    dropped = result.card["dropped"]
    assert dropped["too_long"] == 1 and dropped["not_in_split_file"] == 1 and dropped["too_short"] >= 1
    assert result.counts["read"] == 10 == result.counts["kept"] + result.counts["skipped"]
    assert result.counts["filtered"] == sum(dropped.values())


def test_two_runs_are_byte_identical(tmp_path, synthetic):
    first, _ = _prep(tmp_path, synthetic.chain_set, out="a", batch_rows=7, identity_tool="kmer")
    second, _ = _prep(tmp_path, synthetic.chain_set, out="b", batch_rows=7, identity_tool="kmer")
    assert first.digest == second.digest
    for name in ("train.arrow", "validation.arrow", "test.arrow", "index.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    third, _ = _prep(tmp_path, synthetic.chain_set, out="c", batch_rows=7, identity_tool="kmer", seed=1)
    assert third.digest != first.digest  # another seed, another split


def _assert_disjoint_groups(prepared, key):
    owner = {}
    for split in ("train", "validation", "test"):
        for record in prepared.open(split):
            group = key(record)
            assert owner.setdefault(group, split) == split, f"group {group} in {owner[group]} and {split}"
    assert all(len(prepared.open(s)) for s in ("train", "validation", "test"))


def test_split_by_cath_topology(tmp_path, synthetic):
    result, prepared = _prep(tmp_path, synthetic.chain_set, identity_tool="kmer")
    assert result.card["split"]["method"] == "cath"
    _assert_disjoint_groups(prepared, lambda r: ".".join(r.cath[0].split(".")[:3]))
    assert result.card["split"]["highest_train_test_identity"]["identity"] < 0.4


def test_split_by_cluster_field(tmp_path):
    written = write_synthetic_set(
        tmp_path / "in", SyntheticConfig(num_chains=40, seed=2, with_cath=False, with_cluster=True, median_length=80)
    )
    result, prepared = _prep(tmp_path, written.chain_set, identity_tool="kmer")
    assert result.card["split"]["method"] == "cluster"
    _assert_disjoint_groups(prepared, lambda r: r.cluster)


@pytest.mark.parametrize("tool", ["mmseqs", "kmer"])
def test_split_by_sequence_identity(tmp_path, tool):
    if tool == "mmseqs":
        assert resolve_tool("auto") == "mmseqs", "MMseqs2 must be installed (Debian package mmseqs2)"
    written = write_synthetic_set(
        tmp_path / "in",
        SyntheticConfig(
            num_chains=60,
            seed=4,
            with_cath=False,
            with_cluster=True,
            family_size=3.0,
            median_length=150,
            min_length=100,
        ),
    )
    result, prepared = _prep(tmp_path, written.chain_set, identity_tool=tool, split_by="identity")
    split = result.card["split"]
    assert (split["method"], split["tool"]) == ("identity", tool)
    # the generator's families (its `cluster` field here) share over about 50% identity: clustering at
    # 40% must keep each family on one side (chains of 100+ residues: the k-mer estimate needs length)
    _assert_disjoint_groups(prepared, lambda r: r.cluster)
    hit = split["highest_train_test_identity"]
    assert hit["tool"] == tool and hit["identity"] < 0.5


def test_split_file_naming_a_chain_twice_is_an_error(tmp_path, synthetic):
    splits = json.loads(synthetic.splits.read_text())
    splits["validation"].append(splits["train"][0])
    bad = tmp_path / "chain_set_splits.json"
    bad.write_text(json.dumps(splits))
    with pytest.raises(InputError, match="in both 'train' and 'validation'"):
        _prep(tmp_path, synthetic.chain_set, split_file=bad)


def test_subset_files_become_datasets(tmp_path, synthetic):
    splits = json.loads(synthetic.splits.read_text())
    subset = tmp_path / "test_split_L100.json"
    subset.write_text(json.dumps({"test": splits["test"][:3]}))
    result, prepared = _prep(tmp_path, synthetic.chain_set, split_file=synthetic.splits, subset_files=[subset])
    assert prepared.datasets == ["train", "validation", "test", "L100"]
    assert _names(prepared, "L100") == [n for n in _names(prepared, "test") if n in splits["test"][:3]]
    assert result.card["split"]["subset_members_by_split"] == {"L100": {"test": 3}}


def test_open_prepared_over_http_uses_a_verified_cache(tmp_path, synthetic, http_server):
    result, _ = _prep(tmp_path, synthetic.chain_set, split_file=synthetic.splits)
    shutil.copytree(tmp_path / "out", http_server.root / "prepared")
    remote = open_prepared(f"{http_server.url}/prepared", cache_dir=tmp_path / "cache")
    assert remote.digest == result.digest
    assert remote.root == tmp_path / "cache" / result.digest.split(":")[1]
    assert [r.name for r in remote.open("test")] == [r.name for r in open_prepared(tmp_path / "out").open("test")]


def test_bundled_sample(tmp_path):
    assert SAMPLE.exists() and SAMPLE_SPLITS.exists(), "the bundled sample must ship with the package"
    result, prepared = _prep(tmp_path, SAMPLE, split_file=SAMPLE_SPLITS, check_identity=True, identity_tool="kmer")
    splits = json.loads(SAMPLE_SPLITS.read_text())
    assert result.counts["read"] == result.counts["kept"] + result.counts["skipped"]
    assert {s: len(prepared.open(s)) for s in ("train", "validation", "test")} == {
        s: len(splits[s]) for s in ("train", "validation", "test")
    }
    assert "highest_train_test_identity" in result.card["split"]


@pytest.mark.skipif(
    not (REAL / "real_chain_set.jsonl.gz").exists(), reason="../shared/data (833 real chains) is absent on this machine"
)
def test_real_chains(tmp_path):
    result, prepared = _prep(tmp_path, REAL / "real_chain_set.jsonl.gz", split_file=REAL / "real_chain_set_splits.json")
    assert result.counts["read"] == 833 == result.counts["kept"] + result.counts["skipped"]
    assert {s: len(prepared.open(s)) for s in ("train", "validation", "test")} == {
        "train": 681,
        "validation": 85,
        "test": 67,
    }
    made, _ = _prep(tmp_path, REAL / "real_chain_set.jsonl.gz", out="made", identity_tool="kmer")
    assert made.card["split"]["method"] == "cluster"


def test_remote_output_on_s3(tmp_path, synthetic, s3_server):
    uri = f"s3://{s3_server.new_bucket()}/prepared"
    result = run_prep(
        PrepConfig(input=str(synthetic.chain_set), out=uri, split_file=str(synthetic.splits), identity_tool="kmer")
    )
    prepared = open_prepared(uri, cache_dir=tmp_path / "cache")
    assert prepared.digest == result.digest
    assert len(prepared.open("train")) == result.datasets["train"]
    again = open_prepared(uri, cache_dir=tmp_path / "cache")  # served from the cache
    assert again.root == prepared.root
