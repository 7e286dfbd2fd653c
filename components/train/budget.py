"""`--time-budget`: when its clock starts and when the training loop must stop so that what comes
after the last step (final checkpoint, final validation, model.pt, the processes' exit, the
caller's own bookkeeping) still ends inside it.

The clock starts when the process that owns the budget started (`invfold train`, or the
pipeline's train step: `budget_from_process_start`): the launcher passes that moment (the
kernel's process start time, so the interpreter and imports count) to every rank as
BUDGET_START_ENV; launch_local called from elsewhere passes the moment it was called. A rank
started without it (a TrainJob's pods) counts from its own process start; pod scheduling and
image pulls come before.

The loop stops at the step where the time left is no more than `FinishEstimate.reserve()`: one
more step, the final validation and two writes of the training state (checkpoint, model.pt), as
last measured in this run, else estimated, plus the exit. It is an estimate: on a machine that
slows down after the last step the run ends late by the difference; nothing is killed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from invfold.environ import restored_environ

BUDGET_START_ENV = "INVFOLD_BUDGET_START"  # seconds since the epoch when the budget's clock started
AFTER_JOB_ENV = "INVFOLD_BUDGET_AFTER_JOB_S"  # seconds the caller needs after the ranks exit

# From summary.json written to `invfold train`'s exit, 2 ddp ranks (/usr/bin/time -v):
# 2.7 s (real shared set, `small`, load 1-4), 4.0 s (bundled sample, `tiny`, load 5), 5.2 s (real
# set, `small`, load 7). Most of it is the ranks' interpreter shutting down after teardown (2.3 s
# of 3.6 under strace: atexit to exit_group), then torchrun's and the CLI's exits.
EXIT_S = 5.0
# What a caller does after a recorded job (record_result into MLflow; in the pipeline also KFP's
# output file and the step's exit): 1.6 s in `invfold run` on the real shared set with a 60 s
# budget (the ranks' last line to the task's end, 4.6 s, less about 3 s of model.pt
# and the ranks' exit).
RECORDING_S = 2.0
# Validation (forward only, one decoding order) costs 0.5-0.6x a training step per residue: on
# the same run, 8,639 validation residues per rank in 2 s against 2,500 training residues/s per
# rank. Before the run's first validation is timed its cost is estimated at 1.0x, on the safe side.
VALIDATION_PER_TRAIN_RESIDUE = 1.0
# A first checkpoint's cost before one is timed: the state (weights, two AdamW moments) at 50 MB/s,
# a slow network volume; replaced by the measured time of the run's first checkpoint.
FIRST_SAVE_BYTES_PER_S = 50e6


# A command's process that started longer ago than this was not started for it (imports of torch
# take 2-20 s here, depending on load).
FRESH_PROCESS_S = 60.0
_IMPORTED_AT = time.time()  # the fallback start where /proc cannot tell (not Linux)


def process_start_time(pid: str = "self", proc: str = "/proc") -> float:
    """Seconds since the epoch when the kernel started this process: now, less the seconds
    since boot (/proc/uptime), plus the process's start after boot in clock ticks
    (/proc/PID/stat field 22). Where /proc is missing, when this module was imported."""
    try:
        with open(f"{proc}/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
        with open(f"{proc}/uptime") as fh:
            uptime = float(fh.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of the whole line
    except (OSError, IndexError, ValueError):
        return _IMPORTED_AT
    return time.time() - uptime + started


def budget_start(environ: Mapping[str, str] = os.environ) -> float:
    """When the budget's clock started: BUDGET_START_ENV if the launcher set it, else this process's start."""
    value = environ.get(BUDGET_START_ENV)
    return float(value) if value else process_start_time()


def budget_env(environ: Mapping[str, str] = os.environ, now: Callable[[], float] = time.time) -> dict[str, str]:
    """What a launcher passes its ranks: the start its caller set (`budget_from_process_start`),
    else now (a launch from a long-lived process, e.g. a notebook, counts from the launch)."""
    return {BUDGET_START_ENV: environ.get(BUDGET_START_ENV) or repr(now())}


@dataclass
class BudgetClock:
    """Wall-clock budget counted from `started_at` (seconds since the epoch)."""

    budget_s: float
    started_at: float
    now: Callable[[], float] = time.time

    def elapsed(self) -> float:
        return self.now() - self.started_at

    def remaining(self) -> float:
        return self.budget_s - self.elapsed()

    def must_stop(self, reserve_s: float) -> bool:
        """True when the time left is no more than what the rest of the run needs."""
        return self.remaining() <= reserve_s


@dataclass
class FinishEstimate:
    """What the loop keeps in hand: the next step, the final validation, the final checkpoint and
    model.pt, the exit and the caller's work after the job. Measured figures replace the
    estimates as the run times its own steps, validations and checkpoints."""

    state_bytes: int  # weights and optimizer moments: what a checkpoint writes
    validation_residues: int = 0  # this rank's share of the validation set (0: no validation)
    after_job_s: float = 0.0
    step_s: float = 0.0  # the slowest recent step
    train_residues_per_s: float = 0.0  # this rank's training rate
    validation_s: float | None = None  # the last validation's time
    save_s: float | None = None  # the last checkpoint's time

    def validation(self) -> float:
        if self.validation_s is not None or not self.validation_residues:
            return self.validation_s or 0.0
        if self.train_residues_per_s <= 0:
            return 0.0
        return VALIDATION_PER_TRAIN_RESIDUE * self.validation_residues / self.train_residues_per_s

    def save(self) -> float:
        return self.save_s if self.save_s is not None else self.state_bytes / FIRST_SAVE_BYTES_PER_S

    def reserve(self) -> float:
        """Seconds the loop must leave: one more step, the final validation, the checkpoint and
        model.pt (two saves), the exit and the caller's work."""
        return self.step_s + self.validation() + 2 * self.save() + EXIT_S + self.after_job_s

    def parts(self) -> dict:
        return {
            "step_s": round(self.step_s, 3),
            "validation_s": round(self.validation(), 3),
            "save_s": round(self.save(), 3),
            "exit_s": EXIT_S,
            "after_job_s": self.after_job_s,
            "reserve_s": round(self.reserve(), 3),
        }


def after_job_s(environ: Mapping[str, str] = os.environ) -> float:
    value = environ.get(AFTER_JOB_ENV)
    return float(value) if value else 0.0


def command_start(now: Callable[[], float] = time.time) -> float:
    """This process's start when it was started for this command (within FRESH_PROCESS_S), else
    now: a command called inside a long-lived process (a notebook, a test calling
    `invfold.cli.main`) counts from the call, not from when that process started."""
    started, at = process_start_time(), now()
    return started if at - started <= FRESH_PROCESS_S else at


@contextlib.contextmanager
def budget_from_process_start(after_job_s: float = 0.0):
    """For a command that owns the budget (`invfold train`, the pipeline's train step): while it
    launches the job, the ranks count from this process's start (BUDGET_START_ENV, unless a
    caller up the chain set it) and keep `after_job_s` in hand for the command's own work after
    the job (AFTER_JOB_ENV); both restored after."""
    with restored_environ(BUDGET_START_ENV, AFTER_JOB_ENV):
        os.environ.setdefault(BUDGET_START_ENV, repr(command_start()))
        os.environ[AFTER_JOB_ENV] = repr(float(after_job_s))
        yield
