"""The per-rank phase clock and rank 0's summary of every rank's figures."""

from __future__ import annotations

import time

import numpy as np
import pytest

from invfold.components.train.timing import PER_RANK_METRICS_UP_TO, PHASES, StepClock, summarize


class FakeClock:
    """perf_counter stand-in: time moves only when the test says so (no sleeps, no load flakiness)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_clock_splits_the_wall_time_between_laps_into_phases(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(time, "perf_counter", fake)
    clock = StepClock()
    with clock.phase("data_s"):
        fake.now += 0.02
    with clock.phase("compute_s"):
        fake.now += 0.05
    clock.move(0.03, "compute_s", "sync_s")  # a wait measured inside compute
    fake.now += 0.01  # claimed by no phase: other
    data, compute, sync, other = clock.lap()
    assert (data, compute, sync, other) == pytest.approx((0.02, 0.02, 0.03, 0.01))
    assert clock.lap().sum() == 0.0  # a lap starts from zero


def test_moving_more_than_was_measured_is_capped(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(time, "perf_counter", fake)
    clock = StepClock()
    with clock.phase("compute_s"):
        fake.now += 0.004
    clock.move(10.0, "compute_s", "sync_s")
    _, compute, sync, _ = clock.lap()
    assert compute == 0.0 and sync == pytest.approx(0.004)


def test_summary_names_the_straggler_and_the_waiting_rank():
    # 4 steps; rank 1 computes 30% longer, rank 0 waits for it
    per_rank = np.array([[0.04, 4.0, 1.2, 0.04], [0.04, 5.2, 0.0, 0.04]])
    values = summarize(per_rank, steps=4)
    assert values["slowest_rank"] == 1
    assert values["compute_max_s"] == pytest.approx(1.3) and values["compute_min_s"] == pytest.approx(1.0)
    assert values["compute_imbalance"] == pytest.approx(1.3 / 1.15 - 1)
    assert values["rank0/sync_s"] == pytest.approx(0.3) and values["rank1/sync_s"] == 0.0
    assert values["step_s"] == pytest.approx(sum(values[p] for p in PHASES))
    assert values["sync_fraction"] == pytest.approx(0.15 / values["step_s"])


@pytest.mark.slow
def test_large_jobs_get_the_spread_without_one_series_per_rank():
    world = PER_RANK_METRICS_UP_TO + 1
    per_rank = np.ones((world, len(PHASES)))
    per_rank[7, 1] = 3.0
    values = summarize(per_rank, steps=1)
    assert values["slowest_rank"] == 7 and not any(k.startswith("rank") for k in values)
