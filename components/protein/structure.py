"""Reader for PDB and mmCIF files (plain or gzipped, local or remote) through gemmi.

What a record holds: the first model; one record per protein chain (a polymer gemmi types as a
peptide); the first alternative conformation; standard residues, with common modified residues
mapped to their parent through gemmi's residue table (MSE -> M, SEP -> S, ...) and counted in
`record.extra["modified"]`; other polymer residues (UNK, D-amino acids, ...) dropped and counted in
`record.extra["dropped"]`. `residue_index` is the author numbering, shifted just enough to stay
strictly increasing, so insertion codes (52, 52A, 53) become consecutive and real gaps stay gaps.
Name: "<file stem>.<chain id>" ("_" for a blank chain id). Force-field names of standard residues
(HSD, HIE, CYX, ...) count as the standard residue.

Policy (see errors.py): a single file that is unreadable, holds no atoms, or has no protein chain
raises InputError. Inside a folder such a file is one Skip (reasons unreadable_structure,
not_a_structure, no_protein_chain), or an InputError with strict=True; an empty folder raises.
"""

from __future__ import annotations

import fnmatch
import os
from collections import Counter
from collections.abc import Iterator

import numpy as np

from invfold import storage

from .alphabet import THREE_TO_ONE
from .errors import InputError, Skip
from .record import BACKBONE_ATOMS, ChainRecord, observed_mask

# Simulation force fields name protonation states of standard residues differently (CHARMM HSD,
# AMBER HIE, CYX, ...): the same residues, so they map silently, unlike modified residues.
FORCE_FIELD_ALIASES = {
    "HSD": "H",
    "HSE": "H",
    "HSP": "H",
    "HID": "H",
    "HIE": "H",
    "HIP": "H",
    "HIS1": "H",
    "HISA": "H",
    "HISB": "H",
    "HISD": "H",
    "HISE": "H",
    "HISH": "H",
    "CYX": "C",
    "CYM": "C",
    "CYS2": "C",
    "ASH": "D",
    "ASPH": "D",
    "GLH": "E",
    "GLUH": "E",
    "LYN": "K",
    "LSN": "K",
    "ARN": "R",
}
BLANK_CHAIN_ID = "_"  # simulation files often leave the chain column blank
STRUCTURE_PATTERNS = tuple(f"*.{ext}{gz}" for ext in ("pdb", "ent", "cif", "mmcif") for gz in ("", ".gz"))


def read_structures(path: str | os.PathLike, strict: bool = False) -> Iterator[ChainRecord | Skip]:
    """Every protein chain of one structure file, or of every structure file in a folder (sorted)."""
    if is_structure_name(path) or not storage.is_dir(path):
        yield from read_structure(path, strict)
        return
    files = storage.list_files(path, STRUCTURE_PATTERNS)
    if not files:
        raise InputError(
            path,
            None,
            None,
            f"a folder with structure files ({', '.join(STRUCTURE_PATTERNS[::2])}, optionally .gz)",
            "none",
            reason="empty_file",
        )
    for file in files:
        try:
            chains = list(read_structure(file, strict))
        except InputError as err:
            if strict:
                raise
            yield Skip.from_error(err)
            continue
        yield from chains


def is_structure_name(path: str | os.PathLike) -> bool:
    return any(fnmatch.fnmatch(storage.basename(path).lower(), p) for p in STRUCTURE_PATTERNS)


def read_structure(path: str | os.PathLike, strict: bool = False) -> Iterator[ChainRecord | Skip]:
    """The protein chains of one PDB/mmCIF file (first model); a protein chain with no standard or
    modified amino acid (e.g. all UNK) is a Skip, or an InputError with strict=True."""
    structure = _parse(path)
    name = storage.strip_gz(storage.basename(path)).rsplit(".", 1)[0]
    chains = [(chain.name or BLANK_CHAIN_ID, chain.get_polymer()) for chain in structure[0]]
    chains = [(cid, poly) for cid, poly in chains if _is_protein(poly)]
    records: list[ChainRecord | Skip] = []
    for chain_id, polymer in chains:
        try:
            records.append(_record(path, name, chain_id, polymer, len(chains)))
        except InputError as err:
            if strict:
                raise
            records.append(Skip.from_error(err))
    if not any(isinstance(r, ChainRecord) for r in records):
        raise InputError(
            path,
            None,
            None,
            "at least one protein chain with standard residues",
            "none in the first model",
            reason="no_protein_chain",
        )
    yield from records


def _parse(path):
    import gemmi

    data = storage.read_bytes(path)
    if not data.strip():
        raise InputError(path, None, None, "a PDB or mmCIF file", "an empty file", reason="empty_file")
    lower = storage.strip_gz(storage.basename(path).lower())
    is_cif = lower.endswith((".cif", ".mmcif")) or (
        not lower.endswith((".pdb", ".ent")) and data.lstrip()[:5] == b"data_"
    )
    try:
        if is_cif:
            structure = gemmi.read_structure_string(data, format=gemmi.CoorFormat.Mmcif)
        else:
            try:
                structure = gemmi.read_pdb_string(data)
            except RuntimeError:
                # Old files put serial numbers in columns 79-80, where the charge now lives.
                structure = gemmi.read_pdb_string(data, max_line_length=78)
    except (RuntimeError, ValueError) as err:
        raise InputError(
            path,
            None,
            None,
            "a readable PDB or mmCIF file",
            str(err).splitlines()[0][:200],
            reason="unreadable_structure",
        ) from None
    if len(structure) == 0 or not any(len(chain) for chain in structure[0]):
        raise InputError(path, None, None, "a PDB or mmCIF file with atoms", "no atoms", reason="not_a_structure")
    structure.setup_entities()
    structure.remove_alternative_conformations()
    return structure


def _is_protein(polymer) -> bool:
    import gemmi

    return len(polymer) > 0 and polymer.check_polymer_type() in (gemmi.PolymerType.PeptideL, gemmi.PolymerType.PeptideD)


def _record(path, stem: str, chain_id: str, polymer, num_chains: int) -> ChainRecord:
    letters, coords, numbers = [], [], []
    modified, dropped = Counter(), Counter()
    for residue in polymer:
        letter = residue_letter(residue.name)
        if letter is None:
            dropped[residue.name] += 1
            continue
        if residue.name not in THREE_TO_ONE and residue.name not in FORCE_FIELD_ALIASES:
            modified[residue.name] += 1
        letters.append(letter)
        numbers.append(residue.seqid.num)
        xyz = np.full((len(BACKBONE_ATOMS), 3), np.nan, dtype=np.float32)
        for i, atom_name in enumerate(BACKBONE_ATOMS):
            atom = residue.find_atom(atom_name, "*")
            if atom is not None:
                xyz[i] = (atom.pos.x, atom.pos.y, atom.pos.z)
        coords.append(xyz)
    if not letters:
        raise InputError(
            path,
            f"chain '{chain_id}'",
            "residues",
            "at least one standard or modified amino acid",
            ", ".join(f"{n} x{c}" for n, c in sorted(dropped.items())),
            reason="no_standard_residues",
            name=f"{stem}.{chain_id}",
        )
    coords = np.stack(coords)
    extra = {}
    if modified:
        extra["modified"] = dict(sorted(modified.items()))
    if dropped:
        extra["dropped"] = dict(sorted(dropped.items()))
    return ChainRecord(
        name=f"{stem}.{chain_id}",
        seq="".join(letters),
        coords=coords,
        mask=observed_mask(coords),
        residue_index=increasing_numbering(numbers),
        num_chains=num_chains,
        source=f"{path}#{chain_id}",
        extra=extra,
    )


def residue_letter(name: str) -> str | None:
    """One-letter code of a standard residue, or of the parent of a modified L-amino acid in gemmi's
    table (MSE -> M); None for anything else (UNK, D-amino acids, ligands)."""
    if name in THREE_TO_ONE:
        return THREE_TO_ONE[name]
    if name in FORCE_FIELD_ALIASES:
        return FORCE_FIELD_ALIASES[name]
    import gemmi

    info = gemmi.find_tabulated_residue(name)
    if info is None or info.kind != gemmi.ResidueKind.AA:
        return None
    code = info.one_letter_code
    return code.upper() if code.islower() and code.upper() in "ACDEFGHIKLMNPQRSTVWY" else None


def increasing_numbering(numbers: list[int]) -> np.ndarray:
    """Author numbers shifted by the least offset that keeps them strictly increasing: insertion
    codes (52, 52A, 52B, 53 -> 52, 53, 54, 55) and restarts become consecutive, gaps stay gaps."""
    index = np.empty(len(numbers), dtype=np.int32)
    offset = 0
    previous = None
    for i, number in enumerate(numbers):
        if previous is not None and number + offset <= previous:
            offset = previous + 1 - number
        previous = index[i] = number + offset
    return index
