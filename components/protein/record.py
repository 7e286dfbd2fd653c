"""The one chain record every reader yields and every later step consumes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from invfold.components.protein.limits import MAX_COORDINATE
from invfold.errors import InputError

BACKBONE_ATOMS = ("N", "CA", "C", "O")
# C(i)-N(i+1) is ~1.33 A in a peptide bond; a longer gap means residues are missing between them.
PEPTIDE_BREAK_ANGSTROM = 2.0
# residue_index jump between consecutive chains of a complex (ProteinMPNN adds 100 per chain);
# features.segment_ids starts a new segment at any jump this large.
CHAIN_OFFSET = 100
# residue_index jump where a batch's padding starts (protein.batch.collate): padding is never
# adjacent to, nor in the chain of, a real residue.
PADDING_OFFSET = 1000


@dataclass
class ChainRecord:
    """One protein chain.

    coords: float32 [L, 4, 3] in N, CA, C, O order, NaN where an atom is missing.
    mask: bool [L], True where all four backbone atoms are observed.
    residue_index: int32 [L], author numbering where the format has it; otherwise 0..L-1 with an
        extra gap inserted after every chain break, so that a break is wherever consecutive
        entries differ by more than 1.
    source: where the record came from ("file:line" or "file#chain"), for error messages.
    chain_index: int32 [L] for a complex (several chains as one record): which chain, 0..C-1, each
        residue is in, chains contiguous and in `chain_names` order; None for a single chain.
        A complex's residue_index jumps by at least 100 between chains (CHAIN_OFFSET), so the
        model's relative-position features put cross-chain pairs in their "different chain"
        bucket, as ProteinMPNN does.
    chain_names: the chain ids of a complex in record order (("A", "B")); () for a single chain.
    residue_ids: str [L], each residue's author number with its insertion code ("23", "52A"), ""
        for a residue the reader added to fill a gap; () where the source has no author numbering
        (chain sets). Lets users name residues as LigandMPNN does ("H52A"), whatever the fill.
    """

    name: str
    seq: str
    coords: np.ndarray
    mask: np.ndarray
    residue_index: np.ndarray
    num_chains: int = 1
    cath: tuple[str, ...] = ()
    cluster: str | None = None
    source: str = ""
    extra: dict = field(default_factory=dict)
    chain_index: np.ndarray | None = None
    chain_names: tuple[str, ...] = ()
    residue_ids: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def is_complex(self) -> bool:
        return self.chain_index is not None and len(self.chain_names) > 1

    def chain_positions(self) -> dict[str, np.ndarray]:
        """chain id -> 0-based indices into seq, in chain order.

        A single chain is named by chain_names[0] when set, else by the part of the name after
        the last "." ("1abc.A" -> "A"), else "A".
        """
        if self.chain_index is None:
            if self.chain_names:
                cid = self.chain_names[0]
            else:
                cid = self.name.rsplit(".", 1)[-1] if "." in self.name else "A"
            return {cid: np.arange(len(self.seq))}
        index = np.asarray(self.chain_index)
        return {cid: np.flatnonzero(index == i) for i, cid in enumerate(self.chain_names)}


def coordinate_outlier(coords: np.ndarray) -> str | None:
    """Where `coords` [L, atoms, 3] first holds a finite value with |x| > MAX_COORDINATE
    (limits.py; NaN and infinity are a missing atom, as observed_mask has it), as "residue I
    (1-based) atom A: V"; None when none."""
    far = np.abs(np.where(np.isfinite(coords), coords, 0.0)) > MAX_COORDINATE
    if not far.any():
        return None
    residue, atom, axis = (int(i) for i in np.argwhere(far)[0])
    return f"residue {residue + 1} atom {BACKBONE_ATOMS[atom]}: {float(coords[residue, atom, axis]):g}"


def observed_mask(coords: np.ndarray) -> np.ndarray:
    """True where all four backbone atoms have finite coordinates."""
    return np.isfinite(coords).all(axis=(1, 2))


def with_structure_atoms(record: ChainRecord, atoms: tuple[str, ...] = BACKBONE_ATOMS) -> ChainRecord:
    """`record` as a model reading `atoms` sees it (ModelConfig.input_atoms): `mask` True where
    those atoms are observed, so a CA-only model takes the residues of a CA-only file. Raises
    InputError (`missing_atoms`) naming the file and the atoms no residue has, when no residue
    has them all: a full-backbone model given a CA-only file would otherwise design nothing."""
    if tuple(atoms) == BACKBONE_ATOMS:
        observed = np.asarray(record.mask, dtype=bool)  # the reader's (all four atoms)
    else:
        columns = [BACKBONE_ATOMS.index(atom) for atom in atoms]
        observed = np.isfinite(np.asarray(record.coords)[:, columns]).all(axis=(1, 2))
    if not observed.any():
        present = np.isfinite(np.asarray(record.coords)).all(axis=-1).any(axis=0)  # [4]: atom seen anywhere
        missing = [atom for atom in atoms if not present[BACKBONE_ATOMS.index(atom)]]
        got = f"{', '.join(missing)} in no residue" if missing else f"no residue with all of {', '.join(atoms)}"
        if present[BACKBONE_ATOMS.index("CA")] and "CA" not in missing:
            got += " (a CA-only structure: design it with a CA-only model, e.g. proteinmpnn-ca:v_48_020)"
        raise InputError(
            record.source or record.name, f"record '{record.name}'", "coords",
            f"residues with {', '.join(atoms)} observed (the backbone atoms the model reads)", got,
            reason="missing_atoms", name=record.name,
        )  # fmt: skip
    if np.array_equal(observed, np.asarray(record.mask, dtype=bool)):
        return record
    return replace(record, mask=observed)


def infer_residue_index(coords: np.ndarray, gap: int = 1) -> np.ndarray:
    """0..L-1 with `gap` extra added after each C(i)-N(i+1) distance above the break threshold.

    Pairs with a missing C or N are not called breaks: the mask already says they are unobserved.
    """
    n = coords.shape[0]
    index = np.zeros(n, dtype=np.int32)
    if n > 1:
        delta = coords[1:, 0] - coords[:-1, 2]
        squared = np.einsum("ij,ij->i", delta, delta)  # NaN compares False: no break called
        np.cumsum(1 + (squared > PEPTIDE_BREAK_ANGSTROM**2) * gap, out=index[1:])
    return index


def chain_breaks(residue_index: np.ndarray) -> np.ndarray:
    """bool [L-1]: True between i and i+1 when the numbering jumps by more than 1."""
    return np.diff(residue_index) > 1
