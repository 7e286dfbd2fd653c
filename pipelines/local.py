"""Run the pipeline on this machine with KFP's local runner (the `invfold run` main job).

Steps run as subprocesses of this Python (images are ignored), training as local processes,
MLflow in a SQLite file under the runs folder unless a tracking URI is given. Prep is cached
across runs (its key includes the data fingerprint); everything else runs each time."""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from invfold.allocator import allocator_env
from invfold.components.tracking import default_tracking_uri, experiment_page, reachable, stop_pipeline_runs
from invfold.environ import restored_environ
from invfold.errors import ConfigError, InvfoldError
from invfold.pipelines import defaults
from invfold.pipelines.console import StepConsole, TrainLimit
from invfold.pipelines.design_pipeline import design_pipeline
from invfold.pipelines.pipeline import invfold_pipeline
from invfold.pipelines.stopping import Signalled, stop_on_signal
from invfold.runtime import TIMINGS_ENV

log = logging.getLogger(__name__)


class PipelineFailed(InvfoldError, RuntimeError):
    """A step failed; the message names it and its error."""


class PipelineStopped(InvfoldError):
    """SIGTERM or SIGINT stopped the run: its processes were stopped and its MLflow runs marked
    KILLED; the exit status is the signal's (143, 130), as for a process the signal ended."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


@dataclass
class LocalRun:
    """What a local run leaves behind, for people (printed) and tests (read)."""

    runs_dir: str
    pipeline_root: str
    run_folder: str | None
    tracking_uri: str
    experiment: str
    mlflow_run_id: str | None
    registered_model: str
    registered_version: str | None
    wall_s: float
    timings: list[dict] = field(default_factory=list)
    log_file: str | None = None
    experiment_id: str | None = None
    champion_version: str | None = None  # the registered model's champion after the run (None: none)

    def figures(self, step: str) -> dict:
        """The key figures a step recorded this run ({} when it did not run, e.g. cached)."""
        found = [t.get("figures", {}) for t in self.timings if t["step"] == step]
        return found[-1] if found else {}

    def ui_command(self) -> str:
        """How to see the run: the UI command and the experiment's page in its model-training
        view (MLflow 3 otherwise opens on its GenAI overview)."""

        page = experiment_page(self.experiment_id) if self.experiment_id else ""
        if self.tracking_uri.startswith("sqlite:"):
            return f"mlflow ui --backend-store-uri {self.tracking_uri}, then open http://127.0.0.1:5000/{page}"
        return f"open {self.tracking_uri.rstrip('/')}/{page}"

    def where_to_look(self) -> str:
        ui = self.ui_command()
        compute = sum(t["compute_s"] for t in self.timings)
        lines = [
            f"pipeline finished in {self.wall_s:.0f} s ({compute:.0f} s of it the steps' own compute)",
            f"  MLflow UI:        {ui}",
            f"  MLflow run:       {self.mlflow_run_id or 'not recorded'} (experiment {self.experiment!r})",
            f"  registered model: {self.registered_model} version {self.registered_version}"
            if self.registered_version
            else f"  registered model: {self.registered_model}: not registered this run (see compare-with-champion)",
            f"  artifacts:        {self.run_folder or self.pipeline_root}",
        ]
        return "\n".join(lines)


@dataclass
class _Session:
    """One pipeline run through KFP's local runner: its folders, the MLflow URI, the step-timings
    file, and what was in pipeline_root before (the run's folder is what is new after)."""

    runs: Path
    tracking_uri: str
    timings_file: Path
    start: float
    before: set[Path]

    def run_folder(self) -> str | None:
        new = set((self.runs / "pipeline_root").iterdir()) - self.before
        return str(max(new, key=lambda p: p.stat().st_mtime)) if new else None


@dataclass
class _KfpSwaps:
    """What KFP's runner swaps around each task and puts back after it: builtins.print (an
    indenting one) and the root logger's level and handlers (INFO, to stdout). A ParallelFor's
    tasks run on threads, and when two overlap (entered A, B; left A, B) A's swap stays for the
    rest of the process: every later print wrote spaces to stdout, to stderr too, and every
    library's INFO records went to stdout. What was there before the run is put back after it."""

    print: object
    level: int
    handlers: list

    @classmethod
    def save(cls) -> _KfpSwaps:
        root = logging.getLogger()
        return cls(builtins.print, root.level, root.handlers[:])

    def restore(self) -> None:
        builtins.print = self.print
        root = logging.getLogger()
        root.setLevel(self.level)
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in self.handlers:
            root.addHandler(handler)


@contextlib.contextmanager
def _local_runner(runs_dir: str, tracking_uri: str | None, cache: bool, experiment: str = defaults.EXPERIMENT):
    """Set up KFP's local runner under `runs_dir` (the one place a local run's stores are chosen:
    see ARCHITECTURE.md's table) and restore the environment it changes when the run ends: TMPDIR
    (the runner leaves a temp folder per task there, removed here), the step-timings file and the
    allocator the steps' processes run under (jemalloc when the machine has it), and what KFP's
    runner can leave swapped (_KfpSwaps). SIGTERM/SIGINT
    meanwhile stop every process the run started (pipelines/stopping.py) and mark its MLflow runs
    in `experiment` KILLED: PipelineStopped."""
    from kfp import local

    runs = Path(runs_dir).absolute()
    for sub in ("pipeline_root", "workspace", "tmp"):
        (runs / sub).mkdir(parents=True, exist_ok=True)
    session = _Session(
        runs,
        tracking_uri or default_tracking_uri(runs),
        runs / "tmp" / f"timings-{os.getpid()}-{int(time.time())}.jsonl",
        time.time(),
        set((runs / "pipeline_root").iterdir()),
    )
    allocator = allocator_env()  # every step's process on jemalloc (invfold/allocator.py)
    kfp_swaps = _KfpSwaps.save()
    try:
        with restored_environ(TIMINGS_ENV, "TMPDIR", *allocator):
            os.environ[TIMINGS_ENV] = str(session.timings_file)
            os.environ["TMPDIR"] = str(runs / "tmp")
            os.environ.update(allocator)
            local.init(
                runner=local.SubprocessRunner(use_venv=False),
                pipeline_root=str(runs / "pipeline_root"),
                workspace_root=str(runs / "workspace"),
                enable_caching=cache,
                raise_on_error=True,
            )
            with stop_on_signal():
                yield session
    except Signalled as stop:
        name = signal.Signals(stop.signum).name
        ended = stop_pipeline_runs(session.tracking_uri, experiment, session.start, f"stopped by {name}")
        recorded = f"MLflow runs {', '.join(ended)} marked KILLED" if ended else "no MLflow run left open"
        where = session.run_folder() or runs / "pipeline_root"
        raise PipelineStopped(
            f"stopped by {name}: every process of the run ended; {recorded}; artifacts so far in {where}", stop.signum
        ) from None
    finally:
        kfp_swaps.restore()
        _remove_task_temp_folders(runs / "tmp", session.start)


def run_local(
    params: dict,
    runs_dir: str = "runs",
    tracking_uri: str | None = None,
    cache: bool = True,
    console=None,
    verbose: bool = True,
) -> LocalRun:
    """Run the pipeline with `params` (pipeline parameters; unset ones take the pipeline's
    defaults). Everything the runner prints goes to runs/logs/run-<time>.log; `console` (a rich
    Console) shows one line per step and a training bar, and with `verbose` the whole output
    live. Raises PipelineFailed when a step fails (the exit handler has then marked the MLflow
    runs FAILED)."""
    params = _coerce(invfold_pipeline, params)
    error = None
    experiment = params.get("mlflow_experiment") or _pipeline_default("mlflow_experiment")
    with _local_runner(runs_dir, tracking_uri or params.get("mlflow_tracking_uri"), cache, experiment) as session:
        runs, uri = session.runs, session.tracking_uri
        params = {**params, "mlflow_tracking_uri": uri}
        params.setdefault("checkpoint_root", str(runs / "checkpoints"))
        log_file = runs / "logs" / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        limit = TrainLimit(
            max_steps=int(params.get("max_steps") or 0),
            time_budget_s=float(params.get("time_budget_s") or _pipeline_default("time_budget_s")),
        )
        display = StepConsole(
            log_file, console or Console(file=sys.stdout), verbose, limit, session.timings_file, runs / "pipeline_root"
        )
        with display:
            try:
                invfold_pipeline(**params)
            except Exception as err:  # noqa: BLE001 - the local runner raises RuntimeError naming the failed task
                error = err
                display.fail_running(err)
    wall = time.time() - session.start
    run_folder = session.run_folder()
    timings = read_timings(session.timings_file)
    model_name = params.get("registered_model_name") or _pipeline_default("registered_model_name")
    run_id, version, experiment_id = _mlflow_outcome(uri, experiment, session.start)
    if error is not None:
        raise PipelineFailed(
            f"the pipeline failed: {error} (MLflow run {run_id or 'not recorded'} marked "
            f"FAILED; the step's output above, the whole run's in {log_file}; artifacts in {run_folder})"
        ) from error
    champion = _champion_version(uri, model_name)
    return LocalRun(
        str(runs),
        str(runs / "pipeline_root"),
        run_folder,
        uri,
        experiment,
        run_id,
        model_name,
        version,
        wall,
        timings,
        str(log_file),
        experiment_id,
        champion,
    )


def _champion_version(uri: str, model_name: str) -> str | None:
    """The version the champion alias names after the run (this run's or an earlier one's)."""
    if not reachable(uri)[0]:
        return None
    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        try:
            return str(MlflowClient(uri).get_model_version_by_alias(model_name, "champion").version)
        except MlflowException:  # no such model or alias
            return None
    except Exception as err:  # noqa: BLE001 - only the summary depends on it
        log.warning("could not read the champion back from MLflow: %s", err)
        return None


def _coerce(pipeline, params: dict) -> dict:
    """Ints given for float parameters become floats (KFP's type check rejects 0 for 0.0);
    unknown names are an error naming the parameters there are."""
    inputs = pipeline.component_spec.inputs or {}
    unknown = sorted(set(params) - set(inputs))
    if unknown:
        raise ConfigError(f"unknown pipeline parameter(s) {unknown}; expected some of {sorted(inputs)}")
    return {
        k: float(v) if inputs[k].type == "Float" and isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in params.items()
    }


def _pipeline_default(name: str):

    return {
        "mlflow_experiment": defaults.EXPERIMENT,
        "registered_model_name": defaults.REGISTERED_MODEL,
        "time_budget_s": defaults.TIME_BUDGET_S,
    }[name]


def _remove_task_temp_folders(tmp: Path, since: float) -> None:
    """The local runner leaves each task's `mktemp -d` folder (its component source) behind."""

    for folder in tmp.glob("tmp.*"):
        if folder.is_dir() and folder.stat().st_mtime >= since - 1:
            shutil.rmtree(folder, ignore_errors=True)


def read_timings(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _mlflow_outcome(uri: str, experiment: str, since: float) -> tuple[str | None, str | None, str | None]:
    """The parent run this pipeline run created, the model version it registered, the experiment."""

    if not reachable(uri)[0]:
        return None, None, None
    try:
        from mlflow import MlflowClient

        client = MlflowClient(uri)
        found = client.get_experiment_by_name(experiment)
        if found is None:
            return None, None, None
        runs = client.search_runs(
            [found.experiment_id],
            filter_string=f"attributes.start_time >= {int(since * 1000)}",
            order_by=["attributes.start_time ASC"],
        )
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        if not parents:
            return None, None, found.experiment_id
        parent = parents[0]
        version = parent.data.tags.get("invfold.registered_version")
        registered = version if version and version != "not recorded" else None
        return parent.info.run_id, registered, found.experiment_id
    except Exception as err:  # noqa: BLE001 - only the summary depends on it
        log.warning("could not read the run back from MLflow: %s", err)
        return None, None, None


@dataclass
class LocalDesignRun:
    """What a local design-pipeline run leaves behind."""

    run_folder: str | None
    tracking_uri: str
    experiment: str
    mlflow_run_id: str | None
    wall_s: float
    timings: list[dict] = field(default_factory=list)
    log_file: str | None = None

    def gathered(self) -> dict:
        """The gather step's summary.json (designs, skips, the model it read); {} when absent."""
        found = sorted(Path(self.run_folder).glob("gather-designs*/**/summary.json")) if self.run_folder else []
        return json.loads(found[-1].read_text()) if found else {}


def run_design_local(
    params: dict, runs_dir: str = "runs", tracking_uri: str | None = None, console=None, verbose: bool = True
) -> LocalDesignRun:
    """Run the design pipeline (pipelines/design_pipeline.py) with KFP's local runner: steps as
    subprocesses of this Python, MLflow in the runs folder's SQLite file unless a tracking URI is
    given (the registered model is read from there). As run_local: everything the runner prints
    goes to runs/logs/design-<time>.log, `console` shows one line per step (`verbose`: the whole
    output live). Raises PipelineFailed when a step fails."""
    params = _coerce(design_pipeline, params)
    experiment = params.get("mlflow_experiment") or _pipeline_default("mlflow_experiment")
    error = None
    with _local_runner(runs_dir, tracking_uri or params.get("mlflow_tracking_uri"), False, experiment) as session:
        uri = session.tracking_uri
        log_file = session.runs / "logs" / f"design-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        display = StepConsole(log_file, console or Console(file=sys.stdout), verbose, timings_file=session.timings_file)
        with display:
            try:
                design_pipeline(**{**params, "mlflow_tracking_uri": uri})
            except Exception as err:  # noqa: BLE001 - the local runner raises RuntimeError naming the failed task
                error = err
                display.fail_running(err)
    run_id, _, _ = _mlflow_outcome(uri, experiment, session.start)
    if error is not None:
        raise PipelineFailed(
            f"the design pipeline failed: {error} (MLflow run {run_id or 'not recorded'}; the step's output "
            f"above, the whole run's in {log_file})"
        ) from error
    return LocalDesignRun(
        session.run_folder(),
        uri,
        experiment,
        run_id,
        time.time() - session.start,
        read_timings(session.timings_file),
        str(log_file),
    )
