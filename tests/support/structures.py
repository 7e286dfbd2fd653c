"""Real chains of the bundled sample written as PDB/mmCIF files through gemmi (no files checked in)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gemmi
import numpy as np

from invfold.components.protein.complexes import split_complex
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import BACKBONE_ATOMS, ChainRecord

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "invfold" / "data" / "sample_chain_set.jsonl.gz"
ONE_TO_THREE = {
    gemmi.find_tabulated_residue(n).one_letter_code.upper(): n
    for n in "ALA CYS ASP GLU PHE GLY HIS ILE LYS LEU MET ASN PRO GLN ARG SER THR VAL TRP TYR".split()
}


def sample_complex(entry: str) -> ChainRecord:
    """One multi-chain entry of the bundled sample (1BD2, 3KPR, 7CFN, 6WG6, 1tii, ...) as a complex."""
    return next(r for r in read_chain_set(SAMPLE, complexes=True) if isinstance(r, ChainRecord) and r.name == entry)


@dataclass
class ChainSpec:
    chain_id: str
    record: ChainRecord
    residues: Iterable[int] | None = None  # indices of the record to write (default: all with atoms)
    unknown: Iterable[int] = ()  # written as UNK (an unknown residue with its backbone)
    drop_atoms: dict[int, tuple[str, ...]] = field(default_factory=dict)  # partial backbones
    number_from: int = 1  # author number of the record's first residue
    residue_ids: list[str] | None = None  # author number + insertion code per index ("52A"); None: number_from + i


def backbone_residue(name: str, number: int, atoms: list[tuple[str, Any]], icode: str = " ") -> gemmi.Residue:
    """Residue `name` with author number `number` (and insertion code), holding the (atom name, xyz) atoms given."""
    residue = gemmi.Residue()
    residue.name, residue.seqid = name, gemmi.SeqId(number, icode)
    for atom_name, pos in atoms:
        atom = gemmi.Atom()
        atom.name, atom.element, atom.pos = atom_name, gemmi.Element(atom_name[0]), gemmi.Position(*map(float, pos))
        residue.add_atom(atom)
    return residue


def write_chains(path: Path, chains: list[ChainSpec], seqres: bool = False) -> Path:
    """The chains as a PDB or mmCIF file (by suffix): backbone atoms only, first model; with
    seqres, each chain's written residues are also its deposited sequence (SEQRES)."""
    structure = gemmi.Structure()
    model = gemmi.Model("1")
    for spec in chains:
        record = spec.record
        chain = gemmi.Chain(spec.chain_id)
        wanted = range(len(record)) if spec.residues is None else spec.residues
        unknown = set(spec.unknown)
        for i in wanted:
            letter, xyz = record.seq[i], record.coords[i]
            if letter not in ONE_TO_THREE or not np.isfinite(xyz).any():
                continue
            atoms = [
                (name, pos)
                for name, pos in zip(BACKBONE_ATOMS, xyz, strict=True)
                if name not in spec.drop_atoms.get(i, ()) and np.isfinite(pos).all()
            ]
            if spec.residue_ids is None:
                number, icode = spec.number_from + i, " "
            else:
                number, icode = int(spec.residue_ids[i].rstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")), spec.residue_ids[i][-1]
                icode = icode if icode.isalpha() else " "
            residue = backbone_residue("UNK" if i in unknown else ONE_TO_THREE[letter], number, atoms, icode)
            residue.het_flag = "A"
            chain.add_residue(residue)
        model.add_chain(chain)
    structure.add_model(model)
    structure.setup_entities()
    if seqres:
        for entity in structure.entities:
            chain = next(c for c in structure[0] if c.get_polymer().subchain_id() in entity.subchains)
            entity.full_sequence = [r.name for r in chain]
    if path.suffix == ".cif":
        structure.make_mmcif_document().write_file(str(path))
    else:
        structure.write_pdb(str(path))
    return path


def write_structure(path: Path, chains: list[ChainRecord]) -> Path:
    """The chains' observed backbones (chain id = the part of each name after the last "."; numbered
    from 1, unobserved residues left out) as a PDB or mmCIF file, by the path's suffix."""
    return write_chains(path, [ChainSpec(record.name.rsplit(".", 1)[-1], record) for record in chains])


def write_sample_complex(path: Path, entry: str) -> Path:
    return write_structure(path, split_complex(sample_complex(entry)))
