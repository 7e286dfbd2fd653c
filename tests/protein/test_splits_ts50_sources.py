import gzip
import json

import pytest

from invfold.components.protein.errors import InputError
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.sources import read_protein_set, reader_for
from invfold.components.protein.splits import read_split_file
from invfold.components.protein.structure import read_structures
from invfold.components.protein.ts50 import read_ts50
from tests.support.builders import backbone, chain_dict, pdb_text, write_jsonl


@pytest.mark.parametrize("filename", ["chain_set_splits.json", "chain_set_split.json"])
def test_split_file_both_spellings(tmp_path, filename):
    path = tmp_path / filename
    path.write_text(
        json.dumps(
            {"train": ["a.A", "b.B", "a.A"], "validation": ["c.C"], "test": ["d.D"], "cath_nodes": {"1.10": ["a.A"]}}
        )
    )
    split = read_split_file(path)
    assert split.splits == {"train": ["a.A", "b.B"], "validation": ["c.C"], "test": ["d.D"]}
    assert split.cath_nodes == {"1.10": ["a.A"]} and split.subsets == {} and split.ignored_keys == ()


@pytest.mark.parametrize(
    "filename,name", [("test_split_L100.json", "L100"), ("test_split_sc.json", "sc"), ("hard_cases.json", "hard_cases")]
)
def test_test_only_files_become_named_subsets(tmp_path, filename, name):
    path = tmp_path / filename
    path.write_text(json.dumps({"test": ["a.A", "b.B"]}))
    split = read_split_file(path)
    assert split.splits == {} and split.subsets == {name: ["a.A", "b.B"]}


def test_unknown_keys_ignored_with_warning(tmp_path):
    main = tmp_path / "chain_set_splits.json"
    main.write_text(json.dumps({"train": ["a.A"], "test": ["b.B"], "notes": "x"}))
    with pytest.warns(UserWarning, match=r"ignoring keys \['notes'\]"):
        split = read_split_file(main)
    assert split.splits == {"train": ["a.A"], "validation": [], "test": ["b.B"]}
    assert split.subsets == {} and split.ignored_keys == ("notes",)


def test_ts50_list_with_nan_and_null(tmp_path):
    coords = backbone(3).tolist()
    coords[1][3] = [None, None, None]
    text = json.dumps(
        [{"name": "t.A", "seq": "ACD", "coords": coords}, {"name": "u.A", "seq": "GG", "coords": backbone(2).tolist()}]
    )
    path = tmp_path / "ts50.json"
    path.write_text(text.replace("null", "NaN", 1))
    t, u = read_ts50(path)
    assert (t.name, t.mask.tolist(), u.name) == ("t.A", [True, False, True], "u.A")
    assert t.source.endswith("ts50.json#0") and t.residue_index.tolist() == [0, 1, 2]


def test_reader_for_each_kind(tmp_path):
    jsonl = write_jsonl(tmp_path / "set.jsonl.gz", [chain_dict("a.A", "ACD")], gz=True)
    (tmp_path / "ts50.json").write_text(json.dumps([{"name": "t.A", "seq": "A", "coords": backbone(1).tolist()}]))
    pdb = tmp_path / "x.ent.gz"
    pdb.write_bytes(gzip.compress(pdb_text({"A": [("ALA", 1, " ", backbone(1)[0])]}).encode()))
    assert reader_for(jsonl) is read_chain_set
    assert reader_for(tmp_path / "ts50.json") is read_ts50
    assert reader_for(pdb) is read_structures and reader_for(tmp_path) is read_structures
    assert [r.name for r in read_protein_set(jsonl)] == ["a.A"]
    assert [r.name for r in read_protein_set(pdb)] == ["x.A"]
    with pytest.raises(InputError, match="got a file named 'data.csv'"):
        (tmp_path / "data.csv").write_text("a,b")
        read_protein_set(tmp_path / "data.csv")
    with pytest.raises(InputError, match="expected an existing file or folder"):
        read_protein_set(tmp_path / "nothing.here")
