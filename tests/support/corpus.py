"""Inputs for prep tests, written into tmp_path: good chains from the synthetic generator and the
bad-input corpus (each case a small protein set with one defect)."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from invfold.components.protein.alphabet import THREE_TO_ONE
from invfold.components.protein.synthetic import SyntheticConfig, generate_chains
from tests.support.builders import ATOMS, pdb_text


def good_entries(n: int, seed: int = 0) -> list[dict]:
    """n well-formed chain-set objects (40-120 residues, no gaps), distinct names."""
    cfg = SyntheticConfig(
        num_chains=n,
        seed=seed,
        min_length=40,
        max_length=120,
        median_length=70,
        gap_fraction=0.0,
        break_fraction=0.0,
        family_size=1.0,
    )
    return [entry for entry, _ in generate_chains(cfg)]


def write_lines(path: Path, lines: list[str], gz: bool = False) -> Path:
    data = "".join(lines).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def line(obj: dict) -> str:
    return json.dumps(obj) + "\n"  # json.dumps writes NaN tokens for missing atoms


def write_splits(path: Path, **splits) -> Path:
    path.write_text(json.dumps({k: splits.get(k, []) for k in ("train", "validation", "test")}))
    return path


def entry_pdb(entry: dict | None, waters: int = 3) -> str:
    """A PDB file (written by the one `pdb_text` helper) for a chain-set entry's backbone as chain A
    (or no protein), plus some waters."""
    three = {one: three for three, one in THREE_TO_ONE.items()}
    chains = {}
    if entry:
        xyz = np.stack([np.asarray(entry["coords"][atom], dtype=float) for atom in ATOMS], axis=1)
        chains["A"] = [(three[letter], i + 1, " ", xyz[i]) for i, letter in enumerate(entry["seq"])]
    chains["W"] = [("HOH", w + 1, " ", np.array([[w * 3.0, 0.0, 0.0]])) for w in range(waters)]
    return pdb_text(chains)


@dataclass
class Case:
    """One bad input. build(tmp) -> (input, split file or None). default: the drop reason counted
    (with how many) or, prefixed "error:", the InputError reason raised; strict: the same for
    strict mode. message: text the error must contain (file name, field, ...)."""

    name: str
    build: Callable[[Path], tuple[Path, Path | None]]
    default: str
    strict: str
    dropped: int = 1
    message: tuple[str, ...] = ()
    overrides: dict = field(default_factory=dict)


GOOD = 6  # chains besides the bad one: three CATH topologies, enough for prep to make a split
BAD_LINE = f"set.jsonl:{GOOD + 1}"


def _jsonl(bad_line: Callable[[dict], str], gz: bool = False):
    def build(tmp: Path):
        good = good_entries(GOOD + 1)
        lines = [line(e) for e in good[:GOOD]] + [bad_line(good[GOOD])]
        return write_lines(tmp / ("set.jsonl.gz" if gz else "set.jsonl"), lines, gz), None

    return build


def _with(**changes):
    return lambda e: line({**e, **changes})


def _coords_with(atom, value):
    return lambda e: line({**e, "coords": {**e["coords"], atom: value(e["coords"][atom])}})


def _moved(change):
    """A line whose coordinates are changed by change(xyz [L, 4, 3] float64 array, in place)."""

    def bad(e):
        xyz = np.stack([np.asarray(e["coords"][a], dtype=float) for a in ("N", "CA", "C", "O")], axis=1)
        change(xyz)
        return line({**e, "coords": {a: xyz[:, k].tolist() for k, a in enumerate(("N", "CA", "C", "O"))}})

    return bad


def _far(xyz):
    xyz[5, 1] = 1e30  # one CA far outside any structure: distances overflow float32


def _stretched(xyz):
    xyz[5, 0] = xyz[5, 1] + [4.0, 0.0, 0.0]  # N 4 A from its CA


def _squeezed(xyz):
    xyz[6] = xyz[5] + [1.0, 0.0, 0.0]  # residue 6 one Angstrom from residue 5


def _doubled(xyz):
    xyz[20] = xyz[5]  # residue 20 written on top of residue 5


def _truncated(tmp: Path):
    good = good_entries(GOOD + 1)
    last = line(good[GOOD])
    return write_lines(tmp / "set.jsonl", [line(e) for e in good[:GOOD]] + [last[: len(last) // 2]]), None


def _bom(tmp: Path):
    good = good_entries(GOOD)
    path = tmp / "set.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(line(e) for e in good).encode())
    return path, None


def _no_observed(e):
    nan = [[math.nan] * 3] * len(e["seq"])
    return line({**e, "coords": {a: nan for a in ("N", "CA", "C", "O")}})


def _duplicate(tmp: Path):
    good = good_entries(GOOD)
    return write_lines(tmp / "set.jsonl", [line(e) for e in good] + [line(good[1])]), None


def _absent(tmp: Path):
    good = good_entries(4)
    path = write_lines(tmp / "set.jsonl", [line(e) for e in good])
    names = [e["name"] for e in good]
    return path, write_splits(
        tmp / "splits.json", train=names[:2] + ["9zzz.A", "9zzy.A"], validation=names[2:3], test=names[3:] + ["9zzx.B"]
    )


def _overlap(tmp: Path):
    good = good_entries(3)
    path = write_lines(tmp / "set.jsonl", [line(e) for e in good])
    names = [e["name"] for e in good]
    return path, write_splits(tmp / "splits.json", train=names, test=names[2:])


def _empty(tmp: Path):
    return write_lines(tmp / "set.jsonl", []), None


def _corrupt_gzip(tmp: Path):
    good = good_entries(3)
    data = gzip.compress("".join(line(e) for e in good).encode(), mtime=0)
    path = tmp / "set.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    return path, None


def _pdb_folder(tmp: Path):
    folder = tmp / "structures"
    folder.mkdir()
    for i, entry in enumerate(good_entries(3)):
        (folder / f"good{i}.pdb").write_text(entry_pdb(entry))
    (folder / "waters.pdb").write_text(entry_pdb(None, waters=5))
    return folder, None


def _pdb_file(tmp: Path):
    path = tmp / "waters.pdb"
    path.write_text(entry_pdb(None, waters=5))
    return path, None


CASES = [
    Case("truncated last line", _truncated, "invalid_json", "error:invalid_json", message=(BAD_LINE, "truncated")),
    Case(
        "invalid json",
        _jsonl(lambda e: line(e)[:-3] + "]]\n"),
        "invalid_json",
        "error:invalid_json",
        message=(BAD_LINE, "invalid JSON"),
    ),
    Case("byte order mark", _bom, "", "", dropped=0),
    Case(
        "wrong type", _jsonl(_with(seq=123)), "wrong_type", "error:wrong_type", message=(BAD_LINE, "'seq'", "a string")
    ),
    Case(
        "wrong coordinate shape",
        _jsonl(_coords_with("CA", lambda c: [xyz[:2] for xyz in c])),
        "wrong_shape",
        "error:wrong_shape",
        message=(BAD_LINE, "coords.CA"),
    ),
    Case(
        "sequence/coordinate length mismatch",
        _jsonl(lambda e: line({**e, "seq": e["seq"] + "AAA"})),
        "length_mismatch",
        "error:length_mismatch",
        message=(BAD_LINE, "coords.N"),
    ),
    Case(
        "unknown letters",
        _jsonl(lambda e: line({**e, "seq": "B" + e["seq"][1:]})),
        "unknown_letters",
        "unknown_letters",
    ),
    Case(
        "invalid letters",
        _jsonl(lambda e: line({**e, "seq": "1" + e["seq"][1:]})),
        "invalid_letters",
        "error:invalid_letters",
        message=(BAD_LINE, "'seq'", "upper-case"),
    ),
    Case(
        "chain with no observed residue",
        _jsonl(_no_observed),
        "no_observed_residue",
        "error:no_observed_residue",
        message=(BAD_LINE, "'coords'"),
    ),
    Case(
        "coordinate far outside any structure",
        _jsonl(_moved(_far)),
        "coordinate_range",  # the reader's bound (protein/limits.py), before prep's geometry check
        "error:coordinate_range",
        message=(BAD_LINE, "'coords'", "1e+30"),
    ),
    Case(
        "backbone bond of 4 A",
        _jsonl(_moved(_stretched)),
        "implausible_bond_length",
        "error:implausible_bond_length",
        message=(BAD_LINE, "coords.N-CA", "residue 5"),
    ),
    Case(
        "consecutive CA atoms 1 A apart",
        _jsonl(_moved(_squeezed)),
        "implausible_ca_distance",
        "error:implausible_ca_distance",
        message=(BAD_LINE, "coords.CA", "residues 5 and 6"),
    ),
    Case(
        "atoms on top of each other",
        _jsonl(_moved(_doubled)),
        "overlapping_atoms",
        "error:overlapping_atoms",
        message=(BAD_LINE, "'coords'", "residue 5", "residue 20"),
    ),
    Case("duplicate names", _duplicate, "duplicate_name", "error:duplicate_name", message=(BAD_LINE, "'name'")),
    Case(
        "split names absent from the set",
        _absent,
        "absent:3",
        "error:absent_from_set",
        dropped=0,
        message=("splits.json", "3 absent", "9zzz.A"),
    ),
    Case(
        "overlapping splits",
        _overlap,
        "error:overlapping_splits",
        "error:overlapping_splits",
        message=("splits.json", "both 'train' and 'test'"),
    ),
    Case("empty file", _empty, "error:empty_file", "error:empty_file", message=("set.jsonl", "empty")),
    Case("corrupt gzip", _corrupt_gzip, "error:corrupt_gzip", "error:corrupt_gzip", message=("set.jsonl.gz", "gzip")),
    Case(
        "folder with a PDB file without protein",
        _pdb_folder,
        "no_protein_chain",
        "error:no_protein_chain",
        message=("waters.pdb",),
    ),
    Case(
        "PDB file without protein",
        _pdb_file,
        "error:no_protein_chain",
        "error:no_protein_chain",
        message=("waters.pdb",),
    ),
]
