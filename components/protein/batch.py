"""Padding a list of chain records into model tensors (the model's input contract)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from invfold.components.protein.alphabet import AA_TO_INDEX, UNKNOWN_INDEX
from invfold.components.protein.record import PADDING_OFFSET, ChainRecord


@dataclass
class Batch:
    """X: float32 [B, L, 4, 3] (0 where unobserved); S: int64 [B, L] (0 where padded or unknown);
    mask: float32 [B, L] (1 = observed residue with a known letter: what losses and metrics count);
    structure_mask: float32 [B, L] (1 = all four backbone atoms observed, letter known or not: the
    model's structure input, so an unknown residue (X) stays in the graph as masked context);
    residue_index: int64 [B, L]; lengths: int64 [B].
    tokens: int64 [B, L], the sequence as the model reads it (its S input): S, with UNKNOWN_INDEX
    (X, 20) where the letter is unknown or the residue has no backbone atom in the file (as
    ProteinMPNN's parser makes a missing residue X, whatever SEQRES says); 0 in padding."""

    X: torch.Tensor
    S: torch.Tensor
    mask: torch.Tensor
    residue_index: torch.Tensor
    lengths: torch.Tensor
    names: list[str]
    structure_mask: torch.Tensor
    tokens: torch.Tensor | None = None

    def __post_init__(self):
        if self.tokens is None:  # a batch built by hand: X nowhere
            self.tokens = self.S

    def to(self, device) -> Batch:
        return Batch(
            self.X.to(device),
            self.S.to(device),
            self.mask.to(device),
            self.residue_index.to(device),
            self.lengths.to(device),
            self.names,
            self.structure_mask.to(device),
            self.tokens.to(device),
        )

    @property
    def num_residues(self) -> int:
        """Observed residues: what throughput and losses are counted over."""
        return int(self.mask.sum().item())


def collate(records: list[ChainRecord]) -> Batch:
    b = len(records)
    L = max(len(r) for r in records)
    X = np.zeros((b, L, 4, 3), dtype=np.float32)
    S = np.zeros((b, L), dtype=np.int64)
    mask = np.zeros((b, L), dtype=np.float32)
    structure = np.zeros((b, L), dtype=np.float32)
    ridx = np.zeros((b, L), dtype=np.int64)
    tokens = np.zeros((b, L), dtype=np.int64)
    for i, r in enumerate(records):
        n = len(r)
        observed = np.asarray(r.mask, dtype=bool)
        known = np.array([c in AA_TO_INDEX for c in r.seq], dtype=bool)
        X[i, :n] = np.nan_to_num(np.asarray(r.coords, dtype=np.float32), nan=0.0)
        S[i, :n] = [AA_TO_INDEX.get(c, 0) for c in r.seq]
        present = np.isfinite(np.asarray(r.coords)).any(axis=(1, 2))
        tokens[i, :n] = np.where(known & present, S[i, :n], UNKNOWN_INDEX)
        mask[i, :n] = observed & known
        structure[i, :n] = observed
        ridx[i, :n] = r.residue_index
        # padding continues the numbering far away so it never looks adjacent to real residues
        ridx[i, n:] = (int(r.residue_index[-1]) if n else 0) + PADDING_OFFSET + np.arange(L - n)
    return Batch(
        torch.from_numpy(X),
        torch.from_numpy(S),
        torch.from_numpy(mask),
        torch.from_numpy(ridx),
        torch.tensor([len(r) for r in records]),
        [r.name for r in records],
        torch.from_numpy(structure),
        torch.from_numpy(tokens),
    )
