"""Where each rank's time goes, step by step, and how rank 0 sums it up.

Every rank splits its wall clock between two consecutive per-step agreement all-reduces into
data (reading rows and collating them), compute (forward, local backward, optimizer), sync
(blocked in collectives: the gradient exchange as far as the strategy can tell it apart, plus
the previous agreement all-reduce) and other (logging, the rest of the loop). A rank that waits
for a slower one shows it as sync; the slow rank shows more compute. The figures travel in the
agreement all-reduce the loop makes anyway (no extra collective), so rank 0 sees every rank's.

Times are host wall-clock: exact on CPU. On GPU, kernels run asynchronously, so compute and sync
are where the host waited, not where the device was busy.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np

PHASES = ("data_s", "compute_s", "sync_s", "other_s")
PER_RANK_METRICS_UP_TO = 16  # larger jobs get only the spread and the slowest rank


class StepClock:
    """This rank's phase times since the last lap; whatever no phase claims is `other_s`."""

    def __init__(self) -> None:
        self._spent = dict.fromkeys(PHASES, 0.0)
        self._lap_start = time.perf_counter()

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._spent[name] += time.perf_counter() - start

    def move(self, seconds: float, source: str, target: str) -> None:
        """Reassign time measured inside `source` (e.g. a gradient wait inside backward)."""
        seconds = min(max(seconds, 0.0), self._spent[source])
        self._spent[source] -= seconds
        self._spent[target] += seconds

    def lap(self) -> np.ndarray:
        """[data, compute, sync, other] seconds since the previous lap, then start a new one."""
        now = time.perf_counter()
        measured = [self._spent[p] for p in PHASES[:-1]]
        other = max(0.0, now - self._lap_start - sum(measured))
        self._spent = dict.fromkeys(PHASES, 0.0)
        self._lap_start = now
        return np.array([*measured, other], dtype=np.float64)

    def restart(self) -> None:
        """Forget the unclaimed time since the last lap (validation, checkpoints: not training
        time); keep the phases measured in it (a step's waits that end after its lap)."""
        self._lap_start = time.perf_counter() - sum(self._spent.values())


def summarize(per_rank: np.ndarray, steps: int) -> dict[str, float]:
    """Metrics from the per-rank phase sums of a logging window ([world, len(PHASES)], seconds
    over `steps` steps): per-step means over ranks, the compute spread, the slowest rank and, for
    jobs of up to PER_RANK_METRICS_UP_TO ranks, every rank's own figures."""
    per_step = per_rank / max(steps, 1)
    world = per_step.shape[0]
    step_s = per_step.sum(axis=1)
    compute = per_step[:, PHASES.index("compute_s")]
    sync = per_step[:, PHASES.index("sync_s")]
    values = {name: float(per_step[:, i].mean()) for i, name in enumerate(PHASES)}
    values.update(
        {
            "step_s": float(step_s.mean()),
            "compute_max_s": float(compute.max()),
            "compute_min_s": float(compute.min()),
            # how much longer the slowest rank computes than the average one (0 = balanced)
            "compute_imbalance": float(compute.max() / max(compute.mean(), 1e-12) - 1.0),
            "sync_fraction": float(sync.mean() / max(step_s.mean(), 1e-12)),
            "slowest_rank": int(compute.argmax()),
        }
    )
    if world <= PER_RANK_METRICS_UP_TO:
        for rank in range(world):
            for i, name in enumerate(PHASES[:3]):
                values[f"rank{rank}/{name}"] = float(per_step[rank, i])
    return values
