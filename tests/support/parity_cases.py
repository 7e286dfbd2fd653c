"""Real structures of the bundled sample written as PDB/mmCIF files for parity with ProteinMPNN's
own parser: each case is a real chain (or complex) with the feature a parity test needs.

Residue i of a record is written with author number 1 + i, so residues left out become numbering
gaps (missing residues, as in a deposited file) and a C-N break between consecutive observed
residues keeps consecutive numbers (a break ProteinMPNN's parser cannot see).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import ChainRecord
from tests.support.structures import SAMPLE, ChainSpec, write_chains


def sample_records() -> dict[str, ChainRecord]:
    return {r.name: r for r in read_chain_set(SAMPLE) if isinstance(r, ChainRecord)}


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
        # 1A8O (biopython's test data) with 25 of its 70 residues left out: a missing loop
        "missing_loop": [ChainSpec("A", records["1A8O.A"], residues=[*range(20), *range(45, 70)])],
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


def write_parity_pdbs(folder: Path, names) -> dict[str, Path]:
    """name -> a PDB file of that parity case, written into folder."""
    cases = parity_cases(sample_records())
    return {name: write_chains(folder / f"{name}.pdb", cases[name]) for name in names}


def ca_only(specs: list[ChainSpec]) -> list[ChainSpec]:
    """The same chains with CA atoms alone (a CA-only structure file; a residue whose CA the case
    drops has no atom left)."""
    return [
        replace(spec, drop_atoms={i: ("N", "C", "O", *spec.drop_atoms.get(i, ())) for i in range(len(spec.record))})
        for spec in specs
    ]
