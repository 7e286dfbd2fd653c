"""Designed sequences threaded onto the input backbone, as PDB or mmCIF files (gemmi writes them).

One file per design ("designs.pdb" -> designs_0.pdb, designs_1.pdb, ...): side-chain packers
(PyRosetta, LigandMPNN's packer) and structure-comparison tools take one model per file. Each file
holds the observed residues of the record (all four backbone atoms N, CA, C, O; unobserved residues
are left out) with the designed residue names; no CB or side chain is written (a packer rebuilds
them; keeping the input's CB only where the letter is unchanged would mix packed and unpacked
residues). Chain ids are the record's; residue numbers and insertion codes are the input file's
author numbering when the input is a PDB/mmCIF file (matched by CA position), else the 1-based
position in the chain's sequence.
"""

from __future__ import annotations

import os
from pathlib import Path

import gemmi
import numpy as np

from invfold.components.design import positions as pos
from invfold.components.protein.record import BACKBONE_ATOMS, ChainRecord
from invfold.components.protein.structure import is_structure_name
from invfold.errors import ConfigError

ONE_TO_THREE = {
    gemmi.find_tabulated_residue(n).one_letter_code.upper(): n
    for n in "ALA CYS ASP GLU PHE GLY HIS ILE LYS LEU MET ASN PRO GLN ARG SER THR VAL TRP TYR".split()
}
ONE_TO_THREE["X"] = "UNK"
SUFFIXES = (".pdb", ".cif")


def structure_paths(out: str | os.PathLike, count: int) -> list[Path]:
    """designs.pdb -> [designs_0.pdb, designs_1.pdb, ...] (the suffix picks the format)."""
    path = Path(out)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"--out-structure {out}: expected a .pdb or .cif file name (the suffix picks the format)")
    return [path.with_name(f"{path.stem}_{i}{path.suffix}") for i in range(count)]


def author_numbering(source: str | os.PathLike, record: ChainRecord) -> dict[int, tuple[str, gemmi.SeqId]]:
    """Index into record.seq -> (author chain id, SeqId) for observed residues whose CA lies on a CA
    of the input structure file's first model; {} when the source is not a PDB/mmCIF file."""

    if not is_structure_name(source) or not os.path.exists(source):
        return {}
    model = gemmi.read_structure(str(source))[0]
    found: dict[tuple, tuple[str, gemmi.SeqId]] = {}
    for chain in model:
        for residue in chain:
            atom = residue.find_atom("CA", "*")
            if atom is not None:
                key = (chain.name, *_rounded([atom.pos.x, atom.pos.y, atom.pos.z]))
                found.setdefault(key, (chain.name, gemmi.SeqId(residue.seqid.num, residue.seqid.icode)))
    out = {}
    for cid, index in pos.chain_positions(record).items():
        for i in index:
            if record.mask[i]:
                key = (cid, *_rounded(record.coords[i, 1]))
                if key in found:
                    out[int(i)] = found[key]
    return out


def _rounded(xyz) -> tuple[float, ...]:
    """Coordinates as the readers store them (float32), to 0.01 A: the key that matches a residue."""
    return tuple(np.round(np.asarray(xyz, dtype=np.float32).astype(np.float64), 2).tolist())


def thread(record: ChainRecord, sequence: str, numbering: dict | None = None) -> gemmi.Structure:
    """A gemmi Structure: `sequence` (one letter per residue of record) on record's observed backbone."""
    if len(sequence) != len(record):
        raise ValueError(f"{record.name}: sequence of {len(sequence)} letters for {len(record)} residues")
    numbering = numbering or {}
    structure = gemmi.Structure()
    structure.name = pos.entry_name(record)
    model = gemmi.Model("1")
    serial = 0
    for cid, index in pos.chain_positions(record).items():
        chain = gemmi.Chain(cid)
        for k, i in enumerate(index):
            if not record.mask[i]:
                continue  # no backbone to thread onto
            residue = gemmi.Residue()
            residue.name = ONE_TO_THREE.get(sequence[i], "UNK")
            residue.seqid = numbering[int(i)][1] if int(i) in numbering else gemmi.SeqId(k + 1, " ")
            residue.entity_type = gemmi.EntityType.Polymer
            residue.het_flag = "A"
            for name, xyz in zip(BACKBONE_ATOMS, record.coords[i], strict=True):
                if not np.isfinite(xyz).all():
                    continue  # an atom the file lacks (a CA-only structure designed by a CA-only model)
                serial += 1
                atom = gemmi.Atom()
                atom.name, atom.element = name, gemmi.Element(name[0])
                atom.pos = gemmi.Position(*map(float, xyz))
                atom.occ, atom.serial = 1.0, serial
                residue.add_atom(atom)
            chain.add_residue(residue)
        if len(chain):
            model.add_chain(chain)
    structure.add_model(model)
    structure.setup_entities()
    return structure


def write_structures(out: str | os.PathLike, record: ChainRecord, sequences: list[str], source: str = "") -> list[Path]:
    """One PDB/mmCIF file per sequence (structure_paths); returns the paths written."""
    paths = structure_paths(out, len(sequences))
    numbering = author_numbering(source, record) if source else {}
    for path, sequence in zip(paths, sequences, strict=True):
        structure = thread(record, sequence, numbering)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix.lower() == ".cif":
            structure.make_mmcif_document().write_file(str(path))
        else:
            structure.write_pdb(str(path))
    return paths
