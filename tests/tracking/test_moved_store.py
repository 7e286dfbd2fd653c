"""A local runs folder (runs/mlflow.db, artifacts in runs/artifacts) copied elsewhere writes into
the copy: MLflow stores an experiment's artifact folder as an absolute URI, so before the store
was relocated a copy's new runs, logged models and registered versions wrote their artifacts into
the original folder. Driven through the real Tracker on real SQLite stores."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from mlflow import MlflowClient

from invfold.components.tracking import RunContext, Tracker, default_tracking_uri
from tests.tracking.test_tracker import _identity_onnx


def _context(uri: str) -> RunContext:
    return RunContext(pipeline_run_id=uuid.uuid4().hex, tracking_uri=uri, experiment="moved-store")


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def _record(uri: str, tmp_path: Path, tag: str) -> tuple[str, str]:
    """One run with an artifact and one registered ONNX model; the run ids (train, register)."""
    note = tmp_path / f"note-{tag}.txt"
    note.write_text(tag)
    ctx = _context(uri)
    with Tracker(ctx, "train") as train:
        train.log_artifact(note, "notes")
    with Tracker(ctx, "register") as register:
        example = _identity_onnx(tmp_path / f"model-{tag}.onnx")
        version = register.log_onnx_model(str(tmp_path / f"model-{tag}.onnx"), "moved-model", example, {})
    assert version and not train.skipped and not register.skipped, (train.skipped, register.skipped)
    return train.run_id, register.run_id


def test_a_copied_runs_folder_writes_its_artifacts_into_the_copy(tmp_path):
    original, copy = tmp_path / "original" / "runs", tmp_path / "copy" / "runs"
    first_train, _ = _record(default_tracking_uri(original), tmp_path, "first")
    shutil.copytree(original, copy)
    before = _files(original)

    uri = default_tracking_uri(copy)
    train, register = _record(uri, tmp_path, "second")

    assert _files(original) == before  # nothing new in the original, nothing changed there
    client = MlflowClient(uri)
    for run_id in (first_train, train, register):  # the copied run's too: read from the copy
        assert client.get_run(run_id).info.artifact_uri.startswith((copy / "artifacts").as_uri() + "/")
    assert (copy / "artifacts" / train / "artifacts" / "notes" / "note-second.txt").read_text() == "second"
    logged = [p for p in (copy / "artifacts").rglob("model.onnx")]
    assert len(logged) == 2  # the copied model and the new one, both under the copy
    latest = client.get_model_version("moved-model", "2")
    model_files = client.download_artifacts(register, "", str(tmp_path / "download"))
    assert Path(model_files).exists() and latest.status == "READY"
