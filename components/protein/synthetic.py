"""Deterministic synthetic protein sets in the CATH `chain_set.jsonl` format.

Used by tests (edge cases at any size) and by the prep benchmark (a CATH-sized set without
downloading CATH). Backbones are built from ideal internal coordinates (Engh & Huber bond lengths
and angles), so N-CA 1.46, CA-C 1.52, C-N 1.33 A hold everywhere and a reader's C(i)-N(i+1) break
detection behaves as on real chains. Chains come in families (one CATH topology each) that share
a secondary-structure layout and a mutated ancestral sequence, with residue letters biased by
secondary structure, so sequence clustering finds the families and a model has something to learn.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from invfold.components.protein.alphabet import ALPHABET

# Ideal backbone geometry (Angstrom, degrees).
BOND_N_CA, BOND_CA_C, BOND_C_N, BOND_C_O = 1.458, 1.525, 1.329, 1.231
ANGLE_N_CA_C, ANGLE_CA_C_N, ANGLE_C_N_CA = 111.2, 116.2, 121.7
HELIX_PHI_PSI = (-57.0, -47.0)
STRAND_PHI_PSI = (-120.0, 130.0)
# Loop residues draw (phi, psi) from the populated Ramachandran regions: PPII, alpha, beta, left alpha.
LOOP_REGIONS = ((-65.0, 145.0), (-70.0, -35.0), (-110.0, 120.0), (60.0, 45.0))
LOOP_REGION_WEIGHTS = (0.4, 0.3, 0.22, 0.08)

# Letters favoured by each secondary-structure state (weights over ALPHABET before mixing).
STATE_PREFERENCES = {
    "H": "AELMQKRAELM",
    "E": "VIYFWTVIC",
    "L": "GPNDSGPTK",
}
# Background residue frequencies (UniProt), in ALPHABET order.
BACKGROUND = np.array(
    [
        8.25,
        1.37,
        5.45,
        6.75,
        3.86,
        7.07,
        2.27,
        5.96,
        5.84,
        9.66,
        2.42,
        4.06,
        4.70,
        3.93,
        5.53,
        6.56,
        5.34,
        6.87,
        1.08,
        2.92,
    ]
)


@dataclass
class SyntheticConfig:
    """What to generate.

    median_length/length_sigma: a log-normal length distribution clipped to
    [min_length, max_length]; the defaults give CATH 4.2's shape (median about 230, up to 500, about
    27 kB of jsonl per chain). family_size: mean chains per family (CATH topology).
    gap_fraction: share of chains with runs of unobserved residues (NaN coordinates);
    break_fraction: share of chains with a stretch deleted from both sequence and coordinates,
    so the chain has a physical break. split_fractions: train, validation, test, by family.
    """

    num_chains: int = 100
    seed: int = 0
    min_length: int = 40
    max_length: int = 500
    median_length: float = 230.0
    length_sigma: float = 0.45
    family_size: float = 4.0
    gap_fraction: float = 0.3
    break_fraction: float = 0.1
    split_fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)
    with_cath: bool = True
    with_cluster: bool = False
    null_for_missing: bool = False

    def __post_init__(self):
        if self.num_chains < 1:
            raise ValueError(f"num_chains must be at least 1, got {self.num_chains}")
        if not 10 <= self.min_length <= self.max_length:
            raise ValueError(f"need 10 <= min_length <= max_length, got {self.min_length}, {self.max_length}")
        if self.family_size < 1:
            raise ValueError(f"family_size must be at least 1, got {self.family_size}")
        for name in ("gap_fraction", "break_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if (
            len(self.split_fractions) != 3
            or abs(sum(self.split_fractions) - 1.0) > 1e-6
            or min(self.split_fractions) < 0
        ):
            raise ValueError(f"split_fractions must be 3 non-negative numbers summing to 1, got {self.split_fractions}")


@dataclass
class SyntheticSet:
    chain_set: Path
    splits: Path
    num_chains: int


def _place(a: np.ndarray, b: np.ndarray, c: np.ndarray, bond: float, angle: float, torsion: float) -> np.ndarray:
    """NeRF: the atom d bonded to c with |cd| = bond, angle bcd, and dihedral abcd (degrees)."""
    angle, torsion = math.radians(angle), math.radians(torsion)
    bc = c - b
    bc /= np.linalg.norm(bc)
    n = np.cross(b - a, bc)
    n /= np.linalg.norm(n)
    m = np.cross(n, bc)
    d2 = np.array(
        [
            -bond * math.cos(angle),
            bond * math.sin(angle) * math.cos(torsion),
            bond * math.sin(angle) * math.sin(torsion),
        ]
    )
    return c + d2[0] * bc + d2[1] * m + d2[2] * n


def _build_backbone(phi_psi: np.ndarray) -> np.ndarray:
    """N, CA, C of residues with the given (phi, psi) pairs, trans peptides: float64 [n, 3, 3]."""
    n = len(phi_psi)
    out = np.zeros((n, 3, 3))
    out[0, 0] = (0.0, 0.0, 0.0)
    out[0, 1] = (BOND_N_CA, 0.0, 0.0)
    t = math.radians(180.0 - ANGLE_N_CA_C)
    out[0, 2] = out[0, 1] + BOND_CA_C * np.array([math.cos(t), math.sin(t), 0.0])
    for i in range(1, n):
        n_prev, ca_prev, c_prev = out[i - 1]
        out[i, 0] = _place(n_prev, ca_prev, c_prev, BOND_C_N, ANGLE_CA_C_N, phi_psi[i - 1, 1])
        out[i, 1] = _place(ca_prev, c_prev, out[i, 0], BOND_N_CA, ANGLE_C_N_CA, 180.0)
        out[i, 2] = _place(c_prev, out[i, 0], out[i, 1], BOND_CA_C, ANGLE_N_CA_C, phi_psi[i, 0])
    return out


def _frame(n: np.ndarray, ca: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Orthonormal residue frame (columns); the cross product is spelled out since np.cross's
    overhead dominated generation time."""
    e1 = c - ca
    e1 = e1 / math.sqrt(e1 @ e1)
    u = n - ca
    e2 = u - e1 * (u @ e1)
    e2 = e2 / math.sqrt(e2 @ e2)
    e3 = (e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2], e1[0] * e2[1] - e1[1] * e2[0])
    return np.array([e1, e2, e3]).T


def _add_oxygens(nca_c: np.ndarray, next_n: np.ndarray) -> np.ndarray:
    """[L, 4, 3]: O in the peptide plane, on the bisector opposite CA and N(i+1) (CA-C-O ~ 121 deg)."""
    ca, c = nca_c[:, 1], nca_c[:, 2]
    u = ca - c
    v = next_n - c
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    w = -(u + v)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    return np.concatenate([nca_c, (c + BOND_C_O * w)[:, None]], axis=1)


class _Templates:
    """Ideal helix/strand segments and a pool of loop fragments, built once per generator.

    A chain is assembled by superposing each segment's leading overlap residue on the previous
    segment's last residue, which keeps every peptide bond ideal at the joins.
    """

    def __init__(self, rng: np.random.Generator, max_length: int, num_loops: int = 256):
        long = max_length + 2
        self.helix = _build_backbone(np.tile(HELIX_PHI_PSI, (long, 1)))
        self.strand = _build_backbone(np.tile(STRAND_PHI_PSI, (long, 1)))
        self.loops = []
        for _ in range(num_loops):
            size = 9  # layouts use loops of 2-8 residues, plus the overlap residue
            regions = rng.choice(len(LOOP_REGIONS), size=size, p=LOOP_REGION_WEIGHTS)
            phi_psi = np.array([LOOP_REGIONS[r] for r in regions]) + rng.normal(0, 12, (size, 2))
            self.loops.append(_build_backbone(phi_psi))

        self._first_frames = {"H": _frame(*self.helix[0]), "E": _frame(*self.strand[0])}
        self._loop_frames = [_frame(*loop[0]) for loop in self.loops]

    def first_frame(self, state: str, loop_id: int) -> np.ndarray:
        return self._loop_frames[loop_id] if state == "L" else self._first_frames[state]

    def segment(self, state: str, size: int, loop_id: int) -> np.ndarray:
        """size + 1 residues (the first one overlaps the previous segment's last)."""
        if state == "H":
            return self.helix[: size + 1]
        if state == "E":
            return self.strand[: size + 1]
        return self.loops[loop_id][: size + 1]


def _layout(rng: np.random.Generator, length: int, num_loops: int) -> list[tuple[str, int, int]]:
    """Secondary-structure segments (state, size, loop template) covering `length` residues."""
    segments, total = [], 0
    while total <= length:  # one extra residue places the last oxygen
        loop = int(rng.integers(2, 9))
        segments.append(("L", loop, int(rng.integers(num_loops))))
        total += loop
        state = "H" if rng.random() < 0.55 else "E"
        size = int(rng.integers(8, 21)) if state == "H" else int(rng.integers(4, 11))
        segments.append((state, size, 0))
        total += size
    return segments


def _assemble(templates: _Templates, segments: list[tuple[str, int, int]], length: int) -> tuple[np.ndarray, str]:
    """Backbone [length, 4, 3] float32 and its per-residue state string."""
    pieces = [np.zeros((1, 3, 3))]
    pieces[0][0] = templates.helix[0]
    states = []
    for state, size, loop_id in segments:
        seg = templates.segment(state, size, loop_id)
        last = pieces[-1][-1]
        rot = _frame(*last) @ templates.first_frame(state, loop_id).T
        pieces.append((seg[1:] - seg[0, 1]) @ rot.T + last[1])
        states.append(state * size)
    nca_c = np.concatenate(pieces)[1:]
    state_string = "".join(states)
    if len(nca_c) < length + 1:
        raise AssertionError("layout shorter than requested length")
    backbone = _add_oxygens(nca_c[:length], nca_c[1 : length + 1, 0])
    return backbone.astype(np.float32), state_string[:length]


def _clashes(coords: np.ndarray) -> bool:
    """Whether two backbone atoms are closer than 1 A (bonded ones are 1.2 A or more apart): prep
    drops such chains as implausible (protein/geometry.py)."""
    from scipy.spatial import cKDTree

    return len(cKDTree(coords.reshape(-1, 3)).query_pairs(1.0)) > 0


def _state_weights() -> dict[str, np.ndarray]:
    bg = BACKGROUND / BACKGROUND.sum()
    out = {}
    for state, letters in STATE_PREFERENCES.items():
        pref = np.zeros(len(ALPHABET))
        for letter in letters:
            pref[ALPHABET.index(letter)] += 1.0
        w = 0.45 * bg + 0.55 * pref / pref.sum()
        out[state] = w / w.sum()
    return out


def _draw_letters(rng: np.random.Generator, states: str, weights: dict[str, np.ndarray]) -> np.ndarray:
    codes = np.empty(len(states), dtype=np.int64)
    state_arr = np.frombuffer(states.encode(), dtype=np.uint8)
    for state, w in weights.items():
        where = np.flatnonzero(state_arr == ord(state))
        codes[where] = rng.choice(len(ALPHABET), size=len(where), p=w)
    return codes


def _pdb_like_name(index: int) -> str:
    """Unique "1abc.A"-style names: digit + three base-36 characters + chain letter."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    code = index // 4
    chars = []
    for _ in range(3):
        code, r = divmod(code, 36)
        chars.append(digits[r])
    if code >= 9:
        raise ValueError("too many chains for 4-character names")
    return f"{code + 1}{''.join(reversed(chars))}.{'ABCD'[index % 4]}"


def _topology(family: int) -> int:
    """Two neighbouring families share a topology, as CATH topologies hold several superfamilies."""
    return family // 2


def _cath_node(family: int) -> str:
    """A unique, well-formed CATH node "C.A.T.H" for the family."""
    topo = _topology(family)
    return f"{1 + topo % 4}.{10 * (1 + (topo // 4) % 9)}.{10 + topo // 36}.{10 + 10 * (family % 2)}"


def generate_chains(cfg: SyntheticConfig) -> Iterator[tuple[dict, int]]:
    """Yields (jsonl entry, family index) for each chain, in a fixed order for a given config."""
    rng = np.random.default_rng(cfg.seed)
    templates = _Templates(rng, cfg.max_length)
    weights = _state_weights()
    family, remaining = -1, 0
    for index in range(cfg.num_chains):
        if remaining == 0:
            family += 1
            remaining = 1 + int(rng.poisson(cfg.family_size - 1))
            fam_length = int(
                np.clip(rng.lognormal(math.log(cfg.median_length), cfg.length_sigma), cfg.min_length, cfg.max_length)
            )
            fam_layout = _layout(rng, fam_length, len(templates.loops))
            fam_states = "".join(s * n for s, n, _ in fam_layout)[:fam_length]
            fam_codes = _draw_letters(rng, fam_states, weights)
            fam_mutation = rng.uniform(0.05, 0.2)  # members stay above ~60% identity to each other
        remaining -= 1
        # each member swaps some loop conformations and mutates the ancestor
        layout = [
            (s, n, int(rng.integers(len(templates.loops))) if s == "L" and rng.random() < 0.5 else t)
            for s, n, t in fam_layout
        ]
        coords, states = _assemble(templates, layout, fam_length)
        for attempt in range(1, 50):  # a chain that runs through itself: other loops, from a side stream
            if not _clashes(coords):
                break
            side = np.random.default_rng([cfg.seed, index, attempt])
            layout = [(s, n, int(side.integers(len(templates.loops))) if s == "L" else t) for s, n, t in layout]
            coords, states = _assemble(templates, layout, fam_length)
        mutate = rng.random(fam_length) < fam_mutation
        codes = np.where(mutate, _draw_letters(rng, states, weights), fam_codes)
        seq = "".join(ALPHABET[c] for c in codes)
        coords = coords + rng.normal(0, 0.02, coords.shape).astype(np.float32)
        if rng.random() < cfg.break_fraction and fam_length >= cfg.min_length + 12:
            start = int(rng.integers(5, fam_length - 10))
            cut = int(rng.integers(2, 6))
            keep = np.r_[0:start, start + cut : fam_length]
            coords, seq = coords[keep], "".join(seq[i] for i in keep)
        if rng.random() < cfg.gap_fraction:
            length = len(seq)
            for _ in range(int(rng.integers(1, 4))):
                start = int(rng.integers(0, length))
                coords[start : start + int(rng.integers(1, 8))] = np.nan
            if rng.random() < 0.5:
                coords[int(rng.integers(0, length)), 3] = np.nan  # a lone missing oxygen
        entry = {"name": _pdb_like_name(index), "seq": seq}
        rounded = np.round(coords.astype(np.float64), 3)
        entry["coords"] = {atom: rounded[:, k].tolist() for k, atom in enumerate(("N", "CA", "C", "O"))}
        entry["num_chains"] = 1
        entry["CATH"] = [_cath_node(family)] if cfg.with_cath else []
        if cfg.with_cluster:
            entry["cluster"] = f"c{family}"
        yield entry, family


def _nan_to_null(value):
    if isinstance(value, list):
        return [_nan_to_null(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def split_of_family(family: int, seed: int, fractions: tuple[float, float, float]) -> str:
    """Topologies go to train/validation/test by a seeded hash (as CATH 4.2's own split is
    topology-disjoint), so related chains never straddle splits."""
    h = int.from_bytes(hashlib.sha256(f"split:{seed}:{_topology(family)}".encode()).digest()[:8], "big") / 2**64
    if h < fractions[2]:
        return "test"
    if h < fractions[2] + fractions[1]:
        return "validation"
    return "train"


def write_synthetic_set(out_dir: Path, cfg: SyntheticConfig, filename: str = "chain_set.jsonl") -> SyntheticSet:
    """Writes `filename` (gzipped when it ends in .gz; NaN tokens as json.dumps writes them, or
    null when cfg.null_for_missing) and `chain_set_splits.json` with train/validation/test and
    cath_nodes. Streams: memory stays that of one chain."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / filename
    splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    cath_nodes: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(path, "wb"))
        if filename.endswith(".gz"):  # no name or time in the header: equal configs, equal bytes
            raw = stack.enter_context(gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0))
        fh = stack.enter_context(io.TextIOWrapper(raw, encoding="utf-8"))
        for entry, family in generate_chains(cfg):
            if cfg.null_for_missing:
                entry["coords"] = {k: _nan_to_null(v) for k, v in entry["coords"].items()}
            fh.write(json.dumps(entry, separators=(", ", ": ")))
            fh.write("\n")
            splits[split_of_family(family, cfg.seed, cfg.split_fractions)].append(entry["name"])
            if entry["CATH"]:
                cath_nodes[entry["name"]] = entry["CATH"]
    splits_path = out_dir / "chain_set_splits.json"
    splits_path.write_text(json.dumps({**splits, "cath_nodes": cath_nodes}))
    return SyntheticSet(path, splits_path, cfg.num_chains)
