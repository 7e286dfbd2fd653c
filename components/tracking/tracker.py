"""The one module that talks to MLflow.

Layout of a pipeline run in MLflow: one parent run per pipeline run, found by its tag
`kfp.pipeline_run_id` (created by the first step that records anything), with one nested run
per step. Where KFP injects MLFLOW_RUN_ID (its MLflow plugin creates a run per task, nested under
a run per DAG, under its own parent run), that run is the step's run and the top of its parents
is the pipeline's run.

Locally, tracking never stops a step: when the server is unreachable (checked once, fast) or a
call fails, the item is skipped, and `Tracker.close()` logs one warning listing everything that
was not recorded. On a cluster (`RunContext.required`, by default: inside a pod) MLflow is the
record of the run and the registry compare/register decide against, so a tracking failure fails
the step with `TrackingError` (KFP retries or reports it) instead of deciding against an empty
registry or leaving a run nobody can find.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invfold import __version__, storage
from invfold.errors import ConfigError, InputError, InvfoldError
from invfold.options import option

log = logging.getLogger(__name__)

# MLflow's client telemetry off unless asked for (before the first `import mlflow`, which starts it;
# every import of mlflow is in this module): it reports usage to an outside server, and its thread
# sets and unsets a variable of os.environ while a request's proxy lookup iterates os.environ,
# which failed an evaluate step's log_batch on the test cluster with KeyError
# '_MLFLOW_TELEMETRY_SESSION_ID' (mlflow 3.17.2, mlflow/telemetry/client.py).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

PIPELINE_RUN_TAG = "kfp.pipeline_run_id"
PARENT_TAG = "mlflow.parentRunId"
CHAMPION = "champion"
DEFAULT_EXPERIMENT = "invfold"
REACHABILITY_TIMEOUT_S = 3.0
# MLflow 3's UI opens an experiment on its GenAI overview (traces, token usage). The experiment
# kind tag says "model training" (mlflow/mlflow, mlflow/server/js/src/experiment-tracking/
# constants.ts: enum ExperimentKind); MLflow 3.17's UI, whose sidebar has a GenAI / Model training
# switch, follows that switch instead: the page's `workflowType` query parameter, else the
# browser's last choice (localStorage `mlflow.workflowType`, default genai). So the links we print
# carry MODEL_TRAINING_VIEW.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
MODEL_TRAINING_VIEW = "workflowType=machine_learning"
# The run list MLflow shows by default has no metric columns (its column choice lives in each
# browser's localStorage). A shared view is an experiment tag `mlflow.sharedViewState.<key>` whose
# JSON the page applies when its URL carries `viewStateShareKey=<key>` (mlflow/mlflow,
# mlflow/server/js/src/experiment-tracking/components/experiment-page/hooks/
# useSharedExperimentViewState.ts); every experiment page we print or link opens that view: the
# figures a model is judged on as columns, newest run first. A column is `<kind>.` + the name in
# backquotes (MLflow's makeCanonicalSortKey).
RUN_LIST_VIEW_KEY = "invfold"
RUN_LIST_COLUMNS = (
    "metrics.`validation/recovery`",
    "metrics.`test/recovery`",
    "metrics.`test/perplexity`",
    "metrics.`test/constant_recovery`",
    "params.`strategy`",
    "params.`preset`",
)
RUN_LIST_VIEW = {"selectedColumns": list(RUN_LIST_COLUMNS), "orderByKey": "attributes.start_time", "orderByAsc": False}
SHARED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
# Metric names: `<group>/<figure>`, one name per figure in every run. MLflow's run page draws one
# chart section per group, sections in alphabetical order (mlflow/server/js/src/experiment-tracking/
# components/runs-charts/runs-charts.types.ts: getBaseChartAndSectionConfigs), so training opens
# on `train/` (loss) and `validation/` (recovery); the trainer's `time` records, the timing
# internals, go under a group that sorts after them.
METRIC_GROUPS = {"train": "train", "validation": "validation", "time": "wallclock"}
# The training records' progress counters (a staircase, a near-flat count, a throughput) are time
# figures: under `wallclock/`, so the `train/` section holds the curves a run is judged by.
PROGRESS_FIGURES = ("epoch", "residues", "residues_per_s")
STEP_TAG = "invfold.step"


class TrackingError(InvfoldError, ValueError):
    """A step cannot say where (or for which run) to record, or, on a cluster, MLflow could not
    record what the step needs recorded (or answer what it needs to know)."""


def in_cluster(env=os.environ) -> bool:
    """Inside a pod (the kubelet sets KUBERNETES_SERVICE_HOST in every container)."""
    return bool(env.get("KUBERNETES_SERVICE_HOST"))


def default_tracking_uri(runs_dir: str | os.PathLike = "runs") -> str:
    """A SQLite file under the runs folder: no server needed."""
    path = Path(runs_dir).absolute() / "mlflow.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def artifact_location(uri: str) -> str | None:
    """Where a SQLite store's experiments keep their artifacts: beside the database (MLflow's
    own default is ./mlruns in whatever folder the step runs in). Servers decide for themselves."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///") :]).parent / "artifacts").absolute().as_uri()


# Where a SQLite store writes its artifact folder's absolute URI (MLflow resolves every local
# artifact location to an absolute one when it stores it).
LOCATION_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
)


def relocate_artifacts(uri: str, old: str) -> int:
    """Point a SQLite store whose folder was moved or copied at the artifact folder beside it:
    every location under `old` (the folder the store was made in) is rewritten under the one
    artifact_location gives now, so the copy writes and reads its own artifacts, never the
    original's. Returns how many values changed."""
    new = artifact_location(uri)
    changed = 0
    with closing(sqlite3.connect(uri[len("sqlite:///") :], timeout=30)) as db, db:
        for table, column in LOCATION_COLUMNS:
            if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                continue  # an MLflow schema without that table or column
            changed += db.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                (new, len(old) + 1, old, len(old) + 1, old + "/"),
            ).rowcount
    log.warning(
        "MLflow store %s was made in another folder: %d artifact locations moved from %s to %s", uri, changed, old, new
    )
    return changed


def _moved(uri: str, location: str | None) -> bool:
    """Whether an experiment's artifact folder is an `artifacts` folder beside another SQLite
    store's path: the store it is in was moved or copied since (a server's, or one chosen by
    hand elsewhere, is left alone)."""
    expected = artifact_location(uri)
    return bool(
        expected
        and location
        and location != expected
        and location.startswith("file://")
        and location.rstrip("/").rsplit("/", 1)[-1] == "artifacts"
    )


def reachable(uri: str, timeout_s: float = REACHABILITY_TIMEOUT_S) -> tuple[bool, str]:
    """(True, "") for local stores; for a server, whether /health answers within timeout_s."""
    if not uri.startswith(("http://", "https://")):
        return True, ""

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s) as response:
            return response.status == 200, f"HTTP {response.status}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        return False, str(getattr(err, "reason", err))


@dataclass
class RunContext:
    """Which pipeline run a step belongs to, and where it is recorded. tracking_uri "" means
    MLFLOW_TRACKING_URI from the environment (what KFP injects on clusters). `adhoc`: a command
    run on its own (`invfold train --tracking-uri ...`): one top-level run of its own in the
    experiment, beside the pipelines' runs (pipeline_run_id "": none)."""

    pipeline_run_id: str
    tracking_uri: str = ""
    experiment: str = DEFAULT_EXPERIMENT
    pipeline_run_name: str = ""
    pipeline_version: str = field(default_factory=lambda: __version__)  # the invfold version that runs
    run_url: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    # Whether a tracking failure fails the step: None = on a cluster yes, locally no.
    required: bool | None = None
    adhoc: bool = False

    def __post_init__(self) -> None:
        if self.required is None:
            self.required = in_cluster()
        if not self.pipeline_run_id and not self.adhoc:
            raise TrackingError("RunContext.pipeline_run_id must be given (the KFP run id)")
        self.tracking_uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not self.tracking_uri:
            raise TrackingError("RunContext.tracking_uri: none given and MLFLOW_TRACKING_URI is not set")
        self.experiment = self.experiment or DEFAULT_EXPERIMENT


@dataclass
class CommandTracking:
    """MLflow: record this command as a run of its own, beside the pipelines' runs."""

    tracking_uri: str | None = option(
        None,
        "MLflow at URI (a server, or sqlite:///FILE such as invfold run's runs/mlflow.db): where a "
        "models:/ or runs:/ MODEL is read from (default MLFLOW_TRACKING_URI), and where this command "
        "records a run of its own: when given with a model file, or with --experiment (with only "
        "--experiment: at MLFLOW_TRACKING_URI); reading a models:/ or runs:/ MODEL records nothing",
        metavar="URI",
    )
    experiment: str | None = option(
        None, f"MLflow experiment of the run (default {DEFAULT_EXPERIMENT!r}, the pipeline's)", metavar="NAME"
    )

    def context(self, model: str | None = None) -> RunContext | None:
        """Where the command records its run; None: nothing asked for, nothing recorded. A
        --tracking-uri that is there to read a models:/ or runs:/ `model` asks for no run of its
        own: --experiment does."""
        if self.tracking_uri is None and self.experiment is None:
            return None
        if self.experiment is None and str(model).startswith(("models:/", "runs:/")):
            return None
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise ConfigError("--experiment: no MLflow to record to; give --tracking-uri or set MLFLOW_TRACKING_URI")
        return RunContext(
            pipeline_run_id="", tracking_uri=uri, experiment=self.experiment or DEFAULT_EXPERIMENT, adhoc=True
        )


class Tracker:
    """A step's MLflow run. Use as a context manager; every method records or, when MLflow is
    out of reach, notes what it skipped."""

    def __init__(self, ctx: RunContext, step: str, params: dict[str, Any] | None = None):
        self.ctx, self.step = ctx, step
        self.skipped: list[str] = []
        self.client = None
        self.parent_run_id: str | None = None
        self.run_id: str | None = None
        self.failed = False  # set by a step whose work failed without an exception (a non-zero exit)
        self._initial_params = params or {}
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        ok, why = reachable(ctx.tracking_uri)
        self.available = ok
        if not ok:
            self.reason = f"tracking server {ctx.tracking_uri} unreachable ({why})"
            if ctx.required:
                raise TrackingError(f"{self.reason}: the {step} step needs its record in MLflow on a cluster")
            log.warning("%s: the %s step goes on without recording to MLflow", self.reason, step)
        else:
            self.reason = ""

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Tracker:
        self._record("step run", self._start, needs_run=False)
        if self._initial_params:
            self.log_params(self._initial_params)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("FAILED" if exc_type or self.failed else "FINISHED")

    def close(self, status: str = "FINISHED") -> None:
        if self.run_id and not os.environ.get("MLFLOW_RUN_ID"):
            self._record(f"step run status {status}", lambda: self.client.set_terminated(self.run_id, status))
        if self.skipped:
            log.warning(
                "MLflow: the %s step did NOT record: %s%s",
                self.step,
                "; ".join(self.skipped),
                f" ({self.reason})" if self.reason else "",
            )

    def _record(self, what: str, fn: Callable[[], Any], needs_run: bool = True) -> Any:
        if not self.available or (needs_run and self.run_id is None):
            self.skipped.append(what)
            return None
        try:
            return fn()
        except Exception as err:  # locally, tracking must never stop the step
            if self.ctx.required:
                raise TrackingError(f"MLflow: the {self.step} step could not record {what}: {err}") from err
            log.warning("MLflow: could not record %s: %s", what, err)
            self.skipped.append(what)
            if _is_connection_error(err):
                self.available, self.reason = False, f"tracking server {self.ctx.tracking_uri} stopped answering"
            return None

    def _on_own_run(self, parent: bool) -> bool:
        """An item for the pipeline's run when that run is this one (ad hoc): it has it already."""
        return parent and self.run_id is not None and self.parent_run_id == self.run_id

    def _start(self) -> None:
        from mlflow import MlflowClient

        self.client = MlflowClient(self.ctx.tracking_uri)
        injected = os.environ.get("MLFLOW_RUN_ID")
        if self.ctx.adhoc:
            run = self.client.create_run(
                _experiment_id(self.client, self.ctx.experiment),
                run_name=f"{self.step}-{time.strftime('%Y%m%d-%H%M%S')}",
                tags={
                    STEP_TAG: self.step,
                    "invfold.source": "command line",
                    "kfp.pipeline_version": self.ctx.pipeline_version,
                },
            )
            self.run_id = self.parent_run_id = run.info.run_id
        elif injected:
            run = self.client.get_run(injected)
            _tag_experiment(self.client, self.client.get_experiment(run.info.experiment_id))
            self.run_id = injected
            self.parent_run_id = _top_run(self.client, run)
            self.client.set_tag(self.parent_run_id, PIPELINE_RUN_TAG, self.ctx.pipeline_run_id)
            if self.parent_run_id != injected:  # findable as this step's run (step_run_id)
                self.client.set_tag(injected, PIPELINE_RUN_TAG, self.ctx.pipeline_run_id)
                self.client.set_tag(injected, STEP_TAG, self.step)
        else:
            experiment_id = _experiment_id(self.client, self.ctx.experiment)
            self.parent_run_id = _find_or_create_parent(self.client, experiment_id, self.ctx)
            run = self.client.create_run(
                experiment_id,
                run_name=self.step,
                tags={
                    PARENT_TAG: self.parent_run_id,
                    STEP_TAG: self.step,
                    PIPELINE_RUN_TAG: self.ctx.pipeline_run_id,
                },
            )
            self.run_id = run.info.run_id
        log.info(
            "MLflow: %s run %s (pipeline run %s) at %s",
            self.step,
            self.run_id,
            self.parent_run_id,
            storage.display_uri(self.ctx.tracking_uri),
        )

    def where(self) -> str:
        """One line for a person: where this run is recorded, or why it is not."""
        if self.run_id is None:
            return f"MLflow: nothing recorded ({self.reason or 'see the warnings above'})"
        return (
            f"MLflow: run {self.run_id} in experiment {self.ctx.experiment!r} at "
            f"{storage.display_uri(self.ctx.tracking_uri)}"
        )

    def pipeline_run_page(self) -> str | None:
        """The address of the pipeline's MLflow run in the tracking server's UI, for links from
        other UIs (the Kubeflow UI shows the register step's summary); None when the store has no
        UI of its own (a file or database URI) or nothing was recorded."""
        if self.parent_run_id is None or not self.ctx.tracking_uri.startswith(("http://", "https://")):
            return None
        experiment_id = self._record(
            "the run's experiment", lambda: self.client.get_run(self.parent_run_id).info.experiment_id
        )
        if experiment_id is None:
            return None
        return f"{self.ctx.tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{self.parent_run_id}"

    # -- recording -------------------------------------------------------------------------
    def log_params(self, params: dict[str, Any], parent: bool = False) -> None:
        if self._on_own_run(parent):
            return
        from mlflow.entities import Param

        items = [Param(k, _param_value(v)) for k, v in sorted(params.items())]
        target = lambda: self.parent_run_id if parent else self.run_id  # noqa: E731
        self._record(f"{len(items)} params", lambda: self.client.log_batch(target(), params=items))

    def set_tags(self, tags: dict[str, Any], parent: bool = False) -> None:
        if self._on_own_run(parent):
            return

        def do():
            for k, v in tags.items():
                self.client.set_tag(self.parent_run_id if parent else self.run_id, k, _param_value(str(v)))

        self._record(f"tags {sorted(tags)}", do)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None, parent: bool = False) -> None:
        if self._on_own_run(parent):
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in sorted(metrics.items()) if _finite(v)]
        target = lambda: self.parent_run_id if parent else self.run_id  # noqa: E731
        self._record(f"metrics {sorted(metrics)}", lambda: self.client.log_batch(target(), metrics=items))

    def log_metrics_file(self, path: str | os.PathLike) -> int:
        """Every numeric value of train's metrics.jsonl as `<group>/<name>` at its step and time
        (group: METRIC_GROUPS[split]); returns how many points were read."""
        from mlflow.entities import Metric

        points = []
        with open(path) as fh:
            for line in fh:
                record = json.loads(line)
                split, step = record.get("split", "train"), int(record.get("step", 0))
                group = METRIC_GROUPS.get(split, split)
                stamp = int(float(record.get("time", time.time())) * 1000)
                for key, value in record.items():
                    if key not in ("split", "step", "time") and _finite(value):
                        where = METRIC_GROUPS["time"] if split == "train" and key in PROGRESS_FIGURES else group
                        points.append(Metric(f"{where}/{key}", float(value), stamp, step))

        def do():
            for start in range(0, len(points), 900):  # the REST API takes 1000 per batch
                self.client.log_batch(self.run_id, metrics=points[start : start + 900])

        self._record(f"{len(points)} metric points from {Path(path).name}", do)
        return len(points)

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None, parent: bool = False) -> None:
        if self._on_own_run(parent):
            return
        target = lambda: self.parent_run_id if parent else self.run_id  # noqa: E731
        self._record(
            f"artifact {Path(path).name}", lambda: self.client.log_artifact(target(), str(path), artifact_path)
        )

    def log_artifacts(self, folder: str | os.PathLike, artifact_path: str | None = None, parent: bool = False) -> None:
        if self._on_own_run(parent):
            return
        target = lambda: self.parent_run_id if parent else self.run_id  # noqa: E731
        self._record(
            f"artifacts {Path(folder).name}/",
            lambda: self.client.log_artifacts(target(), str(folder), artifact_path),
        )

    def step_run_id(self, step: str) -> str | None:
        """The run of another step of this pipeline run (the newest finished one: a retried step
        leaves a failed run beside it), or None."""

        def do():
            experiment_id = self.client.get_run(self.parent_run_id).info.experiment_id
            runs = self.client.search_runs(
                [experiment_id],
                filter_string=f"tags.`{PIPELINE_RUN_TAG}` = '{self.ctx.pipeline_run_id}' "
                f"and tags.`{STEP_TAG}` = '{step}' and attributes.status = 'FINISHED'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
            return runs[0].info.run_id if runs else ""

        return self._record(f"the {step} step's run", do) or None

    def log_dataset(
        self, name: str, digest: str, source: str, context: str, profile: dict | None = None, parent: bool = False
    ) -> None:
        """A prepared dataset as an MLflow dataset input of this run, or of the pipeline's run
        (context: training, validation, testing); the digest is prep's content digest."""
        if self._on_own_run(parent):
            return
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(
            name=name,
            digest=digest[:36],
            source_type="invfold-prepared",
            source=json.dumps({"uri": storage.display_uri(source), "digest": digest}),
            profile=json.dumps(profile or {}),
        )
        tags = [InputTag("mlflow.data.context", context)]
        target = lambda: self.parent_run_id if parent else self.run_id  # noqa: E731
        self._record(
            f"dataset input {name}", lambda: self.client.log_inputs(target(), datasets=[DatasetInput(dataset, tags)])
        )

    # -- model registry --------------------------------------------------------------------
    def champion(self, model_name: str) -> dict | None:
        """{'version', 'tags', 'run_id'} of the version holding the `champion` alias, or None."""

        def do():
            from mlflow.exceptions import MlflowException

            try:
                version = self.client.get_model_version_by_alias(model_name, CHAMPION)
            except MlflowException as err:
                if _not_found(err):
                    return {}
                # MLflow's basic-auth answers 403 for an alias of a model that does not exist
                # (mlflow/server/auth: no model, no permission to find): a first run has none.
                if "403" in str(err) and not self._registered(model_name):
                    return {}
                raise
            return {"version": version.version, "tags": dict(version.tags), "run_id": version.run_id}

        found = self._record(f"champion of {model_name}", do)
        return found or None

    def _registered(self, model_name: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(model_name)
        except MlflowException as err:
            if _not_found(err):
                return False
            raise
        return True

    def download_artifact(self, run_id: str, artifact_path: str, dst: str) -> str | None:
        return self._record(
            f"download {artifact_path} of run {run_id}",
            lambda: self.client.download_artifacts(run_id, artifact_path, dst),
        )

    def log_onnx_model(
        self,
        onnx_path: str,
        model_name: str,
        input_example: dict,
        version_tags: dict[str, Any],
        metrics: dict[str, float] | None = None,
        description: str = "",
        source_run_id: str | None = None,
    ) -> str | None:
        """Log the ONNX graph with signature and input example into this run, with `metrics` on
        the logged model; register it under model_name as a version whose source run is
        `source_run_id` (the training run that made the weights; default this run), tag and
        describe model and version, linking both runs; link the version from the pipeline's run.
        Returns the version (None when not recorded)."""

        def do():
            import mlflow
            import onnx
            import onnxruntime as ort
            from mlflow.exceptions import MlflowException
            from mlflow.models import infer_signature

            session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
            outputs = session.run(None, input_example)
            signature = infer_signature(
                input_example, {o.name: v for o, v in zip(session.get_outputs(), outputs, strict=True)}
            )
            mlflow.set_tracking_uri(self.ctx.tracking_uri)
            with mlflow.start_run(run_id=self.run_id):
                info = mlflow.onnx.log_model(
                    onnx.load(onnx_path),
                    name="model",
                    signature=signature,
                    input_example=input_example,
                    save_as_external_data=False,
                    onnx_execution_providers=["CPUExecutionProvider"],
                )
            for key, value in (metrics or {}).items():
                if _finite(value):
                    self.client.log_metric(self.run_id, key, float(value), model_id=info.model_id)
            try:
                self.client.create_registered_model(model_name)
            except MlflowException as err:
                if "ALREADY_EXISTS" not in str(err.error_code):
                    raise
            source_run = source_run_id or self.run_id
            experiment_id = self.client.get_run(self.run_id).info.experiment_id
            runs = f"#/experiments/{experiment_id}/runs"
            links = f"trained in run [{source_run}]({runs}/{source_run})"
            if source_run != self.run_id:
                links += f", exported and registered in run [{self.run_id}]({runs}/{self.run_id})"
            tags = {**version_tags, "invfold.train_run_id": source_run, "invfold.register_run_id": self.run_id}
            version = self.client.create_model_version(
                model_name,
                source=info.model_uri,
                run_id=source_run,
                tags={k: _param_value(str(v)) for k, v in tags.items()},
                description=storage.redact(f"{description}\n\nRuns: {links}.".strip()),
                model_id=info.model_id,
            ).version
            version = str(version)
            if description:
                self.client.update_registered_model(model_name, description=storage.redact(description))
            link = f"[{model_name} version {version}](#/models/{model_name}/versions/{version})"
            self.client.set_tag(
                self.parent_run_id,
                "mlflow.note.content",
                f"Registered {link}: the ONNX model of this pipeline run (trained by its `train` step, "
                f"exported and registered by its `{self.step}` step).",
            )
            if source_run != self.run_id:
                self.client.set_tag(source_run, "invfold.registered_version", f"{model_name} v{version}")
            return version

        return self._record(f"ONNX model registration as {model_name}", do)

    def set_version_tags(self, model_name: str, version: str, tags: dict[str, Any]) -> None:
        def do():
            for key, value in tags.items():
                self.client.set_model_version_tag(model_name, version, key, _param_value(str(value)))

        self._record(f"tags {sorted(tags)} of {model_name} v{version}", do)

    def set_champion(self, model_name: str, version: str) -> None:
        self._record(
            f"alias {CHAMPION} -> {model_name} v{version}",
            lambda: self.client.set_registered_model_alias(model_name, CHAMPION, version),
        )


def finish_pipeline(ctx: RunContext, failed: bool, message: str = "") -> list[str]:
    """Close every run of the pipeline run: FAILED when a step failed, FINISHED otherwise (runs
    a failing step left RUNNING become FAILED too). Returns the run ids it closed."""
    from mlflow import MlflowClient

    ok, why = reachable(ctx.tracking_uri)
    if not ok:
        log.warning(
            "MLflow unreachable (%s): pipeline run %s not marked %s",
            why,
            ctx.pipeline_run_id,
            "FAILED" if failed else "FINISHED",
        )
        return []
    client = MlflowClient(ctx.tracking_uri)
    experiment = client.get_experiment_by_name(ctx.experiment)
    if experiment is None:
        return []
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{PIPELINE_RUN_TAG}` = '{ctx.pipeline_run_id}'"
    )
    closed = []
    for run in runs:
        is_parent = PARENT_TAG not in run.data.tags
        if run.info.status == "RUNNING" or (is_parent and failed):
            status = "FAILED" if failed else "FINISHED"
            if is_parent and message:
                client.set_tag(run.info.run_id, "invfold.pipeline_status", _param_value(message)[:5000])
            client.set_terminated(run.info.run_id, status)
            closed.append(run.info.run_id)
    return closed


def experiment_page(experiment_id: str) -> str:
    """The UI route of an experiment's run list in the model-training view with invfold's
    columns (RUN_LIST_VIEW), relative to the server's root."""
    return f"#/experiments/{experiment_id}/runs?{MODEL_TRAINING_VIEW}&viewStateShareKey={RUN_LIST_VIEW_KEY}"


def experiment_tags() -> dict[str, str]:
    """What makes an experiment open as invfold's: the model-training kind and the run-list view."""
    return {
        EXPERIMENT_KIND_TAG: EXPERIMENT_KIND,
        SHARED_VIEW_TAG_PREFIX + RUN_LIST_VIEW_KEY: json.dumps(RUN_LIST_VIEW, sort_keys=True),
    }


def stop_pipeline_runs(tracking_uri: str, experiment: str, since: float, reason: str) -> list[str]:
    """A local pipeline run stopped by a signal (its exit handler never runs): the pipeline's
    parent run (the one started in `experiment` at or after `since`, seconds) and every run of
    that pipeline run still RUNNING end KILLED, the reason on the parent. Returns the run ids it
    ended, the parent's first."""
    from mlflow import MlflowClient

    if not reachable(tracking_uri)[0]:
        log.warning("MLflow unreachable: the stopped run's MLflow runs are left as they are")
        return []
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    started = client.search_runs(
        [found.experiment_id],
        filter_string=f"attributes.start_time >= {int(since * 1000)}",
        order_by=["attributes.start_time ASC"],
    )
    parents = [r for r in started if PARENT_TAG not in r.data.tags and PIPELINE_RUN_TAG in r.data.tags]
    if not parents:
        return []
    parent = parents[0]
    runs = client.search_runs(
        [found.experiment_id], filter_string=f"tags.`{PIPELINE_RUN_TAG}` = '{parent.data.tags[PIPELINE_RUN_TAG]}'"
    )
    ended = []
    for run in sorted(runs, key=lambda r: r.info.run_id != parent.info.run_id):
        if run.info.status == "RUNNING":
            if run.info.run_id == parent.info.run_id:
                client.set_tag(run.info.run_id, "invfold.pipeline_status", _param_value(reason))
            client.set_terminated(run.info.run_id, "KILLED")
            ended.append(run.info.run_id)
    return ended


def _experiment_id(client, name: str) -> str:
    """The experiment's id, created (artifacts beside a SQLite store), moved with its store
    (relocate_artifacts) or tagged as a model-training experiment with invfold's run-list view
    as needed."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(
                name,
                artifact_location=artifact_location(client.tracking_uri),
                tags=experiment_tags(),
            )
        except Exception:  # noqa: BLE001 - created meanwhile by another step
            experiment = client.get_experiment_by_name(name)
    if _moved(client.tracking_uri, experiment.artifact_location):
        relocate_artifacts(client.tracking_uri, experiment.artifact_location.rstrip("/"))
    _tag_experiment(client, experiment)
    return experiment.experiment_id


def _tag_experiment(client, experiment) -> None:
    """invfold's experiment tags on `experiment` where they are missing, whoever made it (KFP's
    MLflow plugin makes the experiment of the runs it injects: without them MLflow's UI opens it
    as a GenAI experiment, on a page without the run list)."""
    for key, value in experiment_tags().items():
        if experiment.tags.get(key) != value:
            client.set_experiment_tag(experiment.experiment_id, key, value)


def _top_run(client, run) -> str:
    """The run at the top of `run`'s parents: KFP's MLflow plugin nests each task's run under a
    run per DAG it sits in (the exit handler, a condition), those under the pipeline's run."""
    seen = {run.info.run_id}
    while (parent := run.data.tags.get(PARENT_TAG)) and parent not in seen and len(seen) < 32:
        seen.add(parent)
        run = client.get_run(parent)
    return run.info.run_id


def _find_or_create_parent(client, experiment_id: str, ctx: RunContext) -> str:
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{PIPELINE_RUN_TAG}` = '{ctx.pipeline_run_id}'")
    parents = [r for r in runs if PARENT_TAG not in r.data.tags]
    if parents:
        return parents[0].info.run_id
    tags = {
        PIPELINE_RUN_TAG: ctx.pipeline_run_id,
        "kfp.pipeline_run_name": ctx.pipeline_run_name,
        "kfp.pipeline_version": ctx.pipeline_version,
        **ctx.tags,
    }
    if ctx.run_url:
        tags["kfp.run_url"] = ctx.run_url
    run = client.create_run(
        experiment_id,
        run_name=ctx.pipeline_run_name or f"pipeline-{ctx.pipeline_run_id[:12]}",
        tags={k: str(v) for k, v in tags.items() if v},
    )
    return run.info.run_id


def _param_value(value: Any) -> str:
    """A param or tag value as MLflow keeps it: text, with credentials in any URI hidden."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return storage.redact(text)[:6000]


def _finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and value not in (float("inf"), float("-inf"))
    )


def _not_found(err) -> bool:
    return "RESOURCE_DOES_NOT_EXIST" in str(err.error_code) or "not found" in str(err).lower()


def _is_connection_error(err: Exception) -> bool:
    text = f"{type(err).__name__} {err}".lower()
    return any(word in text for word in ("connection", "max retries", "timed out", "timeout", "refused"))


def fetch_registered_file(tracking_uri: str, model_name: str, version: str, artifact_path: str, dst: str) -> dict:
    """Download `artifact_path` (e.g. "model_pt/model.pt", as the register step logs it) of a
    registered model version, given by number ("3") or alias ("champion"); returns
    {"path", "version", "run_id"}. Unlike a Tracker, this fails loudly: a step that needs the
    model cannot go on without it."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise TrackingError("no tracking URI given and MLFLOW_TRACKING_URI is not set: cannot find the model")
    client = MlflowClient(uri)
    what = f"registered model {model_name!r} {'version' if version.isdigit() else 'alias'} {version!r} at {uri}"
    try:
        found = (
            client.get_model_version(model_name, version)
            if version.isdigit()
            else client.get_model_version_by_alias(model_name, version)
        )
    except MlflowException as err:
        raise TrackingError(f"{what}: not found ({err.message.splitlines()[0]})") from None
    try:
        path = client.download_artifacts(found.run_id, artifact_path, dst)
    except (MlflowException, OSError) as err:
        raise TrackingError(f"{what}: its run {found.run_id} has no {artifact_path} ({err})") from None
    return {"path": path, "version": str(found.version), "run_id": found.run_id}


def fetch_model_uri(
    tracking_uri: str,
    dst: str,
    *,
    model_name: str | None = None,
    version: str | None = None,
    checkpoint: str | None = None,
    run_id: str | None = None,
    artifact_path: str | None = None,
) -> tuple[str, str | None]:
    """(the local model file an MLflow model URI names, the registered version it resolved to:
    None for a run's artifact); components/model/reference.py parses the URI. A registered
    version (number or alias) -> its run's `checkpoint` artifact when the run logged one, else
    the version's own (ONNX) model; a run's artifact -> that file, or model.pt / model.onnx
    inside that folder. A name, alias or run that does not exist is an InputError (exit 2); a
    server that does not answer is a TrackingError."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    what = (
        f"models:/{model_name}{'/' if str(version).isdigit() else '@'}{version}"
        if model_name
        else f"runs:/{run_id}/{artifact_path}"
    )
    if not tracking_uri:
        raise TrackingError(f"{what}: no tracking URI; give --tracking-uri or set MLFLOW_TRACKING_URI")
    ok, detail = reachable(tracking_uri)
    if not ok:
        raise TrackingError(f"{what}: the MLflow server {tracking_uri} does not answer ({detail})")
    where = f"{what} (at {tracking_uri})"
    # MLflow draws a progress bar per download on stderr: a model file is small, and the CLI's
    # error (or --json) output should be the one line it prints
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = MlflowClient(tracking_uri)
    if model_name:
        try:
            found = (
                client.get_model_version(model_name, version)
                if str(version).isdigit()
                else client.get_model_version_by_alias(model_name, version)
            )
        except MlflowException as err:
            raise InputError(where, None, None, "a registered model version", err.message.splitlines()[0]) from None
        if checkpoint:
            try:
                return client.download_artifacts(found.run_id, checkpoint, dst), str(found.version)
            except (MlflowException, OSError):
                pass  # no checkpoint beside the registered model: the registered model itself
        import mlflow.artifacts

        source = client.get_model_version_download_uri(model_name, found.version)
        local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=dst, tracking_uri=tracking_uri)
        return _model_file_in(local, where), str(found.version)
    try:
        local = client.download_artifacts(run_id, artifact_path, dst)
    except (MlflowException, OSError) as err:
        message = err.message.splitlines()[0] if isinstance(err, MlflowException) else str(err)
        raise InputError(where, None, None, "an artifact of an existing run", message) from None
    return _model_file_in(local, where), None


def _model_file_in(local: str, where: str) -> str:
    if os.path.isfile(local):
        return local
    for name in ("model.pt", "model.onnx"):
        if os.path.isfile(os.path.join(local, name)):
            return os.path.join(local, name)
    raise InputError(
        where, None, None, "a model file or a folder holding model.pt or model.onnx", "a folder without one"
    )
