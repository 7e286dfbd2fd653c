"""Real chains of the bundled sample written as PDB/mmCIF files through gemmi (no files checked in)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

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


def write_chains(path: Path, chains: list[ChainSpec]) -> Path:
    """The chains as a PDB or mmCIF file (by suffix): backbone atoms only, first model."""
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
            residue = gemmi.Residue()
            residue.name = "UNK" if i in unknown else ONE_TO_THREE[letter]
            residue.seqid = gemmi.SeqId(spec.number_from + i, " ")
            residue.het_flag = "A"
            for name, pos in zip(BACKBONE_ATOMS, xyz, strict=True):
                if name in spec.drop_atoms.get(i, ()) or not np.isfinite(pos).all():
                    continue
                atom = gemmi.Atom()
                atom.name, atom.element, atom.pos = name, gemmi.Element(name[0]), gemmi.Position(*map(float, pos))
                residue.add_atom(atom)
            chain.add_residue(residue)
        model.add_chain(chain)
    structure.add_model(model)
    structure.setup_entities()
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
