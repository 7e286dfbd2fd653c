"""Per-protein scores shared by training-time validation and `invfold evaluate`.

Perplexity is teacher-forced: exp of the mean NLL pooled over observed residues (an
autoregressive model sees the native letters of residues earlier in a seeded random order, as
in ProteinMPNN's evaluation). Recovery is of *designed* sequences, made without any native
letter as input: the argmax of a one-shot model, or greedy autoregressive decoding in a seeded
random order (never the teacher-forced argmax, which sees native neighbours).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from invfold.components.model.network import unknown_last
from invfold.components.protein.alphabet import NUM_AA
from invfold.components.protein.batch import Batch, collate
from invfold.components.protein.sampler import pack_by_length

# Dividing logits by this before the sampler's softmax makes it one-hot on the argmax: greedy.
GREEDY_TEMPERATURE = 1e-6


CPU = torch.device("cpu")


def seeded_generator(seed: int, device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    return generator


@torch.no_grad()
def designed_sequences(model, batch: Batch, seed: int) -> torch.Tensor:
    """[B, L] letters designed from structure alone (see module docstring)."""
    if not model.cfg.autoregressive:
        logits = model(batch.X, batch.tokens, batch.structure_mask, batch.residue_index)
        return logits.argmax(-1)
    return model.sample(
        batch.X,
        batch.structure_mask,
        batch.residue_index,
        temperature=GREEDY_TEMPERATURE,
        generator=seeded_generator(seed, batch.X.device),
        # residues without a backbone keep their token (X where the file has no atom), as in design
        fixed_mask=batch.structure_mask == 0,
        fixed_S=batch.tokens,
    )


@torch.no_grad()
def score_batch(model, batch: Batch, seed: int) -> dict[str, torch.Tensor]:
    """Per protein: nll (sum over observed residues), count, correct; and designed [B, L]."""
    generator = seeded_generator(seed + 1, batch.X.device)
    order = unknown_last(torch.rand(batch.mask.shape, generator=generator, device=batch.X.device), batch)
    logits = model(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, order).float()
    nll = F.cross_entropy(logits.reshape(-1, NUM_AA), batch.S.reshape(-1), reduction="none").reshape(batch.S.shape)
    designed = designed_sequences(model, batch, seed)
    mask = batch.mask
    return {
        "nll": (nll * mask).sum(1).double(),
        "count": mask.sum(1).double(),
        "correct": ((designed == batch.S).float() * mask).sum(1).double(),
        "designed": designed,
    }


@dataclass
class DatasetScores:
    """Per-protein arrays over a whole dataset (index = row), filled in by score_dataset."""

    nll: np.ndarray
    count: np.ndarray
    correct: np.ndarray
    designed: list = field(default_factory=list)  # per row: designed letter indices, or None

    @classmethod
    def empty(cls, n: int) -> DatasetScores:
        return cls(np.zeros(n), np.zeros(n), np.zeros(n), [None] * n)

    def summary(self) -> dict[str, float]:
        """loss (mean NLL pooled over residues), perplexity, median/mean per-protein recovery."""
        scored = self.count > 0
        residues = float(self.count[scored].sum())
        if not residues:
            return {"proteins": 0, "residues": 0}
        loss = float(self.nll[scored].sum() / residues)
        recovery = self.correct[scored] / self.count[scored]
        return {
            "proteins": int(scored.sum()),
            "residues": int(residues),
            "loss": loss,
            "perplexity": float(np.exp(loss)),
            "recovery": float(np.median(recovery)),
            "recovery_mean": float(recovery.mean()),
        }


def score_dataset(
    model,
    dataset,
    indices: list[int],
    tokens_per_batch: int,
    seed: int,
    device: torch.device = CPU,
    keep_designed: bool = False,
) -> DatasetScores:
    """Score rows `indices` of `dataset`; other rows stay zero, so per-rank results can be summed.
    A batch's randomness (autoregressive orders) is seeded by `seed` + its first row."""
    scores = DatasetScores.empty(len(dataset))
    was_training = model.training
    model.eval()
    try:
        for rows in pack_by_length(dataset.lengths, sorted(indices), tokens_per_batch):
            batch = collate([dataset[i] for i in rows]).to(device)
            out = score_batch(model, batch, seed + rows[0])
            for j, row in enumerate(rows):
                scores.nll[row] = float(out["nll"][j])
                scores.count[row] = float(out["count"][j])
                scores.correct[row] = float(out["correct"][j])
                if keep_designed:
                    n = int(batch.lengths[j])
                    scores.designed[row] = out["designed"][j, :n].cpu().numpy()
    finally:
        model.train(was_training)
    return scores


@torch.no_grad()
def sample_designs(
    model,
    dataset,
    indices: list[int],
    designs: int,
    temperature: float,
    tokens_per_batch: int,
    seed: int,
    device: torch.device = CPU,
) -> dict[int, np.ndarray]:
    """Row -> [designs, L] letter indices sampled at `temperature` (design d of a batch seeded by
    `seed` + its first row + d), for diversity among designs."""
    out: dict[int, list[np.ndarray]] = {i: [] for i in indices}
    for rows in pack_by_length(dataset.lengths, sorted(indices), tokens_per_batch):
        batch = collate([dataset[i] for i in rows]).to(device)
        for d in range(designs):
            generator = seeded_generator(seed + rows[0] + 7919 * (d + 1), batch.X.device)
            S = model.sample(
                batch.X, batch.structure_mask, batch.residue_index, temperature=temperature, generator=generator
            )
            for j, row in enumerate(rows):
                out[row].append(S[j, : int(batch.lengths[j])].cpu().numpy())
    return {row: np.stack(v) for row, v in out.items()}
