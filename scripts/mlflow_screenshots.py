"""Screenshots of what a person sees in the MLflow UI after `invfold run`: the experiment page,
the pipeline's run, the train step's charts, the registered model and its version, taken with
headless Chromium (Debian package `chromium`) against `mlflow ui` on the run's store.

    .venv/bin/python scripts/mlflow_screenshots.py --runs-dir runs --out runs/screenshots
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from invfold.components.tracking import MODEL_TRAINING_VIEW as ML_VIEW
from invfold.components.tracking import experiment_page


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(tracking_uri: str, log_path: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow ui` on a free loopback port, as the printed command starts it; waits for /health."""
    port = free_port()
    log = open(log_path, "w")  # noqa: SIM115 - the server's lifetime
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri]
        + ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mlflow ui exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"mlflow ui not healthy after 120 s: {log_path.read_text()[-2000:]}")


def pages(tracking_uri: str, experiment: str, model_name: str) -> dict[str, str]:
    """name -> UI route (hash router) of the experiment, its newest pipeline run, that run's train
    step's charts, the model and its newest version."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise SystemExit(f"no experiment {experiment!r} in {tracking_uri}: run `invfold run` first")
    routes = {"experiment": experiment_page(found.experiment_id)}
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time DESC"], max_results=50)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    if parents:
        parent = parents[0].info.run_id
        routes["run"] = f"#/experiments/{found.experiment_id}/runs/{parent}?{ML_VIEW}"
        train = [
            r
            for r in runs
            if r.data.tags.get("mlflow.parentRunId") == parent and r.data.tags.get("invfold.step") == "train"
        ]
        if train:
            routes["training_charts"] = (
                f"#/experiments/{found.experiment_id}/runs/{train[0].info.run_id}/model-metrics?{ML_VIEW}"
            )
    versions = client.search_model_versions(f"name = '{model_name}'", order_by=["version_number DESC"])
    if versions:
        routes["model"] = f"#/models/{model_name}"
        routes["model_version"] = f"#/models/{model_name}/versions/{versions[0].version}"
    return routes


# pages whose content runs below one screen (parameters, metrics, chart sections) are taken taller;
# the run list wider, so its metric columns show beside MLflow's assistant panel
HEIGHTS = {"run": 2600, "training_charts": 3000, "model_version": 1400}
WIDTHS = {"experiment": 2200}


def screenshot(chromium: str, url: str, out: Path, height: int = 1000, width: int = 1600) -> None:
    """The page after its requests settled: charts load their histories after the page itself,
    so virtual time runs long."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
            + [f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=90000"]
            + ["--run-all-compositor-stages-before-draw", f"--screenshot={out}", url],
            check=True,
            capture_output=True,
            timeout=180,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", default="runs", help="the `invfold run` folder (its mlflow.db)")
    parser.add_argument("--tracking-uri", help="default: sqlite:///RUNS_DIR/mlflow.db")
    parser.add_argument("--experiment", default="invfold")
    parser.add_argument("--model-name", default="invfold-inverse-folding")
    parser.add_argument("--out", default=None, help="default: RUNS_DIR/screenshots")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("headless Chromium not found: apt-get install chromium")
    uri = args.tracking_uri or f"sqlite:///{Path(args.runs_dir).absolute() / 'mlflow.db'}"
    out = Path(args.out or Path(args.runs_dir) / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    routes = pages(uri, args.experiment, args.model_name)
    proc, base = serve(uri, out / "mlflow-ui.log")
    try:
        for name, route in routes.items():
            path = out / f"{name}.png"
            screenshot(chromium, f"{base}/{route}", path, HEIGHTS.get(name, 1000), WIDTHS.get(name, 1600))
            print(f"{path}: {base}/{route}")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
