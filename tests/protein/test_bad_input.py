"""The bad-input corpus at the reader level: each case names the outcome expected for every record
in the default mode (a record, or a Skip with its reason and message fragment) or a file-level
error; strict mode must raise at the first Skip with the same reason, and pass good files through."""

import gzip
import json
from dataclasses import dataclass

import numpy as np
import pytest

from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.splits import read_split_file
from invfold.components.protein.structure import read_structures
from invfold.components.protein.ts50 import read_ts50
from tests.support.builders import backbone, chain_dict, jsonl_line, pdb_text

GOOD = jsonl_line(chain_dict("good.A", "ACD"))
OK = "ok"


def line(**changes) -> str:
    obj = chain_dict("bad.A", "ACD")
    for key, value in changes.items():
        if key.startswith("coords_") and value is DELETE:
            del obj["coords"][key[len("coords_") :]]
        elif key.startswith("coords_"):
            obj["coords"][key[len("coords_") :]] = value
        elif value is DELETE:
            del obj[key]
        else:
            obj[key] = value
    return json.dumps(obj)


DELETE = object()
TRIPLE = [1.0, 2.0, 3.0]


def lines(*texts: str, end: str = "\n") -> bytes:
    return ("\n".join(texts) + end).encode()


@dataclass
class Case:
    id: str
    filename: str
    content: bytes | None  # None: the file does not exist
    reader: object
    expected: list | tuple  # per-record outcomes, or ("error", reason, fragment)


def skip(reason: str, fragment: str):
    return ("skip", reason, fragment)


def error(reason: str, fragment: str):
    return ("error", reason, fragment)


PDB_WATER = pdb_text({"W": [("HOH", 1, " ", np.zeros((4, 3)))]})
PDB_DNA = pdb_text({"B": [("DA", i, " ", backbone(3)[i]) for i in range(1, 3)]}, hetatm=())
PDB_UNK_AND_PROTEIN = pdb_text(
    {
        "A": [("ALA", i + 1, " ", backbone(3)[i]) for i in range(3)],
        "U": [("UNK", i + 1, " ", backbone(3)[i]) for i in range(3)],
    }
)

CASES = [
    # chain_set.jsonl
    Case(
        "truncated last line",
        "chain_set.jsonl",
        lines(GOOD, GOOD[:150], end=""),
        read_chain_set,
        [OK, skip("invalid_json", "chain_set.jsonl:2: expected one JSON object per line, got invalid JSON")],
    ),
    Case(
        "truncated line names its end",
        "chain_set.jsonl",
        lines(GOOD[:40], end=""),
        read_chain_set,
        [skip("invalid_json", "the line has no end (truncated file?)")],
    ),
    Case(
        "invalid json",
        "chain_set.jsonl",
        lines("{name: 1}", GOOD),
        read_chain_set,
        [skip("invalid_json", "chain_set.jsonl:1:"), OK],
    ),
    Case("bom then good record", "chain_set.jsonl", b"\xef\xbb\xbf" + lines(GOOD), read_chain_set, [OK]),
    Case(
        "bom on a later line", "chain_set.jsonl", lines(GOOD) + b"\xef\xbb\xbf" + lines(GOOD), read_chain_set, [OK, OK]
    ),
    Case(
        "not an object",
        "chain_set.jsonl",
        lines("[1, 2, 3]"),
        read_chain_set,
        [skip("not_an_object", "expected a JSON object, got list")],
    ),
    Case(
        "missing name",
        "chain_set.jsonl",
        lines(line(name=DELETE)),
        read_chain_set,
        [skip("missing_field", "field 'name': expected a value, got nothing (key missing)")],
    ),
    Case(
        "seq not a string",
        "chain_set.jsonl",
        lines(line(seq=["A", "C", "D"])),
        read_chain_set,
        [skip("wrong_type", "field 'seq': expected a string, got a list of 3")],
    ),
    Case(
        "name not a string",
        "chain_set.jsonl",
        lines(line(name=12)),
        read_chain_set,
        [skip("wrong_type", "field 'name': expected a non-empty string, got int 12")],
    ),
    Case(
        "coords a string",
        "chain_set.jsonl",
        lines(line(coords="none")),
        read_chain_set,
        [skip("wrong_type", "field 'coords': expected an object with N, CA, C, O atom lists")],
    ),
    Case(
        "atom list missing",
        "chain_set.jsonl",
        lines(line(coords_O=DELETE)),
        read_chain_set,
        [skip("missing_field", "field 'coords.O'")],
    ),
    Case(
        "coordinate is text",
        "chain_set.jsonl",
        lines(line(coords_CA=[TRIPLE, ["x", 2, 3], TRIPLE])),
        read_chain_set,
        [skip("wrong_type", "field 'coords.CA': expected numbers, NaN or null, got a string 'x' at residue 1")],
    ),
    Case(
        "pair instead of triple",
        "chain_set.jsonl",
        lines(line(coords_N=[TRIPLE, [1.0, 2.0], TRIPLE])),
        read_chain_set,
        [skip("wrong_shape", "field 'coords.N': expected [x, y, z] triples (or null), got a list of 2 at residue 1")],
    ),
    Case(
        "atom list not a list",
        "chain_set.jsonl",
        lines(line(coords_C={"x": 1})),
        read_chain_set,
        [skip("wrong_type", "field 'coords.C': expected a list of L=3 [x, y, z] triples")],
    ),
    Case(
        "seq longer than coords",
        "chain_set.jsonl",
        lines(line(seq="ACDE")),
        read_chain_set,
        [skip("length_mismatch", "field 'coords.N': expected a list of L=4 [x, y, z] triples, got 3")],
    ),
    Case(
        "one atom list short",
        "chain_set.jsonl",
        lines(line(coords_CA=[TRIPLE, TRIPLE])),
        read_chain_set,
        [skip("length_mismatch", "field 'coords.CA': expected a list of L=3 [x, y, z] triples, got 2")],
    ),
    Case(
        "empty sequence",
        "chain_set.jsonl",
        lines(line(seq="", coords={"N": [], "CA": [], "C": [], "O": []})),
        read_chain_set,
        [skip("empty_chain", "field 'seq'")],
    ),
    Case(
        "num_chains text",
        "chain_set.jsonl",
        lines(line(num_chains="2")),
        read_chain_set,
        [skip("wrong_type", "field 'num_chains': expected a positive integer")],
    ),
    Case(
        "CATH not a list",
        "chain_set.jsonl",
        lines(line(CATH="1.10.8.10")),
        read_chain_set,
        [skip("wrong_type", "field 'CATH': expected a list of strings")],
    ),
    # Not reader concerns (prep filters and counts them): the reader passes them through.
    Case("unknown letters", "chain_set.jsonl", lines(line(seq="AXZ")), read_chain_set, [OK]),
    Case(
        "no observed residue",
        "chain_set.jsonl",
        lines(jsonl_line(chain_dict("n.A", "AC", np.full((2, 4, 3), np.nan)))),
        read_chain_set,
        [OK],
    ),
    Case("duplicate names", "chain_set.jsonl", lines(GOOD, GOOD), read_chain_set, [OK, OK]),
    # file-level: always errors
    Case(
        "empty file",
        "chain_set.jsonl",
        b"",
        read_chain_set,
        error("empty_file", "chain_set.jsonl: expected at least one JSON record, got an empty file"),
    ),
    Case("only blank lines", "chain_set.jsonl", b"\n \n\n", read_chain_set, error("empty_file", "an empty file")),
    Case(
        "corrupt gzip",
        "chain_set.jsonl.gz",
        b"\x1f\x8b" + b"not really gzip" * 5,
        read_chain_set,
        error("corrupt_gzip", "expected a complete, valid gzip stream"),
    ),
    Case(
        "truncated gzip",
        "chain_set.jsonl.gz",
        gzip.compress(lines(GOOD, GOOD, GOOD))[:-40],
        read_chain_set,
        error("corrupt_gzip", "chain_set.jsonl.gz: expected a complete, valid gzip stream"),
    ),
    Case("missing file", "chain_set.jsonl", None, read_chain_set, error("missing_file", "expected an existing file")),
    # TS50 lists
    Case(
        "ts50 residue with three atoms",
        "ts50.json",
        json.dumps(
            [
                {"name": "t.A", "seq": "AC", "coords": backbone(2).tolist()},
                {"name": "u.A", "seq": "AC", "coords": [backbone(2)[0].tolist(), backbone(2)[1, :3].tolist()]},
            ]
        ).encode(),
        read_ts50,
        [OK, skip("wrong_shape", "ts50.json: record 1: field 'coords': expected 4 [x, y, z] triples")],
    ),
    Case(
        "ts50 given a split file",
        "ts50.json",
        b'{"train": [], "test": []}',
        read_ts50,
        error("not_a_protein_set", "a split file"),
    ),
    Case("ts50 empty list", "ts50.json", b"[]", read_ts50, error("empty_file", "an empty list")),
    Case("ts50 invalid json", "ts50.json", b"[{", read_ts50, error("invalid_json", "ts50.json:1: expected valid JSON")),
    # structures
    Case(
        "pdb without protein",
        "water.pdb",
        PDB_WATER.encode(),
        read_structures,
        error("no_protein_chain", "water.pdb: expected at least one protein chain"),
    ),
    Case("pdb with only dna", "dna.pdb", PDB_DNA.encode(), read_structures, error("no_protein_chain", "dna.pdb")),
    Case(
        "poly-UNK chain skipped",
        "unk.pdb",
        PDB_UNK_AND_PROTEIN.encode(),
        read_structures,
        [OK, skip("no_standard_residues", "unk.pdb: chain 'U': field 'residues'")],
    ),
    Case(
        "text is not a structure",
        "notes.pdb",
        b"hello, this is not a structure\n",
        read_structures,
        error("not_a_structure", "expected a PDB or mmCIF file with atoms"),
    ),
    Case("empty structure file", "empty.cif", b"", read_structures, error("empty_file", "empty.cif")),
    Case(
        "corrupt gzip structure",
        "x.pdb.gz",
        b"\x1f\x8b\x08\x00garbage",
        read_structures,
        error("corrupt_gzip", "x.pdb.gz"),
    ),
]


def _write(tmp_path, case: Case) -> str:
    path = tmp_path / case.filename
    if case.content is not None:
        path.write_bytes(case.content)
    return str(path)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_default_mode(tmp_path, case):
    path = _write(tmp_path, case)
    if isinstance(case.expected, tuple):
        _, reason, fragment = case.expected
        with pytest.raises(InputError) as err:
            list(case.reader(path))
        assert err.value.reason == reason and fragment in str(err.value), str(err.value)
        return
    out = list(case.reader(path))
    assert len(out) == len(case.expected)  # every record read is either kept or skipped
    for got, want in zip(out, case.expected, strict=True):
        if want == OK:
            assert isinstance(got, ChainRecord), got
        else:
            assert isinstance(got, Skip), got
            assert got.reason == want[1] and want[2] in got.message, got.message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_strict_mode(tmp_path, case):
    path = _write(tmp_path, case)
    first_problem = (
        case.expected if isinstance(case.expected, tuple) else next((w for w in case.expected if w != OK), None)
    )
    if first_problem is None:
        assert all(isinstance(r, ChainRecord) for r in case.reader(path, strict=True))
        return
    with pytest.raises(InputError) as err:
        list(case.reader(path, strict=True))
    assert err.value.reason == first_problem[1] and first_problem[2] in str(err.value), str(err.value)


SPLIT_CASES = [
    (
        "chain in two splits",
        {"train": ["a.A", "b.B"], "validation": [], "test": ["b.B"]},
        "overlapping_splits",
        "chain 'b.B': expected each chain in exactly one split, got it is in both 'train' and 'test'",
    ),
    (
        "split not a list",
        {"train": "a.A", "test": []},
        "wrong_type",
        "field 'train': expected a list of chain names, got str",
    ),
    ("split holds a number", {"train": ["a.A", 3], "test": []}, "wrong_type", "a list holding int 3"),
    (
        "no split keys",
        {"folds": [["a.A"]]},
        "not_a_split_file",
        "expected a JSON object with train / validation / test lists",
    ),
    ("a list, not an object", [["a.A"]], "not_a_split_file", "got list"),
]


@pytest.mark.parametrize("content,reason,fragment", [c[1:] for c in SPLIT_CASES], ids=[c[0] for c in SPLIT_CASES])
def test_bad_split_files(tmp_path, content, reason, fragment):
    path = tmp_path / "chain_set_splits.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputError) as err:
        read_split_file(path)
    assert err.value.reason == reason and fragment in str(err.value), str(err.value)
    assert "chain_set_splits.json" in str(err.value)


@pytest.mark.parametrize("content,reason", [(b"", "empty_file"), (b"{", "invalid_json"), (None, "missing_file")])
def test_unreadable_split_files(tmp_path, content, reason):
    path = tmp_path / "chain_set_splits.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as err:
        read_split_file(path)
    assert err.value.reason == reason
