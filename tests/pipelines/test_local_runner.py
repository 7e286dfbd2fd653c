"""The one set-up of KFP's local runner that `invfold run` and the design pipeline share."""

from __future__ import annotations

import builtins
import logging
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


def test_print_and_the_root_logger_are_put_back_when_kfps_parallel_tasks_left_theirs_behind(tmp_path, capsys):
    """KFP's runner (kfp/local/task_dispatcher.py) wraps each task in logging_utils'
    local_logger_context (the root logger at INFO, to stdout) and indented_print (builtins.print
    swapped for an indenting one); a ParallelFor's tasks run on threads
    (kfp/local/orchestrator/enhanced_dag_orchestrator.py). Two overlapping tasks, entered A, B and
    left A, B, leave A's swaps in place: the print wrote 4 spaces to stdout for every later print,
    those to stderr too (spaces before `invfold design --out -`'s FASTA), and the root logger sent
    every library's INFO records to stdout."""
    from kfp.local import logging_utils

    root = logging.getLogger()
    mine = (builtins.print, root.level, root.handlers[:])
    with _local_runner(str(tmp_path / "runs"), None, cache=True):
        for swap in (logging_utils.indented_print, logging_utils.local_logger_context):
            first, second = swap(), swap()
            first.__enter__()
            second.__enter__()
            first.__exit__(None, None, None)
            second.__exit__(None, None, None)
        assert (builtins.print, root.level, root.handlers) != mine  # what KFP leaves behind
    assert (builtins.print, root.level, root.handlers) == mine
    capsys.readouterr()
    print("to stderr", file=sys.stderr)
    logging.getLogger("some.library").info("an INFO record")
    assert capsys.readouterr().out == ""
