"""Real structures of the bundled sample written as PDB/mmCIF files for parity with ProteinMPNN's
own parser: each case is a real chain (or complex) with the feature a parity test needs.

Residue i of a record is written with author number 1 + i, so residues left out become numbering
gaps (missing residues, as in a deposited file) and a C-N break between consecutive observed
residues keeps consecutive numbers (a break ProteinMPNN's parser cannot see).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import gemmi
import numpy as np

from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import BACKBONE_ATOMS, ChainRecord
from tests.support.structures import ONE_TO_THREE, SAMPLE


@dataclass
class ChainSpec:
    chain_id: str
    record: ChainRecord
    residues: Iterable[int] | None = None  # indices of the record to write (default: all with atoms)
    unknown: Iterable[int] = ()  # written as UNK (an unknown residue with its backbone)
    drop_atoms: dict[int, tuple[str, ...]] = field(default_factory=dict)  # partial backbones


def sample_records() -> dict[str, ChainRecord]:
    return {r.name: r for r in read_chain_set(SAMPLE) if isinstance(r, ChainRecord)}


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
            residue.seqid = gemmi.SeqId(1 + i, " ")
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


def parity_cases(records: dict[str, ChainRecord]) -> dict[str, list[ChainSpec]]:
    """name -> chains to write. Every chain is a real chain of the bundled sample."""
    small = records["2F91_A.A"]
    return {
        # a C-N break between consecutively numbered residues, nothing missing
        "break": [ChainSpec("A", records["1BML_A.A"])],
        # a C-N break and 30 missing residues (numbering gaps)
        "break_and_gaps": [ChainSpec("A", records["1SGF_A.A"])],
        # 41 observed residues, 5 missing: fewer than k = 48, every residue a neighbour
        "small": [ChainSpec("A", small, residues=[*range(15), *range(20, 46)])],
        # 45 observed, 25 missing, 70 in all: missing residues fill the neighbour list, tied in distance
        "small_many_missing": [ChainSpec("A", small, residues=[*range(25), *range(50, 70)])],
        # two chains of one entry, written in the order D, B (upstream sorts chains by label)
        "complex": [ChainSpec("D", records["1BD2.D"]), ChainSpec("B", records["1BD2.B"])],
        # unknown residues (UNK with a backbone) and partial backbones (atoms missing)
        "unknown": [
            ChainSpec(
                "A",
                records["1SPJ_A.A"],
                unknown=(3, 40, 41, 120),
                drop_atoms={10: ("O",), 60: ("N", "C", "O"), 61: ("CA",)},
            )
        ],
    }
