"""Backbone plausibility: each defect, made in a real chain of the bundled sample, is named with
its reason and place; the real chains themselves (bundled sample, shared set) all pass."""

from __future__ import annotations

import numpy as np
import pytest

from invfold.components.protein.geometry import check_backbone
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import infer_residue_index, observed_mask
from invfold.data import SAMPLE_CHAIN_SET
from tests.support.paths import SHARED_DATA


@pytest.fixture(scope="module")
def real_backbone() -> np.ndarray:
    record = next(r for r in read_chain_set(SAMPLE_CHAIN_SET) if r.mask[:30].all())
    return record.coords.astype(np.float64)


def _set(index, value):
    def change(xyz):
        xyz[index] = value(xyz) if callable(value) else value

    return change


CASES = [
    ("coordinate 1e6", _set((3, 2, 0), 1e6), "implausible_coordinates", "residue 3 C"),
    ("N 4 A from CA", _set((7, 0), lambda x: x[7, 1] + [0, 4.0, 0]), "implausible_bond_length", "residue 7"),
    ("O 0.3 A from C", _set((7, 3), lambda x: x[7, 2] + [0.3, 0, 0]), "implausible_bond_length", "coords.C-O"),
    ("CA-CA 1 A", _set(10, lambda x: x[9] + [1.0, 0, 0]), "implausible_ca_distance", "residues 9 and 10"),
    ("residue on top of another", _set(25, lambda x: x[2]), "overlapping_atoms", "residue 2"),
]


@pytest.mark.parametrize("change, reason, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_defect_is_named(real_backbone, change, reason, fragment):
    xyz = real_backbone.copy()
    change(xyz)
    found = check_backbone(xyz, observed_mask(xyz), infer_residue_index(xyz))
    assert found is not None and found.reason == reason
    assert fragment in f"{found.field} {found.got}"


def test_missing_atoms_and_chain_breaks_are_not_defects(real_backbone):
    xyz = real_backbone.copy()
    xyz[4, 0] = np.nan  # a missing atom
    xyz[15:] += [30.0, 0, 0]  # a chain break: residues missing between 14 and 15
    assert check_backbone(xyz, observed_mask(xyz), infer_residue_index(xyz)) is None


@pytest.mark.parametrize(
    "path",
    [
        SAMPLE_CHAIN_SET,
        pytest.param(
            SHARED_DATA / "real_chain_set.jsonl.gz",
            marks=pytest.mark.skipif(
                not (SHARED_DATA / "real_chain_set.jsonl.gz").exists(), reason="the shared real data set is absent"
            ),
        ),
    ],
    ids=["bundled sample", "shared real set"],
)
def test_no_real_chain_is_called_implausible(path):
    records = list(read_chain_set(path))
    assert len(records) > 200
    rejected = {r.name: check_backbone(r.coords, r.mask, r.residue_index) for r in records}
    assert {name: why for name, why in rejected.items() if why} == {}
