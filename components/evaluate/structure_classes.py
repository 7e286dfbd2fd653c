"""Per-residue structural classes for breaking recovery down, from backbone atoms alone (no DSSP).

Burial: the number of virtual CB atoms within 10 A of a residue's virtual CB (same chain), the
neighbour count designers use for core/boundary/surface layers; core at 24 or more, surface under
16, boundary between. The virtual CB is placed from N, CA, C with ProteinMPNN's constants
(`protein_mpnn_utils.py`, ProteinFeatures: b = CA - N, c = C - CA, a = b x c,
CB = -0.58273431 a + 0.56802827 b - 0.54067466 c + CA).

Secondary structure: phi/psi from consecutive backbones (undefined across a chain break or next to
an unobserved residue), then Ramachandran regions: helix where phi is in [-160, -20] and psi in
[-120, 50], strand where phi is in [-180, -40] and psi is above 90 or below -150, in runs of at
least 4 (helix) or 3 (strand) residues; other residues with defined dihedrals are coil. This is an
estimate (no hydrogen bonds), good enough to see whether recovery differs by structure type.
"""

from __future__ import annotations

import numpy as np

CB_RADIUS = 10.0
CORE_MIN_NEIGHBOURS = 24
SURFACE_MAX_NEIGHBOURS = 15
BURIAL = ("core", "boundary", "surface")
SECONDARY = ("helix", "strand", "coil")
UNASSIGNED = -1
HELIX_RUN, STRAND_RUN = 4, 3


def virtual_cb(coords: np.ndarray) -> np.ndarray:
    """[L, 3] virtual CB from N, CA, C ([L, 4, 3] in N, CA, C, O order); NaN where one is missing."""
    n, ca, c = coords[:, 0], coords[:, 1], coords[:, 2]
    b, cc = ca - n, c - ca
    a = np.cross(b, cc)
    return -0.58273431 * a + 0.56802827 * b - 0.54067466 * cc + ca


def burial_classes(coords: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """int [L]: 0 core, 1 boundary, 2 surface, -1 for unobserved residues."""
    cb = virtual_cb(np.asarray(coords, dtype=np.float64))
    observed = np.asarray(mask, dtype=bool) & np.isfinite(cb).all(axis=1)
    points = cb[observed]
    distances = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(-1))
    neighbours = (distances < CB_RADIUS).sum(1) - 1
    out = np.full(len(cb), UNASSIGNED, dtype=np.int64)
    out[observed] = np.where(neighbours >= CORE_MIN_NEIGHBOURS, 0, np.where(neighbours <= SURFACE_MAX_NEIGHBOURS, 2, 1))
    return out


def _dihedral(p0, p1, p2, p3) -> np.ndarray:
    """Dihedral angles in degrees for arrays of points [N, 3] (NaN where any point is NaN)."""
    b0, b1, b2 = p0 - p1, p2 - p1, p3 - p2
    b1n = b1 / np.linalg.norm(b1, axis=1, keepdims=True)
    v = b0 - (b0 * b1n).sum(1, keepdims=True) * b1n
    w = b2 - (b2 * b1n).sum(1, keepdims=True) * b1n
    x = (v * w).sum(1)
    y = (np.cross(b1n, v) * w).sum(1)
    return np.degrees(np.arctan2(y, x))


def backbone_dihedrals(coords: np.ndarray, residue_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(phi, psi) in degrees, [L] each; NaN at chain ends, breaks, and next to missing atoms."""
    x = np.asarray(coords, dtype=np.float64)
    length = len(x)
    phi = np.full(length, np.nan)
    psi = np.full(length, np.nan)
    if length < 2:
        return phi, psi
    joined = np.diff(np.asarray(residue_index)) == 1
    n, ca, c = x[:, 0], x[:, 1], x[:, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        phi[1:] = np.where(joined, _dihedral(c[:-1], n[1:], ca[1:], c[1:]), np.nan)
        psi[:-1] = np.where(joined, _dihedral(n[:-1], ca[:-1], c[:-1], n[1:]), np.nan)
    return phi, psi


def _runs(flags: np.ndarray, minimum: int) -> np.ndarray:
    """flags kept only inside runs of at least `minimum` consecutive True."""
    out = np.zeros_like(flags)
    start = None
    for i, flag in enumerate(np.append(flags, False)):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - start >= minimum:
                out[start:i] = True
            start = None
    return out


def secondary_structure(coords: np.ndarray, residue_index: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """int [L]: 0 helix, 1 strand, 2 coil, -1 where phi or psi is undefined or the residue unobserved."""
    phi, psi = backbone_dihedrals(coords, residue_index)
    defined = np.isfinite(phi) & np.isfinite(psi) & np.asarray(mask, dtype=bool)
    with np.errstate(invalid="ignore"):
        helix = defined & (phi >= -160) & (phi <= -20) & (psi >= -120) & (psi <= 50)
        strand = defined & (phi >= -180) & (phi <= -40) & ((psi >= 90) | (psi <= -150))
    helix, strand = _runs(helix, HELIX_RUN), _runs(strand & ~helix, STRAND_RUN)
    out = np.full(len(phi), UNASSIGNED, dtype=np.int64)
    out[defined] = 2
    out[strand] = 1
    out[helix] = 0
    return out
