import gzip
import json

import numpy as np
import pytest

from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import ChainRecord
from tests.support.builders import backbone, chain_dict, jsonl_line, write_jsonl


def records(path, **kw):
    return list(read_chain_set(path, **kw))


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("nan_token", [True, False])
def test_missing_atoms_as_nan_or_null_plain_or_gzip(tmp_path, gz, nan_token):
    coords = backbone(5)
    coords[1, 3] = np.nan  # one O missing
    coords[3] = np.nan  # a whole residue missing
    path = write_jsonl(
        tmp_path / "chain_set.jsonl", [chain_dict("1abc.A", "ACDEF", coords)], gz=gz, nan_token=nan_token
    )
    (record,) = records(path)
    assert isinstance(record, ChainRecord)
    assert record.coords.dtype == np.float32 and record.coords.shape == (5, 4, 3)
    assert np.isnan(record.coords[1, 3]).all() and not np.isnan(record.coords[1, :3]).any()
    assert record.mask.tolist() == [True, False, True, False, True]
    np.testing.assert_allclose(record.coords[0], coords[0], atol=1e-3)
    assert record.residue_index.tolist() == [0, 1, 2, 3, 4]  # missing atoms are not breaks


def test_null_in_place_of_a_triple(tmp_path):
    obj = chain_dict("x.A", "AC")
    obj["coords"]["CA"][1] = None
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    (record,) = records(path)
    assert record.mask.tolist() == [True, False] and np.isnan(record.coords[1, 1]).all()


def test_gzip_detected_by_content_not_name(tmp_path):
    path = tmp_path / "looks_plain.jsonl"
    path.write_bytes(gzip.compress((jsonl_line(chain_dict("a.A", "ACD")) + "\n").encode()))
    assert [r.name for r in records(path)] == ["a.A"]


def test_bom_blank_lines_extra_keys_and_optional_fields(tmp_path):
    lines = [
        jsonl_line(chain_dict("a.A", "ACD", source="pkg:file.pdb", cluster=7, CATH=["1.10.8.10"])),
        "",
        "   ",
        jsonl_line({k: v for k, v in chain_dict("b.B", "GG").items() if k not in ("num_chains", "CATH")}),
    ]
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n\n")
    a, b = records(path)
    assert (a.name, a.cluster, a.cath, a.extra, a.num_chains) == (
        "a.A",
        "7",
        ("1.10.8.10",),
        {"source": "pkg:file.pdb"},
        1,
    )
    assert a.source.endswith("c.jsonl:1") and b.source.endswith("c.jsonl:4")
    assert (b.cluster, b.cath, b.num_chains) == (None, (), 1)


def test_breaks_inferred_from_peptide_distance(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [chain_dict("a.A", "ACDEFG", backbone(6, break_after=(2,)))])
    (record,) = records(path)
    assert record.residue_index.tolist() == [0, 1, 2, 4, 5, 6]


def test_ts50_layout_accepted_in_jsonl(tmp_path):
    coords = backbone(3)
    obj = {"name": "l.A", "seq": "ACD", "coords": coords.tolist()}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    (record,) = records(path)
    np.testing.assert_allclose(record.coords, coords, atol=1e-5)


def test_skips_then_goes_on_and_strict_raises_at_the_same_line(tmp_path):
    good = jsonl_line(chain_dict("a.A", "ACD"))
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join([good, '{"name": "b.B", "seq": 5, "coords": {}}', good.replace("a.A", "c.C")]) + "\n")
    out = records(path)
    assert [type(r) for r in out] == [ChainRecord, Skip, ChainRecord]
    assert out[1].reason == "wrong_type" and out[1].name == "b.B"
    assert out[1].message.endswith("c.jsonl:2: field 'seq': expected a string, got int 5")
    with pytest.raises(InputError, match=r"c\.jsonl:2: field 'seq'") as err:
        records(path, strict=True)
    assert err.value.reason == "wrong_type"


def test_conversion_matches_a_plain_numpy_reference_on_many_lengths(tmp_path):
    rng = np.random.default_rng(0)
    objs, expected = [], []
    for i, length in enumerate([1, 2, 7, 50, 333]):
        coords = rng.normal(size=(length, 4, 3)) * 20
        coords[rng.random((length, 4)) < 0.1] = np.nan
        objs.append(chain_dict(f"r{i}.A", "A" * length, coords))
        expected.append(np.round(coords, 3).astype(np.float32))
    out = records(write_jsonl(tmp_path / "c.jsonl.gz", objs, gz=True))
    for record, coords in zip(out, expected, strict=True):
        np.testing.assert_array_equal(record.coords, coords)
        np.testing.assert_array_equal(record.mask, ~np.isnan(coords).any(axis=(1, 2)))


def test_nan_inside_strings_is_kept_verbatim(tmp_path):
    coords = backbone(2)
    coords[0, 3] = np.nan
    obj = chain_dict("NaN.A", "AC", coords, source="dir NaN/x.pdb", notes={"NaN key": ["NaN"]})
    path = tmp_path / "c.jsonl"
    path.write_text(jsonl_line(obj) + "\n")
    (record,) = records(path)
    assert record.name == "NaN.A" and record.extra == {"source": "dir NaN/x.pdb", "notes": {"NaN key": ["NaN"]}}
    assert record.mask.tolist() == [False, True]


def test_infinity_token_reads_as_unobserved(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(jsonl_line(chain_dict("a.A", "AC")).replace("0.0", "Infinity", 1) + "\n")
    (record,) = records(path)
    assert record.mask.tolist() == [False, True]
