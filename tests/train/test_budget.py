"""`--time-budget` bounds the whole job: its clock starts when the launching process started (passed
to the ranks), and the loop stops while the final validation, checkpoint, model.pt and exit still
fit. Every check is on the mechanism (fake clocks, a start passed in far in the past or future),
never on how long something took."""

from __future__ import annotations

import os
import subprocess
import time
from types import SimpleNamespace

import pytest

from invfold.components.train import budget
from invfold.components.train.budget import (
    AFTER_JOB_ENV,
    BUDGET_START_ENV,
    EXIT_S,
    VALIDATION_PER_TRAIN_RESIDUE,
    BudgetClock,
    FinishEstimate,
)
from invfold.components.train.trainer import _over_budget
from tests.support.training import run_job, summary, tiny_config


def test_the_clock_counts_from_the_start_passed_in():
    clock = BudgetClock(60.0, started_at=1000.0, now=lambda: 1040.0)
    assert clock.elapsed() == 40.0 and clock.remaining() == 20.0
    assert clock.must_stop(reserve_s=20.0) and clock.must_stop(reserve_s=25.0)
    assert not clock.must_stop(reserve_s=19.5)


def test_the_reserve_is_the_next_step_the_final_validation_two_saves_the_exit_and_the_callers_work():
    finish = FinishEstimate(state_bytes=10**6, after_job_s=2.0, step_s=1.5, validation_s=4.0, save_s=0.25)
    assert finish.reserve() == pytest.approx(1.5 + 4.0 + 2 * 0.25 + EXIT_S + 2.0)
    parts = finish.parts()
    assert parts["reserve_s"] == pytest.approx(finish.reserve(), abs=1e-3)
    assert (parts["validation_s"], parts["save_s"], parts["after_job_s"]) == (4.0, 0.25, 2.0)


def test_validation_and_save_are_estimated_until_the_run_times_them():
    finish = FinishEstimate(state_bytes=int(2 * budget.FIRST_SAVE_BYTES_PER_S), validation_residues=3000)
    assert finish.validation() == 0.0  # no step timed yet: no rate to go by
    finish.train_residues_per_s = 1500.0
    assert finish.validation() == pytest.approx(VALIDATION_PER_TRAIN_RESIDUE * 2.0)
    assert finish.save() == pytest.approx(2.0)
    finish.validation_s, finish.save_s = 0.7, 0.1
    assert (finish.validation(), finish.save()) == (0.7, 0.1)
    assert FinishEstimate(state_bytes=0, train_residues_per_s=1e3).validation() == 0.0  # no validation set


def test_the_loop_stops_when_the_time_left_is_no_more_than_the_reserve(tmp_path):
    cfg = tiny_config("unused", tmp_path, max_steps=None, time_budget_s=60.0)
    finish = FinishEstimate(state_bytes=0, step_s=4.0, validation_s=1.0, save_s=0.5)  # reserve 6 + EXIT_S
    left = 6.0 + EXIT_S
    run = SimpleNamespace(budget=BudgetClock(60.0, 1000.0, now=lambda: 1060.0 - left), finish=finish, cpu_start=0.0)
    assert _over_budget(cfg, run)
    finish.step_s = 3.9  # a shorter step: 0.1 s more than the run needs is left
    assert not _over_budget(cfg, run)
    run.budget = None  # no wall-clock budget
    assert not _over_budget(cfg, run)


def test_a_rank_counts_from_the_start_passed_in_else_its_own_process_start():
    assert budget.budget_start({BUDGET_START_ENV: "1234.5"}) == 1234.5
    tick = 1.0 / os.sysconf("SC_CLK_TCK")  # two readings of now - uptime differ by their jitter
    assert budget.budget_start({}) == pytest.approx(budget.process_start_time(), abs=tick)


def test_a_launcher_passes_its_callers_start_else_the_moment_of_the_launch():
    """A command that owns the budget set its start; launch_local called from a long-lived
    process (a notebook) counts from the call, not from that process's start."""
    assert budget.budget_env({BUDGET_START_ENV: "7.25"}, now=lambda: 99.0) == {BUDGET_START_ENV: "7.25"}
    assert budget.budget_env({}, now=lambda: 99.0) == {BUDGET_START_ENV: "99.0"}


def test_process_start_is_when_the_kernel_started_it():
    """A child started between two readings of the clock: its start lies between them (to the
    kernel's clock tick, 1/CLK_TCK s)."""
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    before = time.time()
    child = subprocess.Popen(["sleep", "30"])
    after = time.time()
    try:
        assert before - 2 * tick <= budget.process_start_time(str(child.pid)) <= after + 2 * tick
    finally:
        child.kill()
        child.wait()


def test_process_start_without_proc_falls_back_to_the_import(tmp_path):
    assert budget.process_start_time(proc=str(tmp_path / "none")) == budget._IMPORTED_AT


def test_a_command_counts_from_its_process_start_only_if_the_process_was_started_for_it(monkeypatch):
    """`invfold train` as a program counts its interpreter and imports; the same command called in a
    process that started long before (a notebook, a test calling invfold.cli.main: CI caught a
    2-step run stopped after 1 step by a 180 s budget spent before it began) counts from the call."""
    monkeypatch.setattr(budget, "process_start_time", lambda: 1000.0)
    assert budget.command_start(now=lambda: 1000.0 + budget.FRESH_PROCESS_S) == 1000.0
    assert budget.command_start(now=lambda: 5000.0) == 5000.0


def test_a_command_owns_the_budget_from_its_process_start_while_it_launches(monkeypatch):
    monkeypatch.delenv(AFTER_JOB_ENV, raising=False)
    monkeypatch.delenv(BUDGET_START_ENV, raising=False)
    fresh = time.time() - 3.0
    monkeypatch.setattr(budget, "process_start_time", lambda: fresh)
    with budget.budget_from_process_start(2.5):
        assert float(os.environ[BUDGET_START_ENV]) == fresh
        assert budget.after_job_s() == 2.5
        assert budget.budget_env()[BUDGET_START_ENV] == os.environ[BUDGET_START_ENV]
    assert BUDGET_START_ENV not in os.environ and AFTER_JOB_ENV not in os.environ
    assert budget.after_job_s() == 0.0
    monkeypatch.setenv(BUDGET_START_ENV, "5.0")  # a caller up the chain set it: kept
    monkeypatch.setenv(AFTER_JOB_ENV, "1.0")
    with budget.budget_from_process_start(3.0):
        assert os.environ[BUDGET_START_ENV] == "5.0" and os.environ[AFTER_JOB_ENV] == "3.0"
    assert os.environ[BUDGET_START_ENV] == "5.0" and os.environ[AFTER_JOB_ENV] == "1.0"


def test_ranks_count_the_budget_from_the_start_the_launcher_passes(sample_prepared, tmp_path, monkeypatch):
    """A start long past: the budget is spent before the first step, so the ranks stop after the
    one step that always runs, and summary.json records the phases from that start."""
    started = time.time() - 1000.0
    monkeypatch.setenv(BUDGET_START_ENV, repr(started))
    cfg = tiny_config(sample_prepared, tmp_path / "past", max_steps=None, time_budget_s=30.0, validate_every=0)
    assert run_job(cfg, nproc=1) == 0
    result = summary(tmp_path / "past")
    assert (result["stop_reason"], result["step"]) == ("time_budget", 1)
    assert result["budget"]["started_at"] == started and result["budget"]["budget_s"] == 30.0
    assert result["budget"]["elapsed_s"] >= 1000.0
    assert result["phases"]["startup_s"] >= 1000.0
    kept = result["budget"]["kept_in_hand"]
    assert kept["left_s"] <= -970.0 and kept["exit_s"] == EXIT_S
    # Each part is rounded to 1 ms on its own: up to 0.5 ms each from step, validation and the
    # reserve, and 1 ms from the save counted twice.
    assert kept["reserve_s"] == pytest.approx(
        kept["step_s"] + kept["validation_s"] + 2 * kept["save_s"] + EXIT_S + kept["after_job_s"], abs=2.6e-3
    )
    assert {"final_checkpoint_s", "final_validation_s", "model_write_s", "loop_s"} <= set(result["phases"])
    assert (tmp_path / "past" / "model.pt").exists()


def test_a_start_in_the_future_leaves_the_budget_untouched(sample_prepared, tmp_path, monkeypatch):
    """The same job with its clock started 1000 s from now: the budget never binds, max_steps ends it."""
    monkeypatch.setenv(BUDGET_START_ENV, repr(time.time() + 1000.0))
    cfg = tiny_config(sample_prepared, tmp_path / "future", max_steps=2, time_budget_s=30.0, validate_every=0)
    assert run_job(cfg, nproc=1) == 0
    result = summary(tmp_path / "future")
    assert (result["stop_reason"], result["step"]) == ("finished", 2)
    assert result["budget"]["kept_in_hand"] is None


def test_a_recorded_invfold_train_keeps_the_recordings_time_in_hand(sample_prepared, tmp_path, monkeypatch):
    """`invfold train --experiment` records into MLflow after the job: the ranks keep
    RECORDING_S for it (AFTER_JOB_ENV); the pipeline's train step wraps its launcher the same way.
    The start set here (long past) is kept, as a caller's up the chain would be."""
    from invfold.cli import main

    monkeypatch.setenv(BUDGET_START_ENV, repr(time.time() - 1000.0))
    monkeypatch.delenv(AFTER_JOB_ENV, raising=False)
    out = tmp_path / "train"
    flags = ["--preset", "tiny", "--nproc", "1", "--time-budget", "30", "--validate-every", "0"]
    tracking = ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--experiment", "budget"]
    assert main(["train", "--data", sample_prepared, "--out", str(out), *flags, *tracking]) == 0
    kept = summary(out)["budget"]["kept_in_hand"]
    assert kept["after_job_s"] == budget.RECORDING_S > 0
    assert summary(out)["step"] == 1  # counted from the start set above: spent before the first step
    assert AFTER_JOB_ENV not in os.environ
