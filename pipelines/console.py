"""What `invfold run` shows a person: one line per step as it starts and ends, a progress bar
while training, the failing step's error in full; everything the local runner prints (KFP's
banners, each step's own output) goes to a log file under the runs folder instead.

KFP's local runner prints each task's output line by line to sys.stdout and logs its task
banners through `logging`; `StepConsole` stands in for sys.stdout and the root logger's handler
while the pipeline runs, writes every line to the log file, and reads the banners to follow the
steps. The training bar reads the trainer's structured records (metrics.jsonl in the train step's
model folder under pipeline_root), never its log text, whenever the step prints."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from invfold.storage import redact

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TASK_START = re.compile(r"Executing task '([\w-]+)'")
TASK_END = re.compile(r"Task '([\w-]+)' finished with status (\w+)")
TASK_CACHED = re.compile(r"Task '?([\w-]+)'? cache hit")
METRICS_GLOB = "*/train-op/model/metrics.jsonl"  # the train step's output, under pipeline_root
FAILED_LINES_SHOWN = 200  # a failing step's output up to this many lines is shown whole


def step_name(task: str) -> str:
    """KFP task name -> the step's name (prep-op -> prep, finish-tracking-op -> finish-tracking)."""
    return task.removesuffix("-op")


@dataclass
class TrainLimit:
    """How training ends, for the progress bar: after max_steps, else after time_budget_s."""

    max_steps: int = 0
    time_budget_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_steps < 0 or self.time_budget_s < 0:
            raise ValueError(f"TrainLimit: max_steps and time_budget_s must be >= 0, got {self}")


@dataclass
class _Task:
    name: str
    start: float
    lines: list[str] = field(default_factory=list)


class StepConsole:
    """A file-like stand-in for sys.stdout during a local run (see the module docstring)."""

    def __init__(
        self,
        log_path: Path,
        console: Console,
        verbose: bool = False,
        train: TrainLimit | None = None,
        timings_file: Path | None = None,
        pipeline_root: Path | None = None,
    ):
        self.log_path, self.timings_file = Path(log_path), timings_file
        self.pipeline_root = Path(pipeline_root) if pipeline_root else None
        self._metrics: Path | None = None
        self._metrics_offset = 0
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log: TextIO = open(self.log_path, "w", buffering=1)  # noqa: SIM115 - closed in __exit__
        self.console, self.verbose, self.train = console, verbose, train or TrainLimit()
        self.running: dict[str, _Task] = {}
        self.finished: dict[str, str] = {}  # step -> status (SUCCESS, FAILURE, CACHED)
        self.failed_output: list[str] = []
        self._partial = ""
        self._progress: Progress | None = None
        self._bar: TaskID | None = None
        self._train_start = 0.0

    # -- file protocol -----------------------------------------------------------------------
    def write(self, text: str) -> int:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def flush(self) -> None:
        self.log.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"

    # -- the run -----------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._saved = sys.stdout, logging.root.handlers[:], logging.root.level
        logging.root.setLevel(min(logging.INFO, logging.root.level or logging.INFO))
        handler = logging.StreamHandler(self)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        logging.root.handlers[:] = [handler]
        logging.captureWarnings(True)  # the local runner's warnings about images and display names
        sys.stdout = self
        return self

    def __exit__(self, *exc) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        sys.stdout, logging.root.handlers[:] = self._saved[0], self._saved[1]
        logging.root.setLevel(self._saved[2])
        logging.captureWarnings(False)
        self._stop_bar()
        self.log.close()

    def fail_running(self, error: BaseException) -> None:
        """The pipeline raised: the step still running is the one that failed; show its output."""
        for task in list(self.running.values()):
            self._end(task.name, "FAILURE")
        if not self.failed_output:
            self.console.print(f"[red]the pipeline failed before any step ran: {redact(str(error))}[/red]")

    # -- parsing -----------------------------------------------------------------------------
    def _line(self, raw: str) -> None:
        line = redact(ANSI.sub("", raw).rstrip())  # the steps' output: the command's secrets hidden
        self.log.write(line + "\n")
        for task in self.running.values():
            task.lines.append(line)
        if self.verbose:
            self.console.out(line, highlight=False)
        if m := TASK_START.search(line):
            self._start(m.group(1))
        elif m := TASK_END.search(line):
            self._end(m.group(1), m.group(2))
        elif m := TASK_CACHED.search(line):
            self.finished[step_name(m.group(1))] = "CACHED"
            self._say(Text.assemble(("  = ", "cyan"), f"{step_name(m.group(1)):<16} cached (same inputs as before)"))
        elif "train-op" in self.running:
            self._read_metrics()

    def _start(self, task: str) -> None:
        self.running[task] = _Task(task, time.monotonic())
        self._say(Text.assemble(("  > ", "bold"), f"{step_name(task):<16} started"))
        if task == "train-op" and self.console.is_terminal and not self.verbose:
            self._start_bar()

    def _end(self, task: str, status: str) -> None:
        started = self.running.pop(task, None)
        seconds = time.monotonic() - started.start if started else 0.0
        step = step_name(task)
        self.finished[step] = status
        if task == "train-op":
            self._stop_bar()
        figure = self._key_figures(step)
        if status == "SUCCESS":
            self._say(Text.assemble(("  ok ", "green"), f"{step:<16} {seconds:7.1f} s  {figure}".rstrip()))
            return
        self._say(Text.assemble(("  FAILED ", "bold red"), f"{step} after {seconds:.1f} s; its output:"))
        lines = started.lines if started else []
        if len(lines) > FAILED_LINES_SHOWN:
            first = next((i for i, text in enumerate(lines) if "Traceback" in text), len(lines) - FAILED_LINES_SHOWN)
            lines = lines[first:]
        self.failed_output = lines
        if not self.verbose:
            for text in lines:
                self.console.out(text, highlight=False, style="red")
        self._say(f"  (the whole run's output: {self.log_path})")

    def _read_metrics(self) -> None:
        """New complete records of this run's metrics.jsonl -> the bar (step, loss, recovery)."""
        if self._progress is None or self._bar is None or self.pipeline_root is None:
            return
        if self._metrics is None:
            fresh = [p for p in self.pipeline_root.glob(METRICS_GLOB) if p.stat().st_mtime >= self._train_wall]
            if not fresh:
                return
            self._metrics = max(fresh, key=lambda p: p.stat().st_mtime)
        with open(self._metrics) as fh:
            fh.seek(self._metrics_offset)
            text = fh.read()
        complete, _, _ = text.rpartition("\n")  # a line still being written waits for the next read
        self._metrics_offset += len(complete) + 1 if complete else 0
        fields: dict = {}
        for line in filter(None, complete.split("\n")):
            record = json.loads(line)
            if record.get("split") == "train":
                fields.update(step=record["step"], loss=f"{record['loss']:.4f}")
            elif record.get("split") == "validation" and "recovery" in record:
                fields["recovery"] = f"{record['recovery']:.3f}"
        if not fields:
            return
        if self.train.max_steps:
            done = min(fields["step"], self.train.max_steps) if "step" in fields else None
        else:
            done = min(time.monotonic() - self._train_start, self.train.time_budget_s)
        if done is not None:
            self._progress.update(self._bar, completed=done, **fields)
        else:
            self._progress.update(self._bar, **fields)

    def _key_figures(self, step: str) -> str:
        """The figures the step recorded with its timing (settings.record_timing)."""
        # Imported here: pipelines/local.py imports this module.
        from invfold.pipelines.local import read_timings

        records = [r for r in read_timings(self.timings_file) if r["step"] == step] if self.timings_file else []
        figures = records[-1].get("figures", {}) if records else {}
        return "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items())

    # -- display -----------------------------------------------------------------------------
    def _say(self, text) -> None:
        if self._progress is not None:
            self._progress.console.print(text, highlight=False)
        else:
            self.console.print(text, highlight=False)

    def _start_bar(self) -> None:
        self._train_start, self._train_wall = time.monotonic(), time.time() - 1
        self._metrics, self._metrics_offset = None, 0
        total = self.train.max_steps or self.train.time_budget_s or None
        self._progress = Progress(
            TextColumn("    training"),
            BarColumn(),
            TextColumn("step {task.fields[step]}  loss {task.fields[loss]}  val recovery {task.fields[recovery]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            redirect_stdout=False,
            redirect_stderr=False,
            transient=True,
        )
        self._bar = self._progress.add_task("train", total=total, step=0, loss="-", recovery="-")
        self._progress.start()

    def _stop_bar(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress, self._bar = None, None
