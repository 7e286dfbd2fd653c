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


def order_seed(seed: int, k: int) -> int:
    """The seed of decoding order k (order 0 is `seed` itself: one order scores as before)."""
    return seed + 104729 * k


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
def designs_of_batch(
    model, batch: Batch, seed: int, designs: int, temperature: float, encoded, orders: int = 1
) -> list[torch.Tensor]:
    """[greedy [B, L] in each of `orders` decoding orders (seeded order_seed(seed, k)), then
    `designs` samples [B, L] at `temperature`] from one encoding: an autoregressive model decodes
    them all in one loop (one row per design and protein, each with the noise its own seed draws:
    the same letters as separate sample() calls). A one-shot model's argmax has no order: its one
    greedy design stands for every order."""
    b = batch.X.shape[0]
    if not model.cfg.autoregressive:
        logits = model.decode(encoded, batch.S, batch.structure_mask)
        out = [logits.argmax(-1)] * orders
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
    noise = [_greedy_noise(batch, order_seed(seed, k), True) for k in range(orders)]
    noise += [_greedy_noise(batch, _diversity_seed(seed, d), True) for d in range(designs)]
    temperatures = torch.tensor([GREEDY_TEMPERATURE] * orders + [temperature] * designs, dtype=torch.float32)
    S = model.sample(
        batch.X,
        batch.structure_mask,
        batch.residue_index,
        temperature=temperatures.repeat_interleave(b).unsqueeze(1).to(batch.X.device),
        decoding_order=torch.cat([o for o, _ in noise]),
        uniforms=torch.cat([u for _, u in noise]),
        encoded=encoded,
        structure_rows=torch.arange(b, device=batch.X.device).repeat(orders + designs),
    )
    return list(S.split(b))


@torch.no_grad()
def score_batch(
    model, batch: Batch, seed: int, designs: int = 0, temperature: float = 0.1, orders: int = 1
) -> dict[str, torch.Tensor]:
    """Per protein: nll (sum over observed residues), count, correct (mean over `orders` greedy
    designs, one per decoding order) and correct_by_order [B, orders]; designed [B, L] (order 0);
    and with designs > 0, samples: `designs` sequences [B, L] at `temperature` (seeded
    seed + 7919 (d + 1)) and sampled_correct (their mean correct letters). The structure is
    encoded once for the teacher-forced pass and every design."""
    generator = seeded_generator(seed + 1, batch.X.device)
    order = unknown_last(torch.rand(batch.mask.shape, generator=generator, device=batch.X.device), batch)
    encoded = model.encode(batch.X, batch.structure_mask, batch.residue_index)
    logits = model.decode(encoded, batch.tokens, batch.structure_mask, order).float()
    nll = F.cross_entropy(logits.reshape(-1, NUM_AA), batch.S.reshape(-1), reduction="none").reshape(batch.S.shape)
    out = designs_of_batch(model, batch, seed, designs, temperature, encoded, orders)
    greedy, samples = out[:orders], out[orders:]
    mask = batch.mask

    def correct(S: torch.Tensor) -> torch.Tensor:
        return ((S == batch.S).float() * mask).sum(1).double()

    by_order = torch.stack([correct(S) for S in greedy], 1)
    return {
        "nll": (nll * mask).sum(1).double(),
        "count": mask.sum(1).double(),
        "correct": by_order.mean(1),
        "correct_by_order": by_order,
        "sampled_correct": torch.stack([correct(S) for S in samples], 1).mean(1) if samples else None,
        "designed": greedy[0],
        "samples": samples,
    }


def bootstrap_median(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of `values` (chains resampled with
    replacement, `resamples` times, numpy's generator seeded by `seed`)."""
    values = np.asarray(values, dtype=float)
    if not len(values) or not np.isfinite(values).all():
        raise ValueError(f"bootstrap_median: expected finite values, got {len(values)} with non-finite ones")
    rng = np.random.default_rng(seed)
    # drawn in blocks of about 2**22 indices (32 MiB): the same stream as one draw of all, in memory
    # that does not grow with resamples x chains
    block = max(1, 2**22 // len(values))
    medians = np.concatenate(
        [
            np.median(values[rng.integers(0, len(values), (min(block, resamples - start), len(values)))], axis=1)
            for start in range(0, resamples, block)
        ]
    )
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


@dataclass
class DatasetScores:
    """Per-protein arrays over a whole dataset (index = row), filled in by score_dataset. correct is
    the mean over decoding orders; correct_by_order [N, orders] keeps each order's (None when the
    arrays were summed from elsewhere, as training's ranks do); sampled_correct the mean over the
    designs sampled at the diversity temperature (None without any)."""

    nll: np.ndarray
    count: np.ndarray
    correct: np.ndarray
    designed: list = field(default_factory=list)  # per row: designed letter indices, or None
    samples: dict = field(default_factory=dict)  # row -> [designs, L] sampled letters (diversity)
    correct_by_order: np.ndarray | None = None
    sampled_correct: np.ndarray | None = None

    @classmethod
    def empty(cls, n: int, orders: int = 1, sampled: bool = False) -> DatasetScores:
        return cls(
            np.zeros(n),
            np.zeros(n),
            np.zeros(n),
            [None] * n,
            correct_by_order=np.zeros((n, orders)),
            sampled_correct=np.zeros(n) if sampled else None,
        )

    def recoveries(self) -> np.ndarray:
        """Per-protein recovery (mean over orders) of the scored proteins, in row order."""
        scored = self.count > 0
        return self.correct[scored] / self.count[scored]

    def summary(self, resamples: int = 0, seed: int = 0) -> dict[str, float]:
        """loss (mean NLL pooled over residues), perplexity, median/mean per-protein recovery (each
        protein's recovery averaged over decoding orders); with several orders the mean and sd
        across orders of each order's median (`recovery_orders_mean`, `recovery_orders_sd`); with
        resamples > 0 the bootstrap 95% interval of the median (`recovery_ci_low`/`_high`); with
        sampled designs their median recovery (`sampled_recovery`)."""
        scored = self.count > 0
        residues = float(self.count[scored].sum())
        if not residues:
            return {"proteins": 0, "residues": 0}
        loss = float(self.nll[scored].sum() / residues)
        recovery = self.recoveries()
        out = {
            "proteins": int(scored.sum()),
            "residues": int(residues),
            "loss": loss,
            "perplexity": float(np.exp(loss)),
            "recovery": float(np.median(recovery)),
            "recovery_mean": float(recovery.mean()),
        }
        if self.correct_by_order is not None and self.correct_by_order.shape[1] > 1:
            medians = np.median(self.correct_by_order[scored] / self.count[scored, None], axis=0)
            out.update(recovery_orders_mean=float(medians.mean()), recovery_orders_sd=float(medians.std(ddof=1)))
        if resamples:
            out["recovery_ci_low"], out["recovery_ci_high"] = bootstrap_median(recovery, resamples, seed)
        if self.sampled_correct is not None:
            out["sampled_recovery"] = float(np.median(self.sampled_correct[scored] / self.count[scored]))
        return out


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
    orders: int = 1,
) -> DatasetScores:
    """Score rows `indices` of `dataset`; other rows stay zero, so per-rank results can be summed.
    A batch's randomness (autoregressive orders) is seeded by `seed` + its first row.
    designs > 0: also `designs` sequences per row sampled at `temperature` (scores.samples: row ->
    [designs, L]), decoded with the greedy ones. orders: greedy designs per row, one per decoding
    order, decoded in the same loop (recovery is their mean). label: show progress under this name (a bar
    on a terminal, else log lines)."""
    scores = DatasetScores.empty(len(dataset), orders, sampled=designs > 0)
    batches = pack_by_length(dataset.lengths, sorted(indices), tokens_per_batch)
    total = int(sum(int(dataset.lengths[i]) for i in indices))
    was_training = model.training
    model.eval()
    try:
        with progress(total, label or "score", enabled=None if label else False, unit="residues") as advance:
            for rows in batches:
                batch = collate([dataset[i] for i in rows]).to(device)
                out = score_batch(model, batch, seed + rows[0], designs, temperature, orders)
                for j, row in enumerate(rows):
                    scores.nll[row] = float(out["nll"][j])
                    scores.count[row] = float(out["count"][j])
                    scores.correct[row] = float(out["correct"][j])
                    scores.correct_by_order[row] = out["correct_by_order"][j].cpu().numpy()
                    if designs:
                        scores.sampled_correct[row] = float(out["sampled_correct"][j])
                    n = int(batch.lengths[j])
                    if keep_designed:
                        scores.designed[row] = out["designed"][j, :n].cpu().numpy()
                    if designs:
                        scores.samples[row] = np.stack([s[j, :n].cpu().numpy() for s in out["samples"]])
                advance(int(sum(int(dataset.lengths[i]) for i in rows)), f"{len(rows)} chains")
    finally:
        model.train(was_training)
    return scores
