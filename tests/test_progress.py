"""The shared progress display: log lines when stderr is not a terminal (CI, logs)."""

from __future__ import annotations

import logging

from invfold.progress import progress


def test_without_a_terminal_progress_is_logged_about_every_tenth(caplog, monkeypatch):
    monkeypatch.delenv("INVFOLD_NO_PROGRESS", raising=False)
    with caplog.at_level(logging.INFO, logger="invfold.progress"):
        with progress(100, "evaluate test", enabled=False, unit="residues") as advance:
            for _ in range(20):
                advance(5, "batch")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10
    assert lines[-1] == "evaluate test: 100/100 residues (batch)"


def test_no_progress_turns_the_bar_off(monkeypatch):
    monkeypatch.setenv("INVFOLD_NO_PROGRESS", "1")
    assert progress(10, "x", enabled=True).enabled is False
