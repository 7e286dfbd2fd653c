"""The one set-up of KFP's local runner that `invfold run` and the design pipeline share."""

from __future__ import annotations

import builtins
import os
import sys

from invfold.pipelines.local import _local_runner
from invfold.runtime import TIMINGS_ENV


def test_the_local_runner_restores_the_environment_it_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "mine"))
    monkeypatch.delenv(TIMINGS_ENV, raising=False)
    runs = tmp_path / "runs"
    with _local_runner(str(runs), None, cache=True) as session:
        assert os.environ["TMPDIR"] == str(runs / "tmp")
        assert os.environ[TIMINGS_ENV] == str(session.timings_file)
        assert session.tracking_uri.startswith("sqlite:") and str(runs) in session.tracking_uri
        (runs / "tmp" / "tmp.task").mkdir()  # what the runner leaves per task
        (runs / "pipeline_root" / "invfold-x").mkdir()
        assert session.run_folder() == str(runs / "pipeline_root" / "invfold-x")
    assert os.environ["TMPDIR"] == str(tmp_path / "mine") and TIMINGS_ENV not in os.environ
    assert not (runs / "tmp" / "tmp.task").exists()
    assert {p.name for p in runs.iterdir()} == {"pipeline_root", "workspace", "tmp"}


def test_print_is_put_back_when_kfps_parallel_tasks_left_theirs_behind(tmp_path, capsys):
    """KFP's runner (kfp/local/task_dispatcher.py) wraps each task in logging_utils.indented_print,
    which swaps builtins.print; a ParallelFor's tasks run on threads
    (kfp/local/orchestrator/enhanced_dag_orchestrator.py). Two overlapping tasks, entered A, B and
    left A, B, leave A's indenting print in place: it wrote 4 spaces to stdout for every later
    print, those to stderr too, which put spaces before `invfold design --out -`'s FASTA."""
    from kfp.local import logging_utils

    mine = builtins.print
    with _local_runner(str(tmp_path / "runs"), None, cache=True):
        first, second = logging_utils.indented_print(), logging_utils.indented_print()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        second.__exit__(None, None, None)
        assert builtins.print is not mine  # what KFP leaves behind
    assert builtins.print is mine
    capsys.readouterr()
    print("to stderr", file=sys.stderr)
    assert capsys.readouterr().out == ""
