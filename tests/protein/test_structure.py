import gzip

import gemmi
import numpy as np
import pytest

from invfold.components.protein.errors import InputError
from invfold.components.protein.record import chain_breaks
from invfold.components.protein.structure import increasing_numbering, read_structures, residue_letter
from tests.support.builders import backbone, pdb_text

XYZ = backbone(12, break_after=(6,))


def protein_pdb() -> str:
    """Chain A: residues 1-4 (MSE at 2), insertion codes 5, 5A, 5B, then a numbering gap to 10-12
    (also a geometric gap after the 7th residue), an altloc pair at 3, a water; chain B: 3 residues."""
    a = [
        ("ALA", 1, " ", XYZ[0]),
        ("MSE", 2, " ", XYZ[1]),
        ("SER", 3, " ", XYZ[2], "A"),
        ("SER", 3, " ", XYZ[2] + 0.5, "B"),
        ("GLY", 4, " ", XYZ[3]),
        ("LYS", 5, " ", XYZ[4]),
        ("LYS", 5, "A", XYZ[5]),
        ("LYS", 5, "B", XYZ[6]),
        ("HIS", 10, " ", XYZ[7]),
        ("SEP", 11, " ", XYZ[8]),
        ("TRP", 12, " ", XYZ[9]),
    ]
    b = [("VAL", 7, " ", XYZ[0]), ("UNK", 8, " ", XYZ[1]), ("LEU", 9, " ", XYZ[2])]
    water = [("HOH", 101, " ", np.zeros((4, 3)))]
    return pdb_text({"A": a, "B": b, "W": water})


def test_pdb_chains_numbering_modified_residues(tmp_path):
    path = tmp_path / "1abc.pdb"
    path.write_text(protein_pdb())
    a, b = read_structures(path)
    # As ProteinMPNN's parse_PDB_biounits (protein_mpnn_utils.py): 5, 5A, 5B are three residues, and
    # the missing numbers 6-9 become four gap residues (X, no coordinates) before 10.
    assert (a.name, a.seq, a.num_chains) == ("1abc.A", "AMSGKKKXXXXHSW", 2)
    assert a.extra["modified"] == {"MSE": 1, "SEP": 1} and a.extra["gap_filled"] == 4
    assert a.residue_index.tolist() == list(range(14))  # the gap is filled, so no break is called
    assert not chain_breaks(a.residue_index).any()
    np.testing.assert_allclose(a.coords[2], XYZ[2], atol=1e-3)  # first alternative conformation kept
    assert a.mask.tolist() == [True] * 7 + [False] * 4 + [True] * 3 and np.isnan(a.coords[7:11]).all()
    assert a.coords.dtype == np.float32
    # an unknown residue keeps its place and backbone as X (masked when batched)
    assert (b.name, b.seq, b.extra) == ("1abc.B", "VXL", {"unknown": {"UNK": 1}})
    assert b.residue_index.tolist() == [0, 1, 2] and b.mask.all()
    np.testing.assert_allclose(b.coords[1], XYZ[1], atol=1e-3)
    assert a.source.endswith("1abc.pdb#A")


def test_missing_backbone_atom_is_nan(tmp_path):
    xyz = XYZ[:3].copy()
    xyz[1, 3] = np.nan  # no O in residue 2
    path = tmp_path / "m.pdb"
    path.write_text(pdb_text({"A": [("ALA", i + 1, " ", xyz[i]) for i in range(3)]}))
    (record,) = read_structures(path)
    assert record.mask.tolist() == [True, False, True] and np.isnan(record.coords[1, 3]).all()


@pytest.mark.parametrize("gz", [False, True])
def test_mmcif_reads_like_pdb_and_folder_order(tmp_path, gz):
    pdb = tmp_path / "src.pdb"
    pdb.write_text(protein_pdb())
    structure = gemmi.read_structure(str(pdb))
    structure.setup_entities()
    cif_text = structure.make_mmcif_document().as_string()
    folder = tmp_path / "folder"
    folder.mkdir()
    name = "2xyz.cif.gz" if gz else "2xyz.cif"
    (folder / name).write_bytes(gzip.compress(cif_text.encode()) if gz else cif_text.encode())
    (folder / "1abc.pdb").write_text(protein_pdb())
    (folder / "README.txt").write_text("not read")
    records = list(read_structures(folder))
    assert [r.name for r in records] == ["1abc.A", "1abc.B", "2xyz.A", "2xyz.B"]
    for from_pdb, from_cif in zip(records[:2], records[2:], strict=True):
        assert from_pdb.seq == from_cif.seq and from_pdb.extra == from_cif.extra
        np.testing.assert_array_equal(from_pdb.residue_index, from_cif.residue_index)
        np.testing.assert_allclose(from_pdb.coords, from_cif.coords, atol=1e-3)


def test_folder_skips_bad_files_unless_strict(tmp_path):
    (tmp_path / "a.pdb").write_text(protein_pdb())
    (tmp_path / "b.pdb").write_text(pdb_text({"W": [("HOH", 1, " ", np.zeros((4, 3)))]}))
    out = list(read_structures(tmp_path))
    assert [type(r).__name__ for r in out] == ["ChainRecord", "ChainRecord", "Skip"]
    assert out[2].reason == "no_protein_chain" and "b.pdb" in out[2].message
    with pytest.raises(InputError, match="b.pdb: expected at least one protein chain"):
        list(read_structures(tmp_path, strict=True))


def test_empty_folder_is_an_error(tmp_path):
    with pytest.raises(InputError, match="expected a folder with structure files"):
        list(read_structures(tmp_path))


def test_old_pdb_with_serial_numbers_in_charge_columns(tmp_path):
    text = "".join(
        line[:80].ljust(80)[:78] + "99\n" if line.startswith("ATOM") else line + "\n"
        for line in protein_pdb().splitlines()
    )
    path = tmp_path / "old.pdb"
    path.write_text(text)
    assert [r.seq for r in read_structures(path)] == ["AMSGKKKXXXXHSW", "VXL"]


@pytest.mark.parametrize(
    "name,letter",
    [
        ("ALA", "A"),
        ("MSE", "M"),
        ("SEP", "S"),
        ("TPO", "T"),
        ("PTR", "Y"),
        ("HYP", "P"),
        ("MLY", "K"),
        ("CSO", "C"),
        ("HSD", "H"),
        ("CYX", "C"),
        ("UNK", None),
        ("DAL", None),
        ("HOH", None),
        ("ATP", None),
        ("DA", None),
    ],
)
def test_residue_letters(name, letter):
    assert residue_letter(name) == letter


@pytest.mark.parametrize(
    "numbers,expected",
    [
        ([1, 2, 3], [1, 2, 3]),
        ([52, 52, 52, 53, 60], [52, 53, 54, 55, 62]),
        ([52, 52, 54], [52, 53, 55]),
        ([10, 11, 1, 2], [10, 11, 12, 13]),
        ([-3, -2, 0], [-3, -2, 0]),
        ([], []),
    ],
)
def test_increasing_numbering(numbers, expected):
    assert increasing_numbering(numbers).tolist() == expected
