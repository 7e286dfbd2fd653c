"""ProteinMPNN's JSON option files of `invfold design` (--fixed-positions-json, --omit-aa-jsonl,
--bias-by-res, --bias-aa, --tied-positions, --pssm-jsonl, --chain-id-jsonl): read as the data
files are read, and checked whole before anything is designed.

Reading goes through `invfold.storage` under the data files' bounds (ReadLimits.max_file_bytes,
components/protein/limits.py), and every way a file can be unreadable (missing, too large, not
UTF-8, not JSON, nested past the parser's limit, an entry on two lines) is one `InputError`
naming the file and line. The shape of every entry is then checked here, so a malformed file is
one error line (exit 2) before the model is loaded, never the same error repeated as a skip of
every record of a batch. What depends on the record (its entry being there, its chains, lengths
and residue IDs) is checked when the record is designed (constraints.load_constraints).

Light on purpose (no torch, no numpy): the CLI checks the files before any model code is imported.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from invfold import storage
from invfold.components.protein.limits import DEFAULT_LIMITS
from invfold.errors import InputError
from invfold.errors import shown as _shown

MPNN_ALPHABET = "ACDEFGHIKLMNPQRSTVWYX"  # ProteinMPNN's column order: ours plus X


@dataclass
class OptionFile:
    """A decoded option file: its top-level object and the line each key came from (jsonl;
    None for a .json file read whole)."""

    path: str
    data: Any
    lines: dict[str, int]

    def fail(self, key: str | None, field: str | None, expected: str, got: Any = None) -> InputError:
        shown = None if got is None else _shown(got)
        line = self.lines.get(key) if key is not None else None
        return InputError(self.path, line, field, expected, shown, reason="invalid_option_file")


def read_option_file(path: str) -> OptionFile:
    """`.json`: one JSON document; otherwise JSON lines, one object a line, merged (a key on two
    lines is an error). Gzip is detected, a UTF-8 BOM tolerated; a blank file is an error."""
    if storage.strip_gz(storage.basename(path).lower()).endswith(".json"):
        return OptionFile(path, storage.load_json(path, DEFAULT_LIMITS.max_file_bytes), {})
    data = storage.read_bytes(path, DEFAULT_LIMITS.max_file_bytes)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    merged: dict = {}
    lines: dict[str, int] = {}
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except RecursionError:
            raise storage.too_deep(path, n) from None
        except MemoryError:
            raise storage.out_of_memory(path, n) from None
        except ValueError as err:  # JSONDecodeError, UnicodeDecodeError (a binary file)
            detail = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
            raise InputError(path, n, None, "one JSON object a line", f"invalid JSON ({detail})",
                             reason="invalid_json") from None  # fmt: skip
        if not isinstance(value, dict):
            raise InputError(path, n, None, "a JSON object", type(value).__name__, reason="invalid_option_file")
        for key in value:
            if key in lines:
                raise InputError(path, n, str(key), f"one line per entry (also on line {lines[key]})",
                                 reason="invalid_option_file")  # fmt: skip
            lines[key] = n
        merged.update(value)
    if not lines:
        raise InputError(path, None, None, "at least one JSON object", "an empty file", reason="empty_file")
    return OptionFile(path, merged, lines)


def check_option_files(cfg) -> None:
    """Read and check every option file a DesignConfig names (InputError at the first mistake)."""
    for path, check in (
        (cfg.fixed_positions_json, _fixed),
        (cfg.omit_aa_jsonl, _omit),
        (cfg.bias_by_res, _bias_by_res),
        (cfg.tied_positions, _tied),
        (cfg.pssm_jsonl, _pssm),
        (cfg.chain_id_jsonl, _chain_ids),
    ):
        if path:
            _entries(read_option_file(path), check)
    if cfg.bias_aa:
        check_bias_aa(read_option_file(cfg.bias_aa))


def check_bias_aa(f: OptionFile) -> None:
    """{"A": -1.1, ...}: letters of ProteinMPNN's alphabet, each with a finite number."""
    if not isinstance(f.data, dict):
        raise f.fail(None, None, '{"A": -1.1, ...}', type(f.data).__name__)
    for letter, value in f.data.items():
        if letter not in MPNN_ALPHABET or not _finite(value):
            raise f.fail(letter, letter, f"a letter of {MPNN_ALPHABET} with a finite number", value)


def _entries(f: OptionFile, check) -> None:
    """Every entry of an {entry: value} file through check(value, fail(where, expected, got))."""
    if not isinstance(f.data, dict):
        raise f.fail(None, None, "an object keyed by entry name", type(f.data).__name__)
    for entry, value in f.data.items():

        def fail(where: str, expected: str, got: Any, entry=entry) -> InputError:
            return f.fail(entry, f"{entry}{where}", expected, got)

        check(value, fail)


def _chains(value, fail) -> dict:
    if not isinstance(value, dict):
        raise fail("", "{chain: ...}", value)
    return value


def _positions(value, where: str, fail) -> None:
    if not isinstance(value, list) or not all(isinstance(p, int | str) and not isinstance(p, bool) for p in value):
        raise fail(where, 'a list of 1-based positions or residue IDs ("42C")', value)


def _fixed(value, fail) -> None:
    for chain, positions in _chains(value, fail).items():
        _positions(positions, f"/{chain}", fail)


def _omit(value, fail) -> None:
    for chain, pairs in _chains(value, fail).items():
        if not isinstance(pairs, list):
            raise fail(f"/{chain}", 'a list of [[positions], "LETTERS"] pairs', pairs)
        for k, item in enumerate(pairs):
            here = f"/{chain}/{k}"
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], str)):
                raise fail(here, '[[positions], "LETTERS"]', item)
            if set(item[1]) - set(MPNN_ALPHABET):
                raise fail(here, f"letters of {MPNN_ALPHABET}", item[1])
            _positions(item[0], here, fail)


def _row(row, where: str, fail, widths=(20, 21)) -> None:
    if not isinstance(row, list) or len(row) not in widths or not all(_finite(v) for v in row):
        raise fail(where, f"{' or '.join(map(str, widths))} finite numbers in the order {MPNN_ALPHABET}", row)


def _bias_by_res(value, fail) -> None:
    for chain, rows in _chains(value, fail).items():
        if isinstance(rows, dict):  # by residue ID
            for key, row in rows.items():
                _row(row, f"/{chain}/{key}", fail)
        elif isinstance(rows, list):
            for k, row in enumerate(rows):
                _row(row, f"/{chain}/{k}", fail)
        else:
            raise fail(f"/{chain}", "a list of rows (one per residue) or {residue ID: row}", rows)


def _tied(value, fail) -> None:
    if not isinstance(value, list):
        raise fail("", "a list of {chain: positions} groups", value)
    for k, group in enumerate(value):
        if not isinstance(group, dict) or not group:
            raise fail(f"/{k}", '{"A": [1], "B": [1]}', group)
        for chain, members in group.items():
            here = f"/{k}/{chain}"
            if isinstance(members, list) and len(members) == 2 and all(isinstance(v, list) for v in members):
                _positions(members[0], here, fail)
                if len(members[1]) != len(members[0]) or not all(_finite(w) for w in members[1]):
                    raise fail(here, "one finite weight per position", members[1])
            else:
                _positions(members, here, fail)


def _pssm(value, fail) -> None:
    for chain, tables in _chains(value, fail).items():
        here = f"/{chain}"
        if not tables:
            continue  # no PSSM for this chain, as upstream reads it
        if not isinstance(tables, dict) or not {"pssm_coef", "pssm_bias", "pssm_log_odds"} <= set(tables):
            raise fail(here, "{pssm_coef, pssm_bias, pssm_log_odds}", tables)
        coef = tables["pssm_coef"]
        if not isinstance(coef, list) or not all(_finite(v) and 0 <= v <= 1 for v in coef):
            raise fail(f"{here}/pssm_coef", "numbers in [0, 1], one per residue", coef)
        for key in ("pssm_bias", "pssm_log_odds"):
            rows = tables[key]
            if not isinstance(rows, list) or len(rows) != len(coef):
                raise fail(f"{here}/{key}", f"{len(coef)} rows of 21 numbers (as pssm_coef has)", rows)
            for k, row in enumerate(rows):
                _row(row, f"{here}/{key}/{k}", fail, widths=(21,))
                if key == "pssm_bias" and min(row) < 0:
                    raise fail(f"{here}/{key}/{k}", "probabilities (numbers >= 0)", row)


def _chain_ids(value, fail) -> None:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(part, list) for part in value)):
        raise fail("", "[[designed chains], [fixed chains]]", value)
    if not value[0] or not all(isinstance(c, str) and c for c in [*value[0], *value[1]]):
        raise fail("", "at least one designed chain id, and chain ids as strings", value)


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
