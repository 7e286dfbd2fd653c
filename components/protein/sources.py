"""Pick the reader for a protein set from its location (local path or remote URI).

- a folder -> every PDB/mmCIF file in it (structure.read_structures);
- *.jsonl or *.jsonl.gz -> chain set (jsonl.read_chain_set);
- *.json (or .json.gz) -> TS50-style list (ts50.read_ts50; a split file is refused with a clear error);
- *.pdb, *.ent, *.cif, *.mmcif (or .gz) -> that one structure file.
Anything else raises InputError naming the accepted kinds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from invfold import storage
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.limits import DEFAULT_LIMITS, ReadLimits
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import read_structures
from invfold.components.protein.ts50 import read_ts50

Reader = Callable[..., Iterator[ChainRecord | Skip]]
ACCEPTED = "a folder of PDB/mmCIF files, *.jsonl[.gz], *.json (TS50 list), *.pdb/*.ent/*.cif/*.mmcif[.gz]"


def reader_for(uri: str | os.PathLike) -> Reader:
    # Names first: asking an HTTP server whether a large file is a folder would download it.
    name = storage.strip_gz(storage.basename(uri).lower())
    if name.endswith(".jsonl"):
        return read_chain_set
    if name.endswith(".json"):
        return read_ts50
    if name.endswith((".pdb", ".ent", ".cif", ".mmcif")) or storage.is_dir(uri):
        return read_structures
    if not storage.exists(uri):
        raise InputError(uri, None, None, "an existing file or folder", "nothing there", reason="missing_file")
    raise InputError(uri, None, None, ACCEPTED, f"a file named {storage.basename(uri)!r}", reason="unknown_format")


def read_protein_set(
    uri: str | os.PathLike,
    strict: bool = False,
    complexes: bool = False,
    limits: ReadLimits = DEFAULT_LIMITS,
    numbering: str = "seqres",
) -> Iterator[ChainRecord | Skip]:
    """Records (and Skips) from any supported protein set; see the module docstring. complexes:
    the chains of one entry as one complex record (structure files, chain sets; a TS50 list has
    single chains). limits: what one input may make a reader allocate (limits.py). numbering:
    how structure files place 1-based positions (structure.read_structure)."""
    reader = reader_for(uri)
    if reader is read_ts50:
        return reader(uri, strict=strict, limits=limits)
    if reader is read_structures:
        return reader(uri, strict=strict, complexes=complexes, limits=limits, numbering=numbering)
    return reader(uri, strict=strict, complexes=complexes, limits=limits)
