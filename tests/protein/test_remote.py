"""Every format read from real servers on loopback: a static HTTP server and moto's S3 server."""

import gzip
import json

import pytest

from invfold.components.protein.errors import InputError
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.splits import read_split_file
from tests.support.builders import backbone, chain_dict, jsonl_line, pdb_text

pytest.importorskip("s3fs", reason="s3fs (dev extra) is needed for s3:// paths")


def files() -> dict[str, bytes]:
    pdb = pdb_text({"A": [("ALA", i + 1, " ", backbone(3)[i]) for i in range(3)]}).encode()
    return {
        "set/chain_set.jsonl.gz": gzip.compress((jsonl_line(chain_dict("a.A", "ACD")) + "\n" + "{broken\n").encode()),
        "set/chain_set_splits.json": json.dumps({"train": ["a.A"], "validation": [], "test": []}).encode(),
        "set/ts50.json": json.dumps([{"name": "t.A", "seq": "AC", "coords": backbone(2).tolist()}]).encode(),
        "pdbs/1abc.pdb": pdb,
        "pdbs/2xyz.pdb.gz": gzip.compress(pdb),
        "pdbs/notes.txt": b"ignored",
    }


def check(base: str) -> None:
    chain_set = list(read_protein_set(f"{base}/set/chain_set.jsonl.gz"))
    assert chain_set[0].name == "a.A" and chain_set[1].reason == "invalid_json"
    assert "chain_set.jsonl.gz:2" in chain_set[1].message
    assert [r.name for r in read_protein_set(f"{base}/set/ts50.json")] == ["t.A"]
    assert read_split_file(f"{base}/set/chain_set_splits.json").splits["train"] == ["a.A"]
    assert [r.name for r in read_protein_set(f"{base}/pdbs/1abc.pdb")] == ["1abc.A"]
    assert [r.name for r in read_protein_set(f"{base}/pdbs")] == ["1abc.A", "2xyz.A"]
    with pytest.raises(InputError, match="expected an existing file"):
        list(read_protein_set(f"{base}/set/missing.jsonl"))


def test_http(http_server):
    for name, data in files().items():
        (http_server.root / name).parent.mkdir(parents=True, exist_ok=True)
        (http_server.root / name).write_bytes(data)
    check(http_server.url)


def test_s3(s3_server):
    bucket = s3_server.new_bucket()
    for name, data in files().items():
        s3_server.put(bucket, name, data)
    check(f"s3://{bucket}")


def test_file_uri(tmp_path):
    for name, data in files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    check(f"file://{tmp_path}")
