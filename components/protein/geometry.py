"""Geometric plausibility of a backbone: the checks that keep a chain with impossible coordinates
(one such chain makes every training loss NaN) out of prepared data.

Thresholds are wide: on the real shared set (833 chains) and the bundled sample (299) backbone bond
lengths lie in 0.91-1.92 A, CA(i)-CA(i+1) without a chain break in 2.55-4.34 A and the closest two
backbone atoms of a chain are 0.75 A apart, so no real chain there is dropped (bench/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from invfold.components.protein.limits import MAX_COORDINATE  # what a PDB coordinate field holds

# N-CA ~1.46, CA-C ~1.52, C-O ~1.23 A.
BOND_RANGE = (0.7, 2.5)
BONDS = (("N", "CA", 0, 1), ("CA", "C", 1, 2), ("C", "O", 2, 3))
# CA(i)-CA(i+1): ~3.8 A (trans), ~2.9 A (cis). Without a chain break C(i)-N(i+1) < 2 A bounds it
# by about 5 A; across a break it can be anything but a clash.
CA_CA_RANGE = (2.2, 4.6)
# Two backbone atoms closer than this are one atom written twice or a corrupted record.
MIN_ATOM_DISTANCE = 0.5


@dataclass(frozen=True)
class Implausible:
    """Why a backbone is rejected: a stable reason, the field, what was expected and what was found."""

    reason: str
    field: str
    expected: str
    got: str


def check_backbone(coords: np.ndarray, mask: np.ndarray, residue_index: np.ndarray) -> Implausible | None:
    """The first implausibility of a backbone (coords [L, 4, 3], NaN where missing), or None."""
    xyz = np.asarray(coords, dtype=np.float64)
    finite = np.isfinite(xyz)
    magnitude = np.abs(np.where(finite, xyz, 0.0))
    if magnitude.max(initial=0.0) > MAX_COORDINATE:
        residue, atom = np.argwhere(magnitude > MAX_COORDINATE)[0][:2]
        return Implausible(
            "implausible_coordinates",
            "coords",
            f"|x|, |y|, |z| <= {MAX_COORDINATE:g} A",
            f"{magnitude[residue, atom].max():.4g} at {_atom_name(4 * residue + atom)}",
        )
    observed = xyz[mask]
    for first, second, a, b in BONDS:
        length = np.linalg.norm(observed[:, a] - observed[:, b], axis=-1)
        bad = (length < BOND_RANGE[0]) | (length > BOND_RANGE[1])
        if bad.any():
            residue = int(np.flatnonzero(mask)[np.argmax(bad)])
            return Implausible(
                "implausible_bond_length",
                f"coords.{first}-{second}",
                f"{BOND_RANGE[0]}-{BOND_RANGE[1]} A",
                f"{length[np.argmax(bad)]:.3g} A at residue {residue}",
            )
    both = mask[1:] & mask[:-1]
    ca_ca = np.linalg.norm(xyz[1:, 1] - xyz[:-1, 1], axis=-1)
    unbroken = np.diff(residue_index) <= 1
    bad = both & ((ca_ca < CA_CA_RANGE[0]) | (unbroken & (ca_ca > CA_CA_RANGE[1])))
    if bad.any():
        residue = int(np.argmax(bad))
        return Implausible(
            "implausible_ca_distance",
            "coords.CA",
            f"CA(i)-CA(i+1) of {CA_CA_RANGE[0]}-{CA_CA_RANGE[1]} A (peptide bond) or above "
            f"{CA_CA_RANGE[0]} A across a chain break",
            f"{ca_ca[residue]:.3g} A between residues {residue} and {residue + 1}",
        )
    atoms = xyz.reshape(-1, 3)
    atoms_index = np.flatnonzero(finite.reshape(-1, 3).all(axis=1))
    if len(atoms_index) > 1:
        pairs = cKDTree(atoms[atoms_index]).query_pairs(MIN_ATOM_DISTANCE, output_type="ndarray")
        if len(pairs):
            i, j = (atoms_index[k] for k in pairs[0])
            return Implausible(
                "overlapping_atoms",
                "coords",
                f"backbone atoms at least {MIN_ATOM_DISTANCE} A apart",
                f"{_atom_name(i)} and {_atom_name(j)} {np.linalg.norm(atoms[i] - atoms[j]):.3g} A apart",
            )
    return None


def _atom_name(flat: int) -> str:
    return f"residue {flat // 4} {('N', 'CA', 'C', 'O')[flat % 4]}"
