"""Reader for TS50-style JSON lists: `[{"name", "seq", "coords": L x 4 x 3 (N, CA, C, O)}, ...]`.

Entries are parsed like chain-set lines (the CATH atom-dict form of `coords` is accepted too;
NaN tokens and nulls mark missing atoms). The file is small and read whole.

Policy (see errors.py): a missing, empty, non-JSON or non-list file raises InputError (a split
file given here says so); a bad entry is a Skip with the jsonl reasons, or an InputError with
strict=True. Locations read "record 3" (0-based position in the list). A file over
`limits.max_file_bytes` (decompressed) is refused before it is decoded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from invfold import storage
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.jsonl import parse_object
from invfold.components.protein.limits import DEFAULT_LIMITS, ReadLimits
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.splits import SPLIT_NAMES


def read_ts50(
    path: str | os.PathLike, strict: bool = False, limits: ReadLimits = DEFAULT_LIMITS
) -> Iterator[ChainRecord | Skip]:
    entries = storage.load_json(path, limits.max_file_bytes)
    if isinstance(entries, dict) and set(entries) & (set(SPLIT_NAMES) | {"cath_nodes"}):
        raise InputError(
            path,
            None,
            None,
            "a JSON list of protein records",
            "a split file (train/validation/test lists); pass it as the split file",
            reason="not_a_protein_set",
        )
    if not isinstance(entries, list):
        raise InputError(
            path, None, None, "a JSON list of protein records", type(entries).__name__, reason="not_a_protein_set"
        )
    if not entries:
        raise InputError(path, None, None, "at least one record", "an empty list", reason="empty_file")
    for i, entry in enumerate(entries):
        try:
            try:
                record = parse_object(entry, path, f"record {i}", source=f"{path}#{i}")
            except MemoryError:
                raise storage.out_of_memory(path, f"record {i}") from None
        except InputError as err:
            if strict:
                raise
            yield Skip.from_error(err)
            continue
        yield record
