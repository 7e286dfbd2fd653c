"""How much one input may make a reader allocate: a few bytes of input must never ask for
gigabytes (issue 23: a residue numbered 10^9, a 0.2 MB gzip holding one 256 MB line).

Each bound is a field of prep's config (`PrepConfig.max_line_bytes`, `max_file_bytes`,
`max_numbering_span`, `max_numbering_gap`: `invfold prep --max-line-bytes ...`) whose default is
here, so every other reader (design, score, export's sample) gets the same bounds. What is over a
bound is refused before it is allocated: a chain-set line or a chain is a counted skip
(`line_too_long`, `numbering_span`), a whole file a one-line InputError (`too_large`); a jump in a
chain's author numbering wider than `max_numbering_gap` is a renumbering, filled with nothing.

Coordinates: |x| of an atom may be at most MAX_COORDINATE Angstrom, what PDB's fixed 8.3f columns
hold (-999.999..9999.999): a chain with a larger one (mmCIF and chain-set files can hold any
number; infinity, like NaN, is a missing atom) is a counted skip (`coordinate_range`); prep's geometry check
(geometry.py) uses the same bound.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from invfold.errors import ConfigError

MIB = 2**20
MAX_COORDINATE = 9999.999  # Angstrom: the largest |x|, |y|, |z| of an atom read (a PDB column's most)


@dataclass(frozen=True)
class ReadLimits:
    """max_line_bytes: longest chain-set line (the longest line of the project's real 833-chain
        set is 51 KB for 493 residues, at most 112 bytes per residue: 16 MiB holds about 150,000),
        and longest entry of a TS50 list (decoded one entry at a time: ts50.py).
    max_file_bytes: largest file read, counted after decompression (structure files and split
        files, read whole; TS50 lists, read entry by entry); raise it for the very largest PDB entries.
    max_numbering_span: most residues a chain's numbering may span from its first to its last
        residue (gaps are filled with residues without coordinates; titin, the longest known
        chain, has about 35,000).
    max_numbering_gap: most residues filled into one gap of a chain's author numbering (read
        without a deposited sequence). ProteinMPNN's parser (protein_mpnn_utils.py,
        parse_PDB_biounits) fills every missing number from the lowest to the highest, without
        a bound: a last residue numbered 9999 adds thousands of X, fusion-style numbering
        (1-100, 1001-1160) hundreds. A wider jump is a renumbering, not missing residues: nothing
        is filled (the chain break still shows in residue_index, from the C-N distance) and the
        record counts it in extra["numbering_jumps"].
    """

    max_line_bytes: int = 16 * MIB
    max_file_bytes: int = 256 * MIB
    max_numbering_span: int = 100_000
    max_numbering_gap: int = 200

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            low = 0 if f.name == "max_numbering_gap" else 1  # 0: fill no gap at all
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{f.name}: expected an integer >= {low}, got {value!r}")


DEFAULT_LIMITS = ReadLimits()
