"""Reader for the CATH `chain_set.jsonl` format (plain or gzipped), streamed one line at a time.

One JSON object per line: `name` (str), `seq` (str, L letters), `coords` ({"N", "CA", "C", "O"}:
each L x [x, y, z], a missing atom as a bare NaN token, null, or a null triple; an L x 4 x 3 list
is accepted too), optional `num_chains` (int), `CATH` (list of str), `cluster` (40%-identity
cluster id). Other keys (e.g. `source`) are kept in `record.extra`. Residue letters are not checked
here (prep filters them). A UTF-8 BOM is tolerated (json decodes bytes as utf-8-sig); blank lines
are ignored. The format has no numbering, so chain breaks are inferred from the
C(i)-N(i+1) distance.

ProteinMPNN's helper_scripts/parse_multiple_chains.py lines are read too: `name` (the entry),
`num_of_chains`, `seq` (all chains concatenated; not needed), and per chain X `seq_chain_X` and `coords_chain_X`
({"N_chain_X", "CA_chain_X", "C_chain_X", "O_chain_X"}: L x [x, y, z]); a "-" (a residue the
structure lacks) becomes the unknown letter X. Such a line is one complex record (complexes.py),
chains in the line's key order; with complexes=False its chains are yielded one by one
("<name>.X"). With complexes=True, the CATH-style lines of one entry ("1abc.A", "1abc.B"),
wherever they are in the file, are joined into one complex record named "1abc"
(complexes.group_chain_set).

Policy (see errors.py): a missing, empty or corrupt-gzip file raises InputError; a bad line is a
Skip (reasons: invalid_json, not_an_object, missing_field, wrong_type, wrong_shape,
length_mismatch, empty_chain; line_too_long past `limits.max_line_bytes`, read past without
holding it; out_of_memory) or an InputError with strict=True.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from itertools import chain

import numpy as np
import orjson

from invfold import storage
from invfold.components.protein.alphabet import UNKNOWN
from invfold.components.protein.complexes import group_chain_set, join_chains, split_complex
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.limits import DEFAULT_LIMITS, MAX_COORDINATE, ReadLimits
from invfold.components.protein.record import (
    BACKBONE_ATOMS,
    ChainRecord,
    coordinate_outlier,
    infer_residue_index,
    observed_mask,
)

KNOWN_KEYS = {"name", "seq", "coords", "num_chains", "CATH", "cluster"}
NAN_TRIPLE = [math.nan] * 3


def read_chain_set(
    path: str | os.PathLike, strict: bool = False, complexes: bool = False, limits: ReadLimits = DEFAULT_LIMITS
) -> Iterator[ChainRecord | Skip]:
    """Yield one ChainRecord (or Skip) per non-blank line, in file order; with complexes=True the
    lines of one entry as one complex record (see the module docstring)."""
    records = _read_lines(path, strict, limits)
    if complexes:
        yield from group_chain_set(records)
        return
    for record in records:
        if isinstance(record, ChainRecord) and record.chain_index is not None:
            yield from split_complex(record)
        else:
            yield record


def _read_lines(path: str | os.PathLike, strict: bool, limits: ReadLimits) -> Iterator[ChainRecord | Skip]:
    records = 0
    with storage.open_binary(path) as stream:
        lineno = 0
        try:
            for raw in storage.read_lines(stream, limits.max_line_bytes):
                lineno += 1
                if raw is not None and raw.isspace():
                    continue
                records += 1
                try:
                    if raw is None:
                        raise storage.too_large(path, lineno, limits.max_line_bytes, "max_line_bytes", "a line")
                    try:
                        record = parse_line(raw, path, lineno)
                    except MemoryError:
                        raise storage.out_of_memory(path, lineno) from None
                except InputError as err:
                    if strict:
                        raise
                    yield Skip.from_error(err)
                    continue
                yield record
        except storage.GZIP_ERRORS as err:
            raise storage.gzip_error(path, err) from None
    if records == 0:
        raise InputError(path, None, None, "at least one JSON record", "an empty file", reason="empty_file")


def parse_line(raw: bytes, path: str | os.PathLike, lineno: int) -> ChainRecord:
    """One chain-set line to a record; raises InputError (with a reason) for anything malformed.

    Fast path: orjson (several times faster than `json`, which matters on CATH-sized inputs) on the
    line with bare NaN tokens turned into null, which it reads as missing just the same. Anything the
    fast path cannot take as is (invalid JSON, Infinity, a string that had "NaN" in it, a record
    that fails validation) is redone with the standard parser, so results and messages are the
    standard parser's.
    """
    source = f"{path}:{lineno}"
    has_nan = b"NaN" in raw
    try:
        obj = orjson.loads(raw.replace(b"NaN", b"null") if has_nan else raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if not (has_nan and _mentions_null(obj)):
            try:
                return parse_object(obj, path, lineno, source)
            except InputError:
                pass
    try:
        obj = json.loads(raw)
    except RecursionError:  # orjson refuses depth > 1024; the standard parser recurses until this
        raise storage.too_deep(path, lineno) from None
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        detail = f"{err.msg} at column {err.colno}" if isinstance(err, json.JSONDecodeError) else str(err)
        if not raw.endswith(b"\n"):
            detail += "; the line has no end (truncated file?)"
        raise InputError(
            path, lineno, None, "one JSON object per line", f"invalid JSON ({detail})", reason="invalid_json"
        ) from None
    return parse_object(obj, path, lineno, source)


def _mentions_null(obj) -> bool:
    """True when a string outside the coordinates contains "null" (it may have been "NaN")."""
    stack = [v for k, v in obj.items() if k != "coords"] if isinstance(obj, dict) else [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if "null" in value:
                return True
        elif isinstance(value, dict):
            stack.extend(value.values())
            stack.extend(value.keys())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def parse_object(obj, path: str | os.PathLike, location: int | str, source: str) -> ChainRecord:
    """One decoded chain-set object (a jsonl line or a TS50 list entry) to a record."""
    if not isinstance(obj, dict):
        raise InputError(path, location, None, "a JSON object", type(obj).__name__, reason="not_an_object")

    name = obj.get("name")

    def fail(field: str, expected: str, got: object, reason: str) -> InputError:
        return InputError(
            path, location, field, expected, got, reason=reason, name=name if isinstance(name, str) else None
        )

    if "coords" not in obj and any(isinstance(k, str) and k.startswith("seq_chain_") for k in obj):
        return _parse_multiple_chains(obj, path, location, source, fail)
    for key in ("name", "seq", "coords"):
        if key not in obj:
            raise fail(key, "a value", "nothing (key missing)", "missing_field")
    if not isinstance(name, str) or not name:
        raise fail("name", "a non-empty string", _describe(name), "wrong_type")
    seq = obj["seq"]
    if not isinstance(seq, str):
        raise fail("seq", "a string", _describe(seq), "wrong_type")
    if not seq:
        raise fail("seq", "at least one residue", "an empty sequence", "empty_chain")
    coords = _coords(obj["coords"], len(seq), fail)
    _check_range(coords, "coords", fail)

    num_chains = obj.get("num_chains", 1)
    if num_chains is None:
        num_chains = 1
    if not isinstance(num_chains, int) or isinstance(num_chains, bool) or num_chains < 1:
        raise fail("num_chains", "a positive integer", _describe(num_chains), "wrong_type")
    cath = obj.get("CATH") or []
    if not isinstance(cath, list) or not all(isinstance(c, str) for c in cath):
        raise fail("CATH", "a list of strings", _describe(cath), "wrong_type")
    cluster = obj.get("cluster")
    if isinstance(cluster, bool) or not isinstance(cluster, (str, int, type(None))):
        raise fail("cluster", "a string or integer id", _describe(cluster), "wrong_type")

    return ChainRecord(
        name=name,
        seq=seq,
        coords=coords,
        mask=observed_mask(coords),
        residue_index=infer_residue_index(coords),
        num_chains=num_chains,
        cath=tuple(cath),
        cluster=None if cluster is None else str(cluster),
        source=source,
        extra={k: v for k, v in obj.items() if k not in KNOWN_KEYS},
    )


PMPNN_ATOMS = ("N", "CA", "C", "O")
PMPNN_KEYS = {"name", "seq", "num_of_chains"}


def _parse_multiple_chains(obj: dict, path, location, source: str, fail) -> ChainRecord:
    """A ProteinMPNN parse_multiple_chains.py object -> one complex record (chains in key order)."""
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise fail("name", "a non-empty string", _describe(obj.get("name")), "wrong_type")
    ids = [k.removeprefix("seq_chain_") for k in obj if isinstance(k, str) and k.startswith("seq_chain_")]
    chains = []
    for cid in ids:
        seq = obj[f"seq_chain_{cid}"]
        if not isinstance(seq, str):
            raise fail(f"seq_chain_{cid}", "a string", _describe(seq), "wrong_type")
        if not seq:
            raise fail(f"seq_chain_{cid}", "at least one residue", "an empty sequence", "empty_chain")
        seq = seq.replace("-", UNKNOWN)
        field = f"coords_chain_{cid}"
        atoms = obj.get(field)
        if atoms is None:
            raise fail(field, "an object with N, CA, C, O atom lists", "nothing (key missing)", "missing_field")
        if not isinstance(atoms, dict):
            raise fail(field, "an object with N, CA, C, O atom lists", _describe(atoms), "wrong_type")
        coords = np.empty((len(seq), 4, 3), dtype=np.float32)
        for i, atom in enumerate(PMPNN_ATOMS):
            key = f"{atom}_chain_{cid}"
            if key not in atoms:
                raise fail(f"{field}.{key}", "a list of [x, y, z] triples", "nothing (key missing)", "missing_field")
            coords[:, i, :] = _atom_column(atoms[key], f"{field}.{key}", len(seq), fail)
        _check_range(coords, field, fail)
        chains.append(
            ChainRecord(
                name=f"{name}.{cid}",
                seq=seq,
                coords=coords,
                mask=observed_mask(coords),
                residue_index=infer_residue_index(coords),
                source=f"{source}#{cid}",
            )
        )
    num_chains = obj.get("num_of_chains", len(chains))
    if not isinstance(num_chains, int) or isinstance(num_chains, bool) or num_chains < 1:
        raise fail("num_of_chains", "a positive integer", _describe(num_chains), "wrong_type")
    record = join_chains(name, chains, ids, source=source)
    record.num_chains = max(num_chains, len(chains))
    record.extra = {
        k: v for k, v in obj.items() if k not in PMPNN_KEYS and not k.startswith(("seq_chain_", "coords_chain_"))
    }
    return record


def _check_range(coords: np.ndarray, field: str, fail) -> None:
    outlier = coordinate_outlier(coords)
    if outlier is not None:
        raise fail(field, f"|x|, |y|, |z| <= {MAX_COORDINATE} Angstrom", outlier, "coordinate_range")


def _coords(value, length: int, fail) -> np.ndarray:
    """float32 [L, 4, 3] from the atom dict (or an L x 4 x 3 list); see `coords_from_residues`."""
    if isinstance(value, dict):
        missing = [a for a in BACKBONE_ATOMS if a not in value]
        if missing:
            raise fail(f"coords.{missing[0]}", "a list of [x, y, z] triples", "nothing (key missing)", "missing_field")
        out = np.empty((length, len(BACKBONE_ATOMS), 3), dtype=np.float32)
        for i, atom in enumerate(BACKBONE_ATOMS):
            out[:, i, :] = _atom_column(value[atom], f"coords.{atom}", length, fail)
        return out
    if isinstance(value, list):
        return coords_from_residues(value, "coords", length, fail)
    raise fail("coords", "an object with N, CA, C, O atom lists", _describe(value), "wrong_type")


def coords_from_residues(rows, field: str, length: int, fail) -> np.ndarray:
    """float32 [L, 4, 3] from an L x 4 x 3 nested list (the TS50 layout)."""
    if not isinstance(rows, list):
        raise fail(field, f"a list of L={length} residues of 4 [x, y, z] triples", _describe(rows), "wrong_type")
    if len(rows) != length:
        raise fail(field, f"a list of L={length} residues of 4 [x, y, z] triples", len(rows), "length_mismatch")
    try:
        if set(map(len, rows)) == {4}:
            triples = list(chain.from_iterable(rows))
            if set(map(len, triples)) == {3}:
                flat = np.fromiter(chain.from_iterable(triples), dtype=np.float32, count=12 * length)
                return flat.reshape(length, 4, 3)
    except (TypeError, ValueError, OverflowError):
        pass
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 4:
            raise fail(
                field,
                "4 [x, y, z] triples (N, CA, C, O) per residue",
                f"{_describe(row)} at residue {i}",
                "wrong_shape",
            )
    return np.stack([_slow_column([row[a] for row in rows], field, fail) for a in range(4)], axis=1)


def _atom_column(column, field: str, length: int, fail) -> np.ndarray:
    """float32 [L, 3] for one atom.

    Fast path: one C-level pass over the flattened triples (numbers, NaN tokens, and nulls inside a
    triple all convert here); only nulls in place of a triple, ragged or non-numeric entries take
    the per-residue pass that also names the culprit. As in numpy, numeric strings convert.
    """
    if not isinstance(column, list):
        raise fail(field, f"a list of L={length} [x, y, z] triples", _describe(column), "wrong_type")
    if len(column) != length:
        raise fail(field, f"a list of L={length} [x, y, z] triples", len(column), "length_mismatch")
    try:
        if set(map(len, column)) == {3}:
            return np.fromiter(chain.from_iterable(column), dtype=np.float32, count=3 * length).reshape(length, 3)
    except (TypeError, ValueError, OverflowError):
        pass
    return _slow_column(column, field, fail)


def _slow_column(column: list, field: str, fail) -> np.ndarray:
    fixed = []
    for i, triple in enumerate(column):
        if triple is None:
            fixed.append(NAN_TRIPLE)
        elif isinstance(triple, list) and len(triple) == 3:
            fixed.append(triple)
        else:
            raise fail(field, "[x, y, z] triples (or null)", f"{_describe(triple)} at residue {i}", "wrong_shape")
    try:
        return np.array(fixed, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        pass
    for i, triple in enumerate(fixed):
        for v in triple:
            if not _is_coordinate(v):
                raise fail(field, "numbers, NaN or null", f"{_describe(v)} at residue {i}", "wrong_type")
    raise AssertionError("unreachable: a column that failed conversion has no bad value")


def _is_coordinate(value) -> bool:
    """A value numpy turns into one float32 (np.float32([]) is an empty array, not an error)."""
    if isinstance(value, (list, dict)):
        return False
    try:
        np.float32(value if value is not None else math.nan)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _describe(value) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, str):
        return f"a string {value[:20]!r}" if value else "an empty string"
    if value is None:
        return "null"
    return f"{type(value).__name__} {value!r}"[:60]
