"""One progress display for every step that takes longer than a few seconds (evaluate, scoring,
design, export): a rich bar on stderr when stderr is a terminal, else a log line every
`log_every` units, so logs and CI output stay readable. INVFOLD_NO_PROGRESS=1 turns the bar off.
"""

from __future__ import annotations

import logging
import os
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

log = logging.getLogger("invfold.progress")


def bar_enabled(enabled: bool | None = None) -> bool:
    """A bar only on a terminal (unless forced), never when INVFOLD_NO_PROGRESS=1."""
    if os.environ.get("INVFOLD_NO_PROGRESS") == "1":
        return False
    return sys.stderr.isatty() if enabled is None else enabled


class progress:
    """`with progress(total, "evaluate test") as advance: ... advance(n, "what")` moves the bar on
    by n units (residues, records, decoding steps: whatever `unit` names)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None, unit: str = "", log_every: int = 0):
        self.total, self.label, self.unit = int(total), label, unit
        self.enabled = bar_enabled(enabled)
        self.log_every = log_every or max(1, self.total // 10)
        self.done, self._logged = 0, 0

    def __enter__(self):
        if self.enabled:
            self.bar = Progress(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=self.total)
        return self.advance

    def advance(self, amount: int = 1, description: str = "") -> None:
        self.done += amount
        if self.enabled:
            self.bar.update(self.task, advance=amount, description=description)
        elif self.done - self._logged >= self.log_every or self.done >= self.total:
            self._logged = self.done
            log.info(
                "%s: %d/%d %s%s", self.label, self.done, self.total, self.unit, f" ({description})" * bool(description)
            )

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.stop()
        return False
