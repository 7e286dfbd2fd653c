"""The 20-letter amino-acid alphabet every step shares (order fixes the model's output columns)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ALPHABET = "ACDEFGHIKLMNPQRSTVWY"
NUM_AA = len(ALPHABET)
# An unknown residue (UNK, an untabulated or D-amino acid, a numbering gap): it keeps its place in
# the chain, masked out of what the model sees and is scored on.
UNKNOWN = "X"
# X's index as a model input token (ProteinMPNN's 21-letter alphabet ends in X): read by models
# with an unknown-letter embedding (published ProteinMPNN weights), as A (0) by the others.
UNKNOWN_INDEX = NUM_AA
AA_TO_INDEX = {aa: i for i, aa in enumerate(ALPHABET)}

THREE_TO_ONE = {
    "ALA": "A",
    "CYS": "C",
    "ASP": "D",
    "GLU": "E",
    "PHE": "F",
    "GLY": "G",
    "HIS": "H",
    "ILE": "I",
    "LYS": "K",
    "LEU": "L",
    "MET": "M",
    "ASN": "N",
    "PRO": "P",
    "GLN": "Q",
    "ARG": "R",
    "SER": "S",
    "THR": "T",
    "VAL": "V",
    "TRP": "W",
    "TYR": "Y",
}


def encode(seq: str) -> np.ndarray:
    """Indices into ALPHABET; raises KeyError naming the first letter outside it."""
    import numpy as np  # here, not at the top: configs import ALPHABET, and `invfold --help` needs no numpy

    try:
        return np.fromiter((AA_TO_INDEX[c] for c in seq), dtype=np.int64, count=len(seq))
    except KeyError as err:
        raise KeyError(f"letter {err.args[0]!r} is not one of the 20 standard amino acids") from None


def decode(indices) -> str:
    return "".join(ALPHABET[int(i)] for i in indices)
