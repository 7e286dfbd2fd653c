"""Small, geometrically sensible inputs written by tests (no files checked in)."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np

ATOMS = ("N", "CA", "C", "O")


def backbone(length: int, break_after: tuple[int, ...] = ()) -> np.ndarray:
    """float64 [L, 4, 3] along x with peptide-bond C(i)-N(i+1) = 1.33 A; after each index in
    `break_after` the chain jumps 10 A (a gap a reader must call a break)."""
    coords = np.zeros((length, 4, 3))
    x = 0.0
    for i in range(length):
        coords[i] = [[x, 0, 0], [x + 1.46, 0.3, 0], [x + 2.5, 0, 0], [x + 2.5, 1.23, 0]]
        x += 2.5 + 1.33 + (10.0 if i in break_after else 0.0)
    return coords


def chain_dict(name: str, seq: str, coords: np.ndarray | None = None, **extra) -> dict:
    coords = backbone(len(seq)) if coords is None else coords
    obj = {
        "name": name,
        "seq": seq,
        "coords": {
            a: [[None if math.isnan(v) else round(float(v), 3) for v in xyz] for xyz in coords[:, i]]
            for i, a in enumerate(ATOMS)
        },
        "num_chains": 1,
        "CATH": [],
    }
    obj.update(extra)
    return obj


def jsonl_line(obj: dict, nan_token: bool = True) -> str:
    """A chain-set line; with nan_token, nulls inside triples become bare NaN tokens."""
    text = json.dumps(obj)
    return text.replace("null", "NaN") if nan_token else text


def write_jsonl(path, objs, gz: bool = False, nan_token: bool = True) -> str:
    data = "".join(jsonl_line(o, nan_token) + "\n" for o in objs).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return str(path)


def pdb_text(chains: dict[str, list[tuple]], hetatm: tuple[str, ...] = ("MSE", "HOH")) -> str:
    """PDB ATOM/HETATM records: chains maps chain id -> [(resname, number, icode, coords[4,3] or None
    for atom positions, altloc)], backbone atoms only (that is all the reader needs)."""
    lines, serial = [], 1
    for chain_id, residues in chains.items():
        for resname, number, icode, xyz, *alt in residues:
            record = "HETATM" if resname in hetatm else "ATOM  "
            names = ("O",) if resname == "HOH" else ATOMS
            for j, atom in enumerate(names):
                if xyz is None or np.isnan(xyz[j]).any():
                    continue
                altloc = alt[0] if alt else " "
                x, y, z = xyz[j]
                element = "O" if atom == "O" else atom[0]
                lines.append(
                    f"{record}{serial:5d} {atom:<4}{altloc}{resname:>3} {chain_id}{number:4d}{icode}   "
                    f"{x:8.3f}{y:8.3f}{z:8.3f}  1.00 20.00          {element:>2}"
                )
                serial += 1
        lines.append("TER")
    lines.append("END")
    return "\n".join(lines) + "\n"
