"""The one set-up of KFP's local runner that `invfold run` and the design pipeline share."""

from __future__ import annotations

import os

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
