"""Property-based fuzzing of every reader of components/protein (issue 23, "Beyond the list"):
chain-set lines (CATH and ProteinMPNN's multi-chain form, plain and gzipped, single chains and
complexes, default and strict), TS50 lists, split files, PDB and mmCIF files, each seeded with
real records of the bundled sample (tests/support/fuzz.py) and mutated by truncation, byte
flips, deep nesting, huge numbers, splices and replaced values. The only allowed outcomes are a
record, a counted skip or a one-line InputError, under an address-space limit. The profile is
fixed and derandomized (the same examples on every run)."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from invfold.components.protein.errors import InputError
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.splits import SplitFile, read_split_file
from invfold.components.protein.structure import read_structures
from invfold.components.protein.ts50 import read_ts50
from tests.support.fuzz import FUZZ, check_outcomes, memory_limit, mutated, mutated_json, real_lines
from tests.support.structures import write_structure

LINES = real_lines()
OBJECTS = [json.loads(line) for line in LINES]
CHAIN_SET = b"".join(LINES)


def _multiple_chains(objs: list[dict]) -> dict:
    """ProteinMPNN's parse_multiple_chains.py form of real chains (one entry, chains A, B, ...)."""
    entry = {"name": "multi", "num_of_chains": len(objs), "seq": ""}
    for cid, obj in zip("ABCDEFGH", objs, strict=False):
        entry[f"seq_chain_{cid}"] = obj["seq"]
        entry[f"coords_chain_{cid}"] = {f"{a}_chain_{cid}": obj["coords"][a] for a in ("N", "CA", "C", "O")}
        entry["seq"] += obj["seq"]
    return entry


MULTI = (json.dumps(_multiple_chains(OBJECTS[:2])) + "\n").encode()


def _ts50_entry(obj: dict) -> dict:
    residues = zip(*(obj["coords"][a] for a in ("N", "CA", "C", "O")), strict=True)
    return {"name": obj["name"], "seq": obj["seq"], "coords": [list(r) for r in residues]}


TS50 = json.dumps([_ts50_entry(o) for o in OBJECTS[:2]]).encode()
SPLITS = {"train": [OBJECTS[0]["name"]], "validation": [OBJECTS[1]["name"]], "test": ["x.A"], "cath_nodes": {}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _structure_texts() -> dict[str, bytes]:
    """The two seed chains as PDB and mmCIF text, written by gemmi (tests/support/structures.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.jsonl"
        path.write_bytes(LINES[0] + LINES[1])
        records = list(read_chain_set(path))
        for record, chain_id in zip(records, "AB", strict=True):  # distinct chain ids: two chains per file
            record.name = f"seed.{chain_id}"
        return {s: write_structure(Path(tmp) / f"seed{s}", records).read_bytes() for s in (".pdb", ".cif")}


STRUCTURES = _structure_texts()
# found by test_structure_files: a residue whose number field is blank (gemmi reads no number)
BLANK_NUMBER_PDB = (
    b"ATOM      1  N   THR A   1      16.885  14.078   3.427  1.00 20.00           N\n"
    b"ATOM      2  CA  THR A          16.938  12.834   4.234  1.00 20.00           C\n"
    b"ATOM      3  C   THR A   2      15.642  12.760   4.985  1.00 20.00           C\n"
)
# found by test_structure_files: a byte that is not UTF-8 in the chain-id column
NON_ASCII_CHAIN_PDB = BLANK_NUMBER_PDB.replace(b"THR A   1", b"THR \x80   1")
# found by test_structure_files: chain A, then B, then A again, read as a complex
CHAIN_TWICE_PDB = b"".join(
    f"ATOM  {n:5d}  {atom:<3} THR {cid}{num:4d}      {n:6.3f}  14.078   3.427  1.00 20.00  {atom[0]:>11}\n".encode()
    for n, (atom, cid, num) in enumerate([("N", "A", 1), ("CA", "A", 1), ("N", "B", 1), ("N", "A", 2)], 1)
)


def _write(folder, name: str, data: bytes, gz: bool = False):
    path = folder / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


@FUZZ
@given(
    data=st.one_of(mutated(CHAIN_SET), mutated(MULTI)), gz=st.booleans(), complexes=st.booleans(), strict=st.booleans()
)
@example(data=CHAIN_SET, gz=True, complexes=False, strict=True)
def test_chain_set_bytes(folder, data, gz, complexes, strict):
    path = _write(folder, "set.jsonl", data, gz)
    check_outcomes(lambda: read_chain_set(path, strict=strict, complexes=complexes))


@FUZZ
@given(obj=st.one_of(*(mutated_json(o) for o in [*OBJECTS, json.loads(MULTI)])), complexes=st.booleans())
@example(  # found by this test: a list where a coordinate should be (np.float32([]) is no error)
    obj={
        "name": "a.A",
        "seq": "A",
        "coords": {"N": [[[], 0, 0]], "CA": [[0, 0, 0]], "C": [[0, 0, 0]], "O": [[0, 0, 0]]},
    },
    complexes=False,
)
@example(  # a coordinate past float32 as a 401-digit integer: OverflowError, not TypeError/ValueError
    obj={
        "name": "a.A",
        "seq": "A",
        "coords": {"N": [[10**400, 0, 0]], "CA": [[0, 0, 0]], "C": [[0, 0, 0]], "O": [[0, 0, 0]]},
    },
    complexes=False,
)
def test_chain_set_values(folder, obj, complexes):
    line = json.dumps(obj).encode() + b"\n"
    path = _write(folder, "values.jsonl", LINES[0] + line)
    items = check_outcomes(lambda: read_chain_set(path, complexes=complexes))
    assert items, "the good first line is kept whatever the second holds"


@FUZZ
@given(data=mutated(TS50), gz=st.booleans())
@example(data=b"[" + b"9" * 5000 + b"]", gz=False)  # found by this test: an int past Python's digit limit
@example(data=TS50[:-1] + b",]", gz=True)  # a trailing comma, read entry by entry
def test_ts50_bytes(folder, data, gz):
    path = _write(folder, "list.json", data, gz)
    check_outcomes(lambda: read_ts50(path))


@FUZZ
@given(obj=mutated_json(json.loads(TS50)), strict=st.booleans())
def test_ts50_values(folder, obj, strict):
    path = _write(folder, "values.json", json.dumps(obj).encode())
    check_outcomes(lambda: read_ts50(path, strict=strict))


def _read_split(path):
    split = read_split_file(path)
    assert isinstance(split, SplitFile)
    for names in (*split.splits.values(), *split.subsets.values()):
        assert all(isinstance(n, str) for n in names)
    return []


@pytest.mark.filterwarnings("ignore:.*ignoring keys:UserWarning")  # unknown keys: a warning by design
@FUZZ
@given(data=st.one_of(mutated(json.dumps(SPLITS).encode()), mutated_json(SPLITS).map(lambda o: json.dumps(o).encode())))
def test_split_file(folder, data):
    path = _write(folder, "splits.json", data)
    check_outcomes(lambda: _read_split(path))


@FUZZ
@given(
    case=st.sampled_from(sorted(STRUCTURES)).flatmap(lambda s: mutated(STRUCTURES[s]).map(lambda d: (s, d))),
    in_folder=st.booleans(),
    complexes=st.booleans(),
)
@example(case=(".pdb", BLANK_NUMBER_PDB), in_folder=False, complexes=False)
@example(case=(".pdb", CHAIN_TWICE_PDB), in_folder=False, complexes=True)
@example(case=(".pdb", NON_ASCII_CHAIN_PDB), in_folder=False, complexes=False)
def test_structure_files(folder, case, in_folder, complexes):
    suffix, data = case
    where = folder / "structures"
    where.mkdir(exist_ok=True)
    path = _write(where, f"s{suffix}", data)
    try:
        check_outcomes(lambda: read_structures(where if in_folder else path, complexes=complexes))
    finally:
        path.unlink()


def test_the_seeds_themselves_read_cleanly(folder):
    """The unmutated seeds are records: the fuzz starts from valid real input."""
    assert len(check_outcomes(lambda: read_chain_set(_write(folder, "ok.jsonl", CHAIN_SET + MULTI)))) == len(LINES) + 2
    assert len(check_outcomes(lambda: read_ts50(_write(folder, "ok.json", TS50)))) == 2
    for suffix, text in STRUCTURES.items():
        assert len(check_outcomes(lambda: read_structures(_write(folder, f"ok{suffix}", text)))) == 2  # noqa: B023
    with pytest.raises(InputError):
        read_split_file(_write(folder, "bad.json", b"[]"))


def test_the_memory_limit_binds():
    """What makes `out_of_memory` a failure here: under check_outcomes' limit a reader that asked
    for 2 GiB gets a MemoryError (numpy's), which the readers report as that skip."""
    with pytest.raises(MemoryError):
        with memory_limit():
            np.ones(2**31, dtype=np.uint8)
    assert np.ones(2**20, dtype=np.uint8).sum() == 2**20  # and the limit is lifted afterwards
