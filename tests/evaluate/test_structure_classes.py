"""Burial and secondary-structure classes on real proteins of the bundled sample: an all-alpha
four-helix bundle (interleukin-2), an all-beta serine protease (trypsin fold), and the chemistry
that burial must reflect."""

from __future__ import annotations

import numpy as np
import pytest

from invfold.components.evaluate.structure_classes import (
    backbone_dihedrals,
    burial_classes,
    secondary_structure,
    virtual_cb,
)
from invfold.components.protein.jsonl import read_chain_set
from invfold.data import SAMPLE_CHAIN_SET


@pytest.fixture(scope="module")
def sample() -> dict:
    return {r.name: r for r in read_chain_set(SAMPLE_CHAIN_SET)}


def _fractions(record) -> np.ndarray:
    classes = secondary_structure(record.coords, record.residue_index, record.mask)
    return np.array([(classes == k).mean() for k in (0, 1, 2)])


def test_helix_bundle_reads_as_helix_and_protease_as_strand(sample):
    helix, strand, _ = _fractions(sample["il2._"])  # interleukin-2: four-helix bundle
    assert helix > 0.5 and strand < 0.2
    helix, strand, _ = _fractions(sample["1A0J_A.A"])  # trypsin fold: two beta barrels
    assert strand > 0.3 and helix < 0.15


def test_dihedrals_are_undefined_across_a_chain_break(sample):
    record = sample["il2._"]
    phi, psi = backbone_dihedrals(record.coords, record.residue_index)
    assert np.isnan(phi[0]) and np.isnan(psi[-1])
    broken = record.residue_index.copy()
    broken[50:] += 5  # as if residues were missing after residue 49
    phi_b, psi_b = backbone_dihedrals(record.coords, broken)
    assert np.isnan(psi_b[49]) and np.isnan(phi_b[50])
    assert np.allclose(phi_b[51:], phi[51:], equal_nan=True)


def test_core_residues_are_hydrophobic_and_surface_ones_charged(sample):
    counts = np.zeros((3, 2))  # [core/boundary/surface, (hydrophobic, charged)]
    for record in sample.values():
        classes = burial_classes(record.coords, record.mask)
        letters = np.array(list(record.seq))
        for k in range(3):
            picked = letters[classes == k]
            counts[k] += [np.isin(picked, list("AILMFVW")).sum(), np.isin(picked, list("DEKR")).sum()]
    core, _, surface = counts
    assert core[0] / core.sum() > 0.7 and surface[1] / surface.sum() > 0.6


def test_virtual_cb_sits_at_a_real_cb_distance_from_ca(sample):
    record = sample["1A0J_A.A"]
    cb = virtual_cb(record.coords.astype(np.float64))
    d = np.linalg.norm(cb - record.coords[:, 1], axis=1)
    assert np.nanmedian(d) == pytest.approx(1.52, abs=0.03)  # C-alpha to C-beta bond length
