"""Reader for PDB and mmCIF files (plain or gzipped, local or remote) through gemmi.

What a record holds: the first model; one record per protein chain (a polymer gemmi types as a
peptide); the first alternative conformation; standard residues, with common modified residues
mapped to their parent through gemmi's residue table (MSE -> M, SEP -> S, ...) and counted in
`record.extra["modified"]`; other polymer residues (UNK, D-amino acids, ...) keep their place and
backbone as the unknown letter X (structural context for the model, out of the loss) and are
counted in `record.extra["unknown"]`.

One residue numbering with the jsonl reader: every residue missing between the first and the last
observed one becomes a residue without coordinates (counted in `record.extra["gap_filled"]`), as
ProteinMPNN's PDB parser does (`protein_mpnn_utils.py`, parse_PDB_biounits: residue numbers
min..max, a missing number becomes the gap letter with NaN coordinates). Where the file gives the
deposited sequence (mmCIF entity_poly_seq with label_seq_id, PDB SEQRES aligned by gemmi) the
missing residues keep their letters, as in CATH chain-set records; otherwise they are found from
author numbers (made strictly increasing: insertion codes 52, 52A, 53 become consecutive) and are
X, up to `max_numbering_gap` (limits.py, default 200) per gap: a wider jump (a last residue
numbered 9999, fusion-style 1-100 then 1001-1160) is renumbering, where upstream's parser fills
every number: nothing is filled there and `record.extra["numbering_jumps"]` counts it.
`residue_index` then comes from C(i)-N(i+1) distances, as for jsonl records, so a chain read
from its structure file and from a chain-set line with the same residues gives the same model
inputs.
Residue IDs: every residue keeps its author number and insertion code (`record.residue_ids`,
"52A"), so users can name residues as LigandMPNN does. Where the deposited sequence and the author
numbering fill gaps differently (Kabat skips such as a lambda chain's missing L10, or numbers
jumping without residues missing) the reader warns once per chain: 1-based positions follow the
deposited sequence.
Name: "<file stem>.<chain id>" ("_" for a blank chain id). With complexes=True all protein chains of
a file are one complex record named "<file stem>" (complexes.join_chains: chains in file order,
residue_index jumping by 100 between chains). Force-field names of standard residues
(HSD, HIE, CYX, ...) count as the standard residue.

Policy (see errors.py): a single file that is unreadable, holds no atoms, or has no protein chain
raises InputError. Inside a folder such a file is one Skip (reasons unreadable_structure,
not_a_structure, no_protein_chain, too_large, out_of_memory), or an InputError with strict=True;
an empty folder raises. A chain with an atom at |x| > MAX_COORDINATE Angstrom (limits.py) is a
`coordinate_range` skip. Bounds (limits.py): a file over `max_file_bytes` once decompressed is
`too_large`; a chain whose numbering spans more than `max_numbering_span` residues (a residue
numbered 10^9 would fill a billion-residue gap) is a `numbering_span` skip.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from collections import Counter
from collections.abc import Iterator

import numpy as np

from invfold import storage
from invfold.components.protein.alphabet import THREE_TO_ONE, UNKNOWN
from invfold.components.protein.complexes import join_chains
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.limits import DEFAULT_LIMITS, MAX_COORDINATE, ReadLimits
from invfold.components.protein.record import (
    BACKBONE_ATOMS,
    ChainRecord,
    coordinate_outlier,
    infer_residue_index,
    observed_mask,
)
from invfold.errors import ConfigError

log = logging.getLogger(__name__)

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
# PDB and mmCIF are ASCII formats: any other byte becomes "?" (one byte for one, so PDB columns stay)
_ASCII_ONLY = bytes(range(128)) + b"?" * 128
NUMBERINGS = ("seqres", "proteinmpnn")  # how 1-based positions are placed (read_structure)
STRUCTURE_PATTERNS = tuple(f"*.{ext}{gz}" for ext in ("pdb", "ent", "cif", "mmcif") for gz in ("", ".gz"))


def read_structures(
    path: str | os.PathLike,
    strict: bool = False,
    complexes: bool = False,
    limits: ReadLimits = DEFAULT_LIMITS,
    numbering: str = "seqres",
) -> Iterator[ChainRecord | Skip]:
    """Every protein chain of one structure file, or of every structure file in a folder (sorted);
    with complexes=True one complex record per file. numbering: as read_structure's."""
    if is_structure_name(path) or not storage.is_dir(path):
        yield from read_structure(path, strict, complexes, limits, numbering)
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
            try:
                chains = list(read_structure(file, strict, complexes, limits, numbering))
            except MemoryError:
                raise storage.out_of_memory(file, None) from None
        except InputError as err:
            if strict:
                raise
            yield Skip.from_error(err)
            continue
        yield from chains


def is_structure_name(path: str | os.PathLike) -> bool:
    return any(fnmatch.fnmatch(storage.basename(path).lower(), p) for p in STRUCTURE_PATTERNS)


def read_structure(
    path: str | os.PathLike,
    strict: bool = False,
    complexes: bool = False,
    limits: ReadLimits = DEFAULT_LIMITS,
    numbering: str = "seqres",
) -> Iterator[ChainRecord | Skip]:
    """The protein chains of one PDB/mmCIF file (first model); a protein chain with no standard or
    modified amino acid (e.g. all UNK) is a Skip, or an InputError with strict=True. With
    complexes=True the kept chains come as one complex record (Skips still come one by one).
    numbering: "seqres" places residues by the deposited sequence where the file has one;
    "proteinmpnn" by the author numbering alone, as ProteinMPNN's parse_PDB does (a skipped
    number filled with X even where SEQRES has no residue there)."""
    if numbering not in NUMBERINGS:
        raise ConfigError(f"numbering: expected one of {NUMBERINGS}, got {numbering!r}")
    try:
        structure = _parse(path, limits)
    except MemoryError:
        raise storage.out_of_memory(path, None) from None
    name = storage.strip_gz(storage.basename(path)).rsplit(".", 1)[0]
    chains = [(chain.name or BLANK_CHAIN_ID, chain.get_polymer()) for chain in structure[0]]
    chains = [(cid, poly) for cid, poly in chains if _is_protein(poly)]
    records: list[ChainRecord | Skip] = []
    for chain_id, polymer in chains:
        try:
            try:
                full = _full_sequence(structure, polymer) if numbering == "seqres" else None
                records.append(_record(path, name, chain_id, polymer, len(chains), full, limits))
            except MemoryError:
                raise storage.out_of_memory(path, f"chain '{chain_id}'", f"{name}.{chain_id}") from None
        except InputError as err:
            if strict:
                raise
            records.append(Skip.from_error(err))
    if not any(isinstance(r, ChainRecord) for r in records):
        skipped = next((r for r in records if isinstance(r, Skip)), None)
        raise InputError(
            path,
            None,
            None,
            "at least one protein chain with standard residues",
            "none in the first model" + (f" (skipped: {skipped.reason}: {skipped.message})" if skipped else ""),
            reason="no_protein_chain",
        )
    if complexes:
        kept = [r for r in records if isinstance(r, ChainRecord)]
        ids = [r.name.rsplit(".", 1)[-1] for r in kept]
        if len(set(ids)) != len(ids):  # e.g. chain A, then B, then A again: no complex has two chains A
            raise InputError(
                path, None, "chains", "each protein chain id once in the first model", f"chains {ids}",
                reason="duplicate_chain",
            )  # fmt: skip
        yield from (r for r in records if isinstance(r, Skip))
        yield join_chains(name, kept, source=str(path)) if len(kept) > 1 else kept[0]
        return
    yield from records


def _parse(path, limits: ReadLimits):
    import gemmi

    data = storage.read_bytes(path, limits.max_file_bytes)
    if not data.strip():
        raise InputError(path, None, None, "a PDB or mmCIF file", "an empty file", reason="empty_file")
    if not data.isascii():  # gemmi hands back names as UTF-8: a stray byte in a chain id would not decode
        data = data.translate(_ASCII_ONLY)
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
    structure.assign_label_seq_id(force=False)  # PDB files: align SEQRES to the modelled residues
    structure.remove_alternative_conformations()
    return structure


def _is_protein(polymer) -> bool:
    import gemmi

    return len(polymer) > 0 and polymer.check_polymer_type() in (gemmi.PolymerType.PeptideL, gemmi.PolymerType.PeptideD)


def _full_sequence(structure, polymer) -> list[str] | None:
    """The chain's deposited sequence (mmCIF entity_poly_seq, PDB SEQRES) as residue names, or None."""
    import gemmi

    entity = structure.get_entity_of(polymer)
    if entity is None or not entity.full_sequence:
        return None
    return [gemmi.Entity.first_mon(name) for name in entity.full_sequence]


def _record(
    path, stem: str, chain_id: str, polymer, num_chains: int, full_sequence=None, limits: ReadLimits = DEFAULT_LIMITS
) -> ChainRecord:
    letters, coords, numbers, label_seq, author_ids = [], [], [], [], []
    modified, unknown = Counter(), Counter()
    for residue in polymer:
        letter = residue_letter(residue.name)
        if letter is None:
            unknown[residue.name] += 1
            letter = UNKNOWN
        elif residue.name not in THREE_TO_ONE and residue.name not in FORCE_FIELD_ALIASES:
            modified[residue.name] += 1
        letters.append(letter)
        if residue.seqid.num is None:  # a blank or non-numeric residue-number field
            raise InputError(
                path,
                f"chain '{chain_id}'",
                "residue numbers",
                "an author residue number for every residue",
                f"none for residue {len(numbers) + 1} ({residue.name})",
                reason="wrong_type",
                name=f"{stem}.{chain_id}",
            )
        numbers.append(residue.seqid.num)
        author_ids.append(f"{residue.seqid.num}{residue.seqid.icode.strip()}")
        label_seq.append(residue.label_seq)
        xyz = np.full((len(BACKBONE_ATOMS), 3), np.nan, dtype=np.float32)
        for i, atom_name in enumerate(BACKBONE_ATOMS):
            atom = residue.find_atom(atom_name, "*")
            if atom is not None:
                xyz[i] = (atom.pos.x, atom.pos.y, atom.pos.z)
        coords.append(xyz)
    if sum(unknown.values()) == len(letters):
        raise InputError(
            path,
            f"chain '{chain_id}'",
            "residues",
            "at least one standard or modified amino acid",
            ", ".join(f"{n} x{c}" for n, c in sorted(unknown.items())),
            reason="no_standard_residues",
            name=f"{stem}.{chain_id}",
        )
    seq, coords = "".join(letters), np.stack(coords)
    outlier = coordinate_outlier(coords)
    if outlier is not None:
        raise InputError(
            path,
            f"chain '{chain_id}'",
            "coordinates",
            f"|x|, |y|, |z| <= {MAX_COORDINATE} Angstrom",
            outlier,
            reason="coordinate_range",
            name=f"{stem}.{chain_id}",
        )
    positions = np.array([n if n is not None else -1 for n in label_seq], dtype=np.int64)
    jumps = 0
    if (
        full_sequence
        and positions.min() >= 1
        and (np.diff(positions) > 0).all()
        and positions[-1] <= len(full_sequence)
    ):
        # the deposited sequence names the missing residues' letters
        gap_letters = [residue_letter(name) or UNKNOWN for name in full_sequence[positions[0] - 1 : positions[-1]]]
        seq, coords, filled = fill_numbering_gaps(seq, coords, positions, gap_letters)
        placed = positions - positions[0]
        numbering = increasing_numbering(numbers)
        if not np.array_equal(numbering - numbering[0], placed):
            log.warning(
                "%s chain '%s': the deposited sequence (SEQRES) places its %d modelled residues in %d positions, "
                "the author numbering (%s..%s, insertion codes and skips) in %d: 1-based positions follow the "
                "deposited sequence (position 1 = residue %s%s); residue IDs such as %s%s name residues unambiguously",
                path, chain_id, len(numbers), int(placed[-1]) + 1, author_ids[0], author_ids[-1],
                int(numbering[-1] - numbering[0]) + 1, chain_id, author_ids[0], chain_id, author_ids[-1],
            )  # fmt: skip
    else:
        numbering, jumps = bounded_gaps(increasing_numbering(numbers), limits.max_numbering_gap)
        if jumps:
            log.warning(
                "%s chain '%s': %d jump(s) in the author numbering wider than %d residues (e.g. fusion-style or "
                "offset numbering) are read as renumbering, not missing residues: nothing is filled there "
                "(limit max_numbering_gap; prep: --max-numbering-gap)",
                path, chain_id, jumps, limits.max_numbering_gap,
            )  # fmt: skip
        span = int(numbering[-1]) - int(numbering[0]) + 1
        if span > limits.max_numbering_span:
            raise InputError(
                path,
                f"chain '{chain_id}'",
                "residue numbers",
                f"a numbering span of at most {limits.max_numbering_span:,} residues "
                "(limit max_numbering_span; prep: --max-numbering-span)",
                f"{len(numbers)} residues numbered {numbers[0]}..{numbers[-1]} after insertion codes "
                f"({span:,} residues with the gaps filled)",
                reason="numbering_span",
                name=f"{stem}.{chain_id}",
            )
        seq, coords, filled = fill_numbering_gaps(seq, coords, numbering)
        placed = numbering - numbering[0]
    residue_ids = [""] * len(seq)
    for i, label in zip(placed.tolist(), author_ids, strict=True):
        residue_ids[i] = label
    extra = {}
    if modified:
        extra["modified"] = dict(sorted(modified.items()))
    if unknown:
        extra["unknown"] = dict(sorted(unknown.items()))
    if filled:
        extra["gap_filled"] = filled
    if jumps:
        extra["numbering_jumps"] = jumps
    return ChainRecord(
        name=f"{stem}.{chain_id}",
        seq=seq,
        coords=coords,
        mask=observed_mask(coords),
        residue_index=infer_residue_index(coords),
        num_chains=num_chains,
        source=f"{path}#{chain_id}",
        extra=extra,
        residue_ids=tuple(residue_ids),
    )


def fill_numbering_gaps(
    seq: str, coords: np.ndarray, numbers: np.ndarray, gap_letters: list[str] | None = None
) -> tuple[str, np.ndarray, int]:
    """(seq, coords, residues added) with a residue without coordinates for every number missing
    between the first and the last (`numbers` strictly increasing): its letter from `gap_letters`
    (one per number from the first to the last) when given, else X."""
    positions = np.asarray(numbers) - numbers[0]
    length = int(positions[-1]) + 1
    if length == len(seq):
        return seq, coords, 0
    letters = np.array(gap_letters, dtype="<U1") if gap_letters else np.full(length, UNKNOWN, dtype="<U1")
    letters[positions] = list(seq)
    filled = np.full((length, *coords.shape[1:]), np.nan, dtype=coords.dtype)
    filled[positions] = coords
    return "".join(letters), filled, length - len(seq)


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


def bounded_gaps(numbering: np.ndarray, max_gap: int) -> tuple[np.ndarray, int]:
    """(numbering, jumps): strictly increasing `numbering` with every gap of more than `max_gap`
    missing numbers closed (the next residue follows directly), and how many were closed; the
    residues a gap fill may add are then at most max_gap per residue read."""
    steps = np.diff(numbering)
    wide = steps > max_gap + 1
    if not wide.any():
        return numbering, 0
    steps[wide] = 1
    return numbering[0] + np.concatenate([[0], np.cumsum(steps)]), int(wide.sum())


def increasing_numbering(numbers: list[int]) -> np.ndarray:
    """Author numbers shifted by the least offset that keeps them strictly increasing: insertion
    codes (52, 52A, 52B, 53 -> 52, 53, 54, 55) and restarts become consecutive, gaps stay gaps."""
    index = np.empty(len(numbers), dtype=np.int64)
    offset = 0
    previous = None
    for i, number in enumerate(numbers):
        if previous is not None and number + offset <= previous:
            offset = previous + 1 - number
        previous = index[i] = number + offset
    return index
