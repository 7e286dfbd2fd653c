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

from invfold.components.model.network import sampling_noise, unknown_last
from invfold.components.protein.alphabet import NUM_AA
from invfold.components.protein.batch import Batch, collate
from invfold.components.protein.sampler import pack_by_length
from invfold.progress import progress

# Dividing logits by this before the sampler's softmax makes it one-hot on the argmax: greedy.
GREEDY_TEMPERATURE = 1e-6


CPU = torch.device("cpu")


def seeded_generator(seed: int, device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    return generator


def _greedy_noise(batch: Batch, seed: int, autoregressive: bool):
    """The decoding order and uniforms a greedy design of `batch` draws from seed (as sample())."""
    generator = seeded_generator(seed, batch.X.device)
    return sampling_noise(torch.zeros_like(batch.mask, dtype=torch.bool), autoregressive, generator)


def _no_backbone(batch: Batch) -> torch.Tensor:
    """Residues a design keeps as read (X where the file has no atoms), as design does."""
    return batch.structure_mask == 0


def _diversity_seed(seed: int, d: int) -> int:
    return seed + 7919 * (d + 1)


@torch.no_grad()
def designed_sequences(model, batch: Batch, seed: int, encoded=None) -> torch.Tensor:
    """[B, L] letters designed from structure alone (see module docstring)."""
    encoded = model.encode(batch.X, batch.structure_mask, batch.residue_index) if encoded is None else encoded
    if not model.cfg.autoregressive:
        return model.decode(encoded, batch.tokens, batch.structure_mask).argmax(-1)
    return model.sample(
        batch.X,
        batch.structure_mask,
        batch.residue_index,
        temperature=GREEDY_TEMPERATURE,
        generator=seeded_generator(seed, batch.X.device),
        encoded=encoded,
        fixed_mask=_no_backbone(batch),
        fixed_S=batch.tokens,
    )


@torch.no_grad()
def designs_of_batch(model, batch: Batch, seed: int, designs: int, temperature: float, encoded) -> list[torch.Tensor]:
    """[greedy [B, L], then `designs` samples [B, L] at `temperature`] from one encoding: an
    autoregressive model decodes them all in one loop (one row per design and protein, each with
    the noise its own seed draws: the same letters as separate sample() calls)."""
    b = batch.X.shape[0]
    if not model.cfg.autoregressive:
        logits = model.decode(encoded, batch.S, batch.structure_mask)
        out = [logits.argmax(-1)]
        for d in range(designs):
            generator = seeded_generator(_diversity_seed(seed, d), batch.X.device)
            out.append(
                model.sample(
                    batch.X,
                    batch.structure_mask,
                    batch.residue_index,
                    temperature,
                    generator=generator,
                    encoded=encoded,
                )
            )
        return out
    noise = [_greedy_noise(batch, seed, True)]
    noise += [_greedy_noise(batch, _diversity_seed(seed, d), True) for d in range(designs)]
    temperatures = torch.tensor([GREEDY_TEMPERATURE] + [temperature] * designs, dtype=torch.float32)
    S = model.sample(
        batch.X,
        batch.structure_mask,
        batch.residue_index,
        temperature=temperatures.repeat_interleave(b).unsqueeze(1).to(batch.X.device),
        decoding_order=torch.cat([o for o, _ in noise]),
        uniforms=torch.cat([u for _, u in noise]),
        encoded=encoded,
        structure_rows=torch.arange(b, device=batch.X.device).repeat(designs + 1),
    )
    return list(S.split(b))


@torch.no_grad()
def score_batch(model, batch: Batch, seed: int, designs: int = 0, temperature: float = 0.1) -> dict[str, torch.Tensor]:
    """Per protein: nll (sum over observed residues), count, correct; designed [B, L]; and with
    designs > 0, samples: `designs` sequences [B, L] at `temperature` (seeded seed + 7919 (d + 1)).
    The structure is encoded once for the teacher-forced pass and every design."""
    generator = seeded_generator(seed + 1, batch.X.device)
    order = unknown_last(torch.rand(batch.mask.shape, generator=generator, device=batch.X.device), batch)
    encoded = model.encode(batch.X, batch.structure_mask, batch.residue_index)
    logits = model.decode(encoded, batch.tokens, batch.structure_mask, order).float()
    nll = F.cross_entropy(logits.reshape(-1, NUM_AA), batch.S.reshape(-1), reduction="none").reshape(batch.S.shape)
    designed, *samples = designs_of_batch(model, batch, seed, designs, temperature, encoded)
    mask = batch.mask
    return {
        "nll": (nll * mask).sum(1).double(),
        "count": mask.sum(1).double(),
        "correct": ((designed == batch.S).float() * mask).sum(1).double(),
        "designed": designed,
        "samples": samples,
    }


@dataclass
class DatasetScores:
    """Per-protein arrays over a whole dataset (index = row), filled in by score_dataset."""

    nll: np.ndarray
    count: np.ndarray
    correct: np.ndarray
    designed: list = field(default_factory=list)  # per row: designed letter indices, or None
    samples: dict = field(default_factory=dict)  # row -> [designs, L] sampled letters (diversity)

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
    designs: int = 0,
    temperature: float = 0.1,
    label: str | None = None,
) -> DatasetScores:
    """Score rows `indices` of `dataset`; other rows stay zero, so per-rank results can be summed.
    A batch's randomness (autoregressive orders) is seeded by `seed` + its first row.
    designs > 0: also `designs` sequences per row sampled at `temperature` (scores.samples: row ->
    [designs, L]), decoded with the greedy ones. label: show progress under this name (a bar
    on a terminal, else log lines)."""
    scores = DatasetScores.empty(len(dataset))
    batches = pack_by_length(dataset.lengths, sorted(indices), tokens_per_batch)
    total = int(sum(int(dataset.lengths[i]) for i in indices))
    was_training = model.training
    model.eval()
    try:
        with progress(total, label or "score", enabled=None if label else False, unit="residues") as advance:
            for rows in batches:
                batch = collate([dataset[i] for i in rows]).to(device)
                out = score_batch(model, batch, seed + rows[0], designs, temperature)
                for j, row in enumerate(rows):
                    scores.nll[row] = float(out["nll"][j])
                    scores.count[row] = float(out["count"][j])
                    scores.correct[row] = float(out["correct"][j])
                    n = int(batch.lengths[j])
                    if keep_designed:
                        scores.designed[row] = out["designed"][j, :n].cpu().numpy()
                    if designs:
                        scores.samples[row] = np.stack([s[j, :n].cpu().numpy() for s in out["samples"]])
                advance(int(sum(int(dataset.lengths[i]) for i in rows)), f"{len(rows)} chains")
    finally:
        model.train(was_training)
    return scores
