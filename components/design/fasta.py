"""FASTA in (sequences to score) with errors that name the record and its line."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from invfold import storage
from invfold.components.protein.alphabet import ALPHABET, UNKNOWN
from invfold.components.protein.limits import DEFAULT_LIMITS
from invfold.errors import InputError

# ProteinMPNN writes "/" between chains of a complex (protein_mpnn_run.py; parse_fasta omits it).
CHAIN_SEPARATOR = "/"


@dataclass(frozen=True)
class FastaEntry:
    name: str
    sequence: str  # upper case, separators removed
    line: int  # 1-based line of the header
    chain_lengths: tuple[int, ...] | None = None  # lengths between "/" separators, when given


def read_fasta(path: str | os.PathLike) -> list[FastaEntry]:
    """Every record of a FASTA file; letters outside the 20 amino acids and X raise InputError, and
    so does a file over the data files' size bound (ReadLimits.max_file_bytes)."""
    text = storage.read_bytes(path, DEFAULT_LIMITS.max_file_bytes).decode("utf-8", errors="replace")
    entries: list[FastaEntry] = []
    name, line_no, parts = None, 0, []

    def close():
        if name is None:
            return
        raw = "".join(parts).upper()
        if not raw.replace(CHAIN_SEPARATOR, ""):
            raise InputError(path, f"line {line_no}, record '{name}'", "sequence", "letters after the header", "none")
        for i, letter in enumerate(raw.replace(CHAIN_SEPARATOR, "")):
            if letter not in ALPHABET + UNKNOWN:
                raise InputError(
                    path,
                    f"line {line_no}, record '{name}'",
                    "sequence",
                    f"letters of {ALPHABET} or {UNKNOWN}",
                    f"{letter!r} at position {i + 1}",
                )
        lengths = tuple(len(p) for p in raw.split(CHAIN_SEPARATOR)) if CHAIN_SEPARATOR in raw else None
        entries.append(FastaEntry(name, raw.replace(CHAIN_SEPARATOR, ""), line_no, lengths))

    for i, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith(">"):
            close()
            name, line_no, parts = (line[1:].split() or [f"record{len(entries) + 1}"])[0], i, []
        elif name is None:
            raise InputError(path, i, None, "a FASTA header line starting with '>'", repr(line[:40]))
        else:
            parts.append("".join(line.split()))
    close()
    if not entries:
        raise InputError(path, None, None, "at least one FASTA record", "none", reason="empty_file")
    return numbered(entries)


def numbered(entries: list[FastaEntry]) -> list[FastaEntry]:
    """A name that heads several records (a design FASTA: every sample of a target is `>7cth.A
    sample=I ...`) becomes NAME_1, NAME_2, ... in file order, so each score row says which it is."""
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.name] = counts.get(entry.name, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for entry in entries:
        if counts[entry.name] > 1:
            seen[entry.name] = seen.get(entry.name, 0) + 1
            entry = dataclasses.replace(entry, name=f"{entry.name}_{seen[entry.name]}")
        out.append(entry)
    return out
