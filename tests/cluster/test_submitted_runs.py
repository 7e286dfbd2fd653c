"""invfold's two pipelines submitted to the test cluster's Kubeflow Pipelines as a user submits
them: the chart installed as the lane installs it (its MLflow in `kubeflow`), the bundled sample put
into KFP's store, `invfold submit --host ...` of the committed pipeline YAML with the install's
images, and the runs watched to their end through KFP's API. Every step runs in the runtime image on
the node; the train step launches a DDP TrainJob through the real Trainer with the pod's own
credentials (KFP's `pipeline-runner`); MLflow is the chart's.

One training run is shared by the tests below (about four minutes on 2 cores); the design
run starts from the champion it registered. A registered-model name of their own keeps the run
from competing with champions of earlier sessions in the same MLflow."""

import base64
import json
import re
import socket
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime

import pytest
from kfp.client import Client

from invfold.components.launch.trainjob import RUN_LABEL, run_label
from invfold.components.protein.alphabet import ALPHABET
from invfold.components.tracking import experiment_page
from tests.support.browser import run_list_cells
from tests.support.cluster import (
    CHART_PREFIX,
    CHART_STORAGE_ROOT,
    CHART_TRACKING_URI,
    DESIGN_STRUCTURES,
    FINAL_STATES,
    KFP_BUCKET,
    KFP_NAMESPACE,
    STORE_ENDPOINT,
    WORKSPACE_CLAIM,
    kfp_store,
    kfp_ui_address,
    step_pods,
    step_states,
    stored,
    wait_for_run,
    workspace_claim,
)
from tests.support.deploy_tools import REPO, tool
from tests.support.pages import KfpRunPage, browser_page, screenshot

pytestmark = [pytest.mark.cluster, pytest.mark.kfp, pytest.mark.slow]

TRAIN_STEPS = ("fingerprint-op", "prep-op", "train-op", "evaluate-op", "compare-op", "register-op")


@dataclass(frozen=True)
class Submitted:
    run_id: str
    run: dict  # KFP's v2beta1 run, once ended
    seconds: float  # submitted to ended
    model_name: str


def submit(kfp_host: str, cpu_images, *args: str) -> str:
    """`invfold --json submit` as a user runs it with the install's images; the KFP run's id."""
    command = [
        str(REPO / ".venv" / "bin" / "invfold"), "--json", "submit", "--host", kfp_host,
        "--registry", "invfold-test", "--tag", f"{cpu_images.tag}-cpu",
        "--storage-endpoint", STORE_ENDPOINT, "--mlflow-tracking-uri", CHART_TRACKING_URI, *args,
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["run_id"]


def training_options(lane_data: str, strategy: str, max_steps: int, run_name: str, model_name: str = "") -> list[str]:
    """`invfold submit`'s options for a training run on the lane's sample: one process on the
    node, the tiny preset, a registered-model name of its own."""
    return [
        "--data", f"{lane_data}/sample_chain_set.jsonl.gz", "--split-file", f"{lane_data}/sample_chain_set_splits.json",
        "--storage-root", CHART_STORAGE_ROOT,
        "--registered-model-name", model_name or f"invfold-lane-{uuid.uuid4().hex[:8]}",
        "--strategy", strategy, "--nodes", "1", "--procs-per-node", "1", "--gpus-per-node", "0",
        "--preset", "tiny", "--max-steps", str(max_steps), "--threads", "1", "--run-name", run_name,
    ]  # fmt: skip


def watch(kfp_host: str, run_id: str, timeout: float) -> tuple[dict, float]:
    started = time.monotonic()
    run = wait_for_run(Client(host=kfp_host), run_id, timeout=timeout)
    return run, time.monotonic() - started


@pytest.fixture(scope="module")
def training_run(cluster, kfp_host, release, node_images, cpu_images, lane_data) -> Submitted:
    node_images("runtime")
    model_name = f"invfold-lane-{uuid.uuid4().hex[:8]}"
    run_id = submit(kfp_host, cpu_images, *training_options(lane_data, "ddp", 20, "lane-training", model_name))
    run, seconds = watch(kfp_host, run_id, timeout=2400)
    print(f"training run {run_id}: {run['state']} in {seconds:.0f} s")
    return Submitted(run_id, run, seconds, model_name)


@dataclass(frozen=True)
class MlflowSite:
    url: str  # on this machine
    account: dict[str, str]  # MLFLOW_TRACKING_USERNAME / _PASSWORD, empty without auth


@pytest.fixture(scope="module")
def mlflow_site(cluster, release):
    """The chart's MLflow as a user's browser reaches it, through `kubectl port-forward` to its
    Service (MLflow answers 403 to a Host header it was not told of, such as the Service's IP),
    with the steps' account (read-only but for what it made)."""
    account = {}
    if release.auth:
        data = cluster.get("secret", "invfold-mlflow-auth", "-n", KFP_NAMESPACE)["data"]
        account = {key: base64.b64decode(value).decode() for key, value in data.items()}

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    forward = subprocess.Popen(
        [tool("kubectl"), "port-forward", "-n", KFP_NAMESPACE, "service/invfold-mlflow", f"{port}:5000"],
        env=cluster.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = forward.stdout.readline()
        assert line.startswith("Forwarding from"), line
        yield MlflowSite(f"http://127.0.0.1:{port}", account)
    finally:
        forward.terminate()
        forward.wait(timeout=30)


@pytest.fixture(scope="module")
def mlflow_client(mlflow_site):
    """MLflow's client on that site, signed in with that account."""
    from mlflow import MlflowClient

    with pytest.MonkeyPatch.context() as env:
        for key, value in mlflow_site.account.items():
            env.setenv(key, value)
        yield MlflowClient(tracking_uri=mlflow_site.url)


# ML Metadata's own client (the wheel in its image) asked, inside its pod, for a run's artifacts
# and the metadata each step's launcher recorded on them.
ARTIFACTS_OF_RUN = """
import json, sys
from google.protobuf.json_format import MessageToDict
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
store = metadata_store.MetadataStore(metadata_store_pb2.MetadataStoreClientConfig(host="localhost", port=8080))
context = store.get_context_by_type_and_name("system.PipelineRun", sys.argv[1])
found = []
for artifact in store.get_artifacts_by_context(context.id) if context else []:
    values = {k: MessageToDict(v) for k, v in artifact.custom_properties.items()}
    found.append({k: next(iter(v.values()), None) for k, v in values.items()} | {"uri": artifact.uri})
print(json.dumps(found))
"""


def run_artifacts(cluster, run_id: str) -> list[dict]:
    """The artifacts ML Metadata holds for a KFP run: each one's custom properties (the launcher
    records the output's name as `display_name` and its metadata beside it) and URI."""
    out = cluster.kubectl(
        "exec", "-n", KFP_NAMESPACE, "deploy/metadata-grpc-deployment", "--",
        "/opt/mlmd/bin/python", "-c", ARTIFACTS_OF_RUN, run_id,
    )  # fmt: skip
    return json.loads(out.stdout)


def pod_seconds(pods: list[dict]) -> dict[str, float]:
    """Seconds each kind of a run's pods ran (their main container, start to end): KFP's
    drivers, the steps' own containers (launcher and step), and the rest (DAG drivers)."""
    seconds = {"driver": 0.0, "step": 0.0}
    for pod in pods:
        for status in pod["status"].get("containerStatuses", []):
            ended = status["state"].get("terminated")
            if status["name"] != "main" or not ended:
                continue
            ran = (
                datetime.fromisoformat(ended["finishedAt"]) - datetime.fromisoformat(ended["startedAt"])
            ).total_seconds()
            seconds["step" if "-system-container-impl-" in pod["metadata"]["name"] else "driver"] += ran
    return seconds


def run_trainjobs(cluster, run_id: str) -> list[str]:
    """The names of the TrainJobs the train step launched for a KFP run (the launcher labels
    each with a digest of the run's id), those being deleted included: a deleted one is gone at
    once (KubernetesLauncher._delete deletes in the background), not left deleting."""
    found = cluster.get("trainjobs", "-n", KFP_NAMESPACE, "-l", f"{RUN_LABEL}={run_label(run_id)}")
    return [job["metadata"]["name"] for job in found["items"]]


def job_outputs(cluster, job: str) -> dict[str, bytes]:
    """What a TrainJob handed back through the store (model.pt, metrics.jsonl, summary.json, ...)."""
    return stored(cluster, f"{CHART_PREFIX}/runs/{job}/")


def trained_steps(outputs: dict[str, bytes]) -> list[int]:
    """The steps of a TrainJob's train metrics, in order (its metrics.jsonl)."""
    lines = [line for key, body in outputs.items() if key.endswith("/metrics.jsonl") for line in body.splitlines()]
    records = [json.loads(line) for line in lines]
    return [record["step"] for record in records if record["split"] == "train"]


def job_summary(outputs: dict[str, bytes]) -> dict:
    (summary,) = [json.loads(body) for key, body in outputs.items() if key.endswith("/summary.json")]
    return summary


def test_the_submitted_training_run_succeeds_through_every_step(cluster, training_run):
    """Fingerprint, prep, train, evaluate, compare and register, each in its pod; the train
    step's TrainJob (labelled with the run) trained on the node and left its model in the store."""
    tasks = step_states(training_run.run)
    assert training_run.run["state"] == "SUCCEEDED", (training_run.run.get("error"), tasks)
    assert {step: tasks.get(step) for step in TRAIN_STEPS} == dict.fromkeys(TRAIN_STEPS, "SUCCEEDED"), tasks
    (job,) = run_trainjobs(cluster, training_run.run_id)
    outputs = job_outputs(cluster, job)
    assert any(key.endswith("/model.pt") for key in outputs), sorted(outputs)
    ran = pod_seconds(step_pods(cluster, training_run.run_id))
    wall, steps, drivers = training_run.seconds, ran["step"], ran["driver"]
    print(f"submitted to Succeeded {wall:.0f} s: step pods ran {steps:.0f} s, drivers {drivers:.0f} s")


def test_the_train_step_launches_its_trainjob_as_the_pipelines_service_account(cluster, training_run):
    """The step pod holds no kubeconfig: it creates the TrainJob with the credentials KFP gives
    every step (`pipeline-runner`), which the chart's Role lets create TrainJobs."""
    pods = step_pods(cluster, training_run.run_id)
    assert pods, f"no pods labelled with run {training_run.run_id}"
    assert {pod["spec"]["serviceAccountName"] for pod in pods} == {"pipeline-runner"}
    for pod in pods:
        env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        assert "KUBECONFIG" not in env, pod["metadata"]["name"]
    assert run_trainjobs(cluster, training_run.run_id), f"no TrainJob of run {training_run.run_id} in {KFP_NAMESPACE}"


def test_the_run_registers_its_model_as_champion_in_the_charts_mlflow(cluster, kfp_host, training_run, mlflow_client):
    """Read back from the chart's MLflow: the champion alias on the version this run registered,
    and the links both ways (MLflow's run and version carry the KFP run's id; the KFP run's
    register step names the MLflow run)."""
    assert training_run.run["state"] == "SUCCEEDED", step_states(training_run.run)
    client = mlflow_client
    champion = client.get_model_version_by_alias(training_run.model_name, "champion")
    assert champion.tags["kfp.pipeline_run_id"] == training_run.run_id
    assert "beats" in champion.tags["invfold.decision"], champion.tags
    experiment = client.get_experiment_by_name("invfold")
    parents = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`kfp.pipeline_run_id` = '{training_run.run_id}'"
    )
    parent = [r for r in parents if "mlflow.parentRunId" not in r.data.tags]
    assert len(parent) == 1, [r.info.run_id for r in parents]
    assert parent[0].data.tags["invfold.registered_version"] == champion.version
    assert parent[0].info.status == "FINISHED"
    # KFP's MLflow plugin made that parent run (scripts/cluster/cluster.py configures it) and a
    # run per step (nested under a run per DAG: the exit handler, the register condition), which
    # the steps recorded into: every step's run leads up to that one parent.
    plugin = kfp_run(kfp_host, training_run.run_id)["plugins_output"]["mlflow"]
    assert plugin["state"] == "PLUGIN_SUCCEEDED", plugin
    assert plugin["entries"]["root_run_id"]["value"] == parent[0].info.run_id, plugin
    steps = {run.data.tags["invfold.step"]: run for run in parents if "invfold.step" in run.data.tags}
    assert set(steps) >= {"fingerprint", "train", "evaluate", "compare", "register"}, sorted(steps)
    assert {name: top_run(client, run) for name, run in steps.items()} == dict.fromkeys(steps, parent[0].info.run_id)
    assert {run.info.status for run in steps.values()} == {"FINISHED"}
    # The KFP side, as the Kubeflow UI shows it (from ML Metadata): the register step's ONNX
    # model names the registered version and the MLflow run that logged it.
    artifacts = run_artifacts(cluster, training_run.run_id)
    onnx = [a for a in artifacts if a.get("display_name") == "onnx_model"]
    assert len(onnx) == 1, artifacts
    assert onnx[0]["version"] == champion.version and onnx[0]["registered_model"] == training_run.model_name
    assert client.get_run(onnx[0]["mlflow_run_id"]).data.tags["kfp.pipeline_run_id"] == training_run.run_id


def recorded(artifacts: list[dict], task: str, name: str) -> dict:
    """The custom properties ML Metadata holds for one output of one task of the run."""
    found = [a for a in artifacts if a.get("display_name") == name and f"/{task}/" in a["uri"]]
    assert len(found) == 1, (task, name, [(a.get("display_name"), a["uri"]) for a in artifacts])
    return found[0]


def figures(properties: dict) -> dict[str, float]:
    """A Metrics artifact's figures: its properties but its name, its URI and what KFP's UI keeps
    to itself (frontend/src/lib/ReservedArtifactProperties.ts: store_session_info)."""
    return {k: v for k, v in properties.items() if k not in ("display_name", "uri", "store_session_info")}


@pytest.fixture(scope="module")
def kfp_ui(cluster):
    return kfp_ui_address(cluster)


def test_the_kubeflow_ui_shows_the_run_its_steps_metrics_confusion_matrix_report_and_card(
    cluster, kfp_host, kfp_ui, training_run
):
    """KFP's own UI (its frontend and server, built from upstream's source, on the cluster) opened
    on the submitted run in headless Chromium, read from the page as a person reads it: the graph
    with our steps and their states, layer by layer as the user expands them; the train and
    evaluate steps' metrics tables, the confusion matrix, the HTML report inline and the dataset
    card, each against what the steps recorded in ML Metadata; and the register step's summary
    linking the MLflow run KFP's plugin made. A wrong artifact type leaves its viewer out, a
    renamed metric leaves its row out, and either fails here. Screenshots go to runs/screenshots
    (`make screenshots`: docs/screenshots)."""
    assert training_run.run["state"] == "SUCCEEDED", step_states(training_run.run)
    artifacts = run_artifacts(cluster, training_run.run_id)
    with browser_page() as page:
        run = KfpRunPage(page, kfp_ui, training_run.run_id).open()
        assert run.title() == "lane-training"
        assert run.task_states() == {"invfold-run": "succeeded", "finish-tracking": "succeeded"}
        run.enter("exit-handler-1")
        steps = ("fingerprint", "prep", "train", "evaluate", "compare-with-champion", "better-than-champion")
        states = run.task_states()
        assert set(states) == set(steps), states
        # prep is cached when an earlier run of the lane prepared the same data (its cache icon)
        assert all(state == "succeeded" or (step, state) == ("prep", "cached") for step, state in states.items()), (
            states
        )
        run.fit()
        screenshot(page, "kfp-run-graph")

        run.open_artifact("train-op", "metrics")
        train = figures(recorded(artifacts, "train-op", "metrics"))
        assert train and run.scalar_metrics("metrics") == pytest.approx(train)
        run.open_artifact("evaluate-op", "metrics")
        evaluation = figures(recorded(artifacts, "evaluate-op", "metrics"))
        shown = run.scalar_metrics("metrics")
        assert shown == pytest.approx(evaluation)
        # the figures the README and the MLflow columns name
        assert {"test_recovery", "test_perplexity", "test_constant_recovery", "validation_recovery"} <= set(shown)

        run.open_artifact("evaluate-op", "confusion")
        matrix = recorded(artifacts, "evaluate-op", "confusion")["confusionMatrix"]["struct"]  # the launcher's wrap
        labels, counts = run.confusion_matrix("confusion")
        assert labels == [spec["displayName"] for spec in matrix["annotationSpecs"]] == list(ALPHABET)
        assert counts == [[int(n) for n in row["row"]] for row in matrix["rows"]] and sum(map(sum, counts)) > 0
        screenshot(page, "kfp-confusion-matrix")

        run.open_artifact("evaluate-op", "report")
        report = run.html_frame()
        report.get_by_role("heading", name="Evaluation report").wait_for()
        plots = report.locator("img").evaluate_all("imgs => imgs.map(i => i.complete && i.naturalWidth > 0)")
        assert plots and all(plots), plots  # the plots are inline data, drawn in the page
        screenshot(page, "kfp-evaluation-report")

        run.open_artifact("prep-op", "card")
        card = run.markdown()
        card.get_by_role("heading", name="Dataset card").wait_for()
        for heading in ("Datasets", "Records", "Kept chains", "Options"):
            card.get_by_role("heading", name=heading).wait_for()
        assert all(split in card.inner_text() for split in ("train", "validation", "test"))

        run.enter("condition-2")
        assert run.task_states() == {"export-and-register": "succeeded"}
        run.open_artifact("register-op", "summary")
        link = run.markdown().get_by_role("link", name="MLflow run")
        plugin = kfp_run(kfp_host, training_run.run_id)["plugins_output"]["mlflow"]["entries"]
        experiment, root = plugin["experiment_id"]["value"], plugin["root_run_id"]["value"]
        assert link.get_attribute("href").endswith(f"/#/experiments/{experiment}/runs/{root}")
        assert "now its `champion`" not in run.markdown().inner_text()  # Markdown rendered, not shown raw
        assert "champion" in run.markdown().inner_text()


def test_mlflow_shows_the_runs_figures_parameters_children_and_the_champion_version(
    kfp_host, training_run, mlflow_site, mlflow_client
):
    """The chart's MLflow (behind its basic-auth, signed in as a person is) in headless Chromium:
    the experiment's run list shows the run's recovery and perplexity, the run's page its
    hyperparameters and its child runs, the registered version's page its `champion` alias, the
    decision and the KFP run it came from; each read from the page against MLflow's API."""
    client = mlflow_client
    root = kfp_run(kfp_host, training_run.run_id)["plugins_output"]["mlflow"]["entries"]["root_run_id"]["value"]
    parent = client.get_run(root)
    experiment = parent.info.experiment_id
    account = mlflow_site.account
    credentials = None
    if account:
        credentials = {"username": account["MLFLOW_TRACKING_USERNAME"], "password": account["MLFLOW_TRACKING_PASSWORD"]}
    with browser_page(credentials, width=2200) as page:
        page.goto(f"{mlflow_site.url}/{experiment_page(experiment)}")
        page.locator(f'[row-id="{root}"]').first.wait_for(state="attached")  # ag-grid splits a row in parts
        cells = run_list_cells(page.content(), root)
        for name in ("test/recovery", "test/perplexity", "validation/recovery"):
            shown = cells.get(f"metrics.`{name}`", "")
            assert shown and float(shown) == pytest.approx(parent.data.metrics[name], rel=1e-6), (name, cells)
        screenshot(page, "mlflow-experiment")

    children = client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{root}'")
    with browser_page(credentials, height=2600) as page:
        page.goto(f"{mlflow_site.url}/#/experiments/{experiment}/runs/{root}")
        page.get_by_text("Child runs", exact=True).wait_for()
        assert children
        for child in children:  # the overview lists them by name, as links
            page.get_by_role("link", name=child.info.run_name, exact=True).first.wait_for()
        screenshot(page, "mlflow-run")
        search = page.get_by_placeholder("Search parameters")
        for name in ("max_steps", "lr", "preset", "strategy", "data_digest"):
            search.fill(name)  # as a person finds one among the run's parameters
            row = page.locator('tr, [role="row"]', has=page.get_by_text(name, exact=True)).first
            assert parent.data.params[name] in row.inner_text(), (name, row.inner_text())

    version = client.get_model_version_by_alias(training_run.model_name, "champion")
    with browser_page(credentials, height=1400) as page:
        page.goto(f"{mlflow_site.url}/#/models/{training_run.model_name}/versions/{version.version}")
        page.get_by_text(re.compile(r"^@\s*champion$")).first.wait_for()  # the alias's chip ("@", a no-break space)
        text = page.inner_text("body")
        assert version.tags["invfold.decision"] in text and training_run.run_id in text, text[:3000]
        screenshot(page, "mlflow-model-version")


def test_the_design_pipeline_designs_from_that_champion(
    cluster, kfp_host, cpu_images, lane_data, training_run, mlflow_client
):
    """`invfold submit --pipeline design` with the champion the training run registered: every
    structure designed, the designs in KFP's store, the model named by version."""
    assert training_run.run["state"] == "SUCCEEDED", step_states(training_run.run)
    run_id = submit(
        kfp_host, cpu_images, "--pipeline", "design", "--data", f"{lane_data}/design_set.jsonl",
        "--model", f"models:/{training_run.model_name}@champion",
        "--shards", "2", "--num-sequences", "2", "--score-orders", "1", "--threads", "1", "--run-name", "lane-design",
    )  # fmt: skip
    run, seconds = watch(kfp_host, run_id, timeout=1200)
    print(f"design run {run_id}: {run['state']} in {seconds:.0f} s")
    tasks = step_states(run)
    assert run["state"] == "SUCCEEDED", (run.get("error"), tasks)
    objects = stored(cluster, f"v2/artifacts/invfold-design/{run_id}/")
    designs = [body for key, body in objects.items() if "/gather-designs-op/" in key and key.endswith("/designs.jsonl")]
    assert len(designs) == 1, sorted(objects)
    records = [json.loads(line) for line in designs[0].decode().splitlines()]
    assert len({r["name"] for r in records}) == DESIGN_STRUCTURES and len(records) == 2 * DESIGN_STRUCTURES, records[:2]
    version = mlflow_client.get_model_version_by_alias(training_run.model_name, "champion").version
    assert {r["model"] for r in records} == {f"models:/{training_run.model_name}@champion (version {version})"}


def test_a_bad_data_uri_fails_the_run_at_its_first_step_with_the_reason(cluster, kfp_host, cpu_images, release):
    """A data URI with nothing behind it: the run ends Failed at fingerprint, nothing after it
    runs, and the run KFP keeps says why in one line (the step's error, which the runtime image
    leaves as the container's termination message and Argo copies into the step's status)."""
    missing = f"{CHART_STORAGE_ROOT}/lane-data/{uuid.uuid4().hex[:8]}/absent.jsonl.gz"
    run_id = submit(kfp_host, cpu_images, "--data", missing, "--run-name", "lane-bad-data")
    run, _ = watch(kfp_host, run_id, timeout=900)
    tasks = step_states(run)
    assert run["state"] == "FAILED", (run["state"], tasks)
    assert tasks.get("fingerprint-op") == "FAILED" and tasks.get("prep-op") is None, tasks  # prep never ran
    reasons = failed_step_messages(kfp_host, run_id)
    assert any("InputError" in m and "absent.jsonl.gz" in m for m in reasons.values()), reasons
    assert all("Traceback" not in m and "\n" not in m for m in reasons.values()), reasons


def top_run(client, run) -> str:
    """The id of the run at the top of `run`'s `mlflow.parentRunId` chain."""
    while parent := run.data.tags.get("mlflow.parentRunId"):
        run = client.get_run(parent)
    return run.info.run_id


def kfp_run(kfp_host: str, run_id: str) -> dict:
    """A KFP run as its v2beta1 API answers (the SDK's model drops `plugins_output`)."""
    with urllib.request.urlopen(f"{kfp_host}/apis/v2beta1/runs/{run_id}", timeout=30) as response:
        return json.load(response)


def workflow_nodes(kfp_host: str, run_id: str) -> list[dict]:
    """The Argo nodes of a KFP run, from the workflow KFP keeps with the run (its v1beta1 run API;
    the v2beta1 run has no field for a step's message or its attempts)."""
    with urllib.request.urlopen(f"{kfp_host}/apis/v1beta1/runs/{run_id}", timeout=30) as response:
        workflow = json.loads(json.load(response)["pipeline_runtime"]["workflow_manifest"])
    return list(workflow["status"]["nodes"].values())


def failed_step_messages(kfp_host: str, run_id: str) -> dict[str, str]:
    """The status message of each failed pod of a KFP run."""
    nodes = workflow_nodes(kfp_host, run_id)
    return {n["id"]: n.get("message", "") for n in nodes if n["type"] == "Pod" and n["phase"] in ("Failed", "Error")}


# The train step's own process (KFP's executor, under its launcher) killed as the kernel's OOM
# killer would: SIGKILL, no cleanup, so the TrainJob it launched keeps running.
KILL_STEP = """
import os, signal
def command(pid):
    return open(f"/proc/{pid}/cmdline", "rb").read()
mine = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid() and b"executor_main" in command(p)]
for pid in mine:
    os.kill(pid, signal.SIGKILL)
print(len(mine))
"""


def wait_for_first_checkpoint(cluster, kfp_host: str, run_id: str) -> None:
    """Until the run's train step has written its first complete checkpoint (step 100) to the store."""
    client, s3 = Client(host=kfp_host), kfp_store(cluster)
    checkpoint = f"{CHART_PREFIX}/checkpoints/{run_id}/step-00000100/COMPLETE"

    def checkpointed() -> bool:
        if s3.list_objects_v2(Bucket=KFP_BUCKET, Prefix=checkpoint).get("KeyCount"):
            return True
        state = client.get_run(run_id).state
        assert state not in FINAL_STATES, f"the run ended {state} before a checkpoint"
        return False

    cluster.wait_for("the run's first checkpoint", checkpointed, 1500, interval=1.0)


def running_launcher(cluster, run_id: str) -> str:
    """The train step's pod of a run while it runs (it carries the launcher role)."""
    (pod,) = [
        pod["metadata"]["name"]
        for pod in step_pods(cluster, run_id)
        if pod["metadata"]["labels"].get("invfold.dev/role") == "launcher" and pod["status"]["phase"] == "Running"
    ]
    return pod


# TrainConfig checkpoints every 100 steps: the pod is deleted after the first, and the job it
# launched must not finish before the retried step replaces it.
RETRIED_STEPS = 400


def test_a_deleted_train_step_pod_is_retried_and_its_horovod_job_resumes_from_the_checkpoints(
    cluster, kfp_host, cpu_images, release, node_images, lane_data
):
    """The train step's pod deleted once its Horovod TrainJob has checkpointed (a node drained or
    lost): Argo marks the step Error and retries it (the pipeline's `set_retry`, under the
    `retryPolicy: OnError` KFP's manifests give every template), the deleted pod's TrainJob goes
    with it (its owner), and the new attempt's job resumes from the run's checkpoints in the store
    instead of step 0; the run Succeeds. Also the lane's submitted run of the Horovod strategy
    (the shared run above is DDP)."""
    node_images("runtime", "horovod")
    run_id = submit(kfp_host, cpu_images, *training_options(lane_data, "horovod", RETRIED_STEPS, "lane-retried-train"))
    wait_for_first_checkpoint(cluster, kfp_host, run_id)
    (first_job,) = run_trainjobs(cluster, run_id)
    cluster.kubectl("delete", "pod", "-n", KFP_NAMESPACE, running_launcher(cluster, run_id), "--wait=false")

    run, seconds = watch(kfp_host, run_id, timeout=1800)
    print(f"retried training run {run_id}: {run['state']} in {seconds:.0f} s")
    assert run["state"] == "SUCCEEDED", (run.get("error"), step_states(run))
    attempts = [
        (node["phase"], node.get("message", ""))
        for node in workflow_nodes(kfp_host, run_id)
        if node["type"] == "Pod" and node["displayName"].startswith("executor(") and "train-op" in node["name"]
    ]
    assert sorted(attempts) == [("Error", "pod deleted"), ("Succeeded", "")], attempts
    # The first went with its owner, the deleted pod (the step's own cleanup, or the garbage collector).
    (second_job,) = run_trainjobs(cluster, run_id)
    assert second_job != first_job
    outputs = job_outputs(cluster, second_job)
    trained = trained_steps(outputs)
    assert trained and trained[0] > 100, trained[:3]  # resumed from a checkpoint, not from step 0
    summary = job_summary(outputs)
    assert (summary["strategy"], summary["step"], summary["stop_reason"]) == ("horovod", RETRIED_STEPS, "finished")


# DDP on one process trains the tiny preset at about 20 steps/s here: the job left running must
# still be training when the user's retry starts (about a minute after the kill).
USER_RETRY_STEPS = 3000


def test_a_users_retry_of_a_run_whose_train_step_was_killed_resumes_and_succeeds(
    cluster, kfp_host, cpu_images, release, node_images, lane_data, mlflow_client
):
    """The train step's process killed once its DDP job has checkpointed: the run ends Failed
    (Argo retries only errors, not a step that exited non-zero: docs/deploy.md), and its TrainJob
    is left running. The user's Retry (KFP's `runs/{id}:retry`, the UI's button) keeps the run's
    id, so the new attempt deletes the job left behind, resumes from the run's checkpoints, and
    the run Succeeds; KFP's MLflow plugin reopens the run's MLflow parent and closes it FINISHED."""
    node_images("runtime")
    run_id = submit(kfp_host, cpu_images, *training_options(lane_data, "ddp", USER_RETRY_STEPS, "lane-user-retry"))
    wait_for_first_checkpoint(cluster, kfp_host, run_id)
    (left,) = run_trainjobs(cluster, run_id)
    pod = running_launcher(cluster, run_id)
    killed = cluster.kubectl("exec", "-n", KFP_NAMESPACE, pod, "-c", "main", "--", "python3", "-c", KILL_STEP)
    assert int(killed.stdout) >= 1, killed.stdout
    failed, _ = watch(kfp_host, run_id, timeout=600)
    assert failed["state"] == "FAILED" and step_states(failed).get("train-op") == "FAILED", step_states(failed)
    assert left in run_trainjobs(cluster, run_id)  # nothing ran the step's cleanup

    request = urllib.request.Request(f"{kfp_host}/apis/v2beta1/runs/{run_id}:retry", method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
    client = Client(host=kfp_host)
    cluster.wait_for("the retried run to start", lambda: client.get_run(run_id).state != "FAILED", 300)
    run, seconds = watch(kfp_host, run_id, timeout=1800)
    print(f"user-retried training run {run_id}: {run['state']} in {seconds:.0f} s")
    assert run["state"] == "SUCCEEDED", (run.get("error"), step_states(run))
    (job,) = run_trainjobs(cluster, run_id)
    assert job != left  # the one left behind was deleted by the new attempt
    outputs = job_outputs(cluster, job)
    trained = trained_steps(outputs)
    assert trained and trained[0] > 100, trained[:3]  # resumed from a checkpoint, not from step 0
    summary = job_summary(outputs)
    assert (summary["strategy"], summary["step"], summary["stop_reason"]) == ("ddp", USER_RETRY_STEPS, "finished")
    assert not job_outputs(cluster, left), "the job left behind ran to its end: it was not deleted"
    plugin = kfp_run(kfp_host, run_id)["plugins_output"]["mlflow"]
    parent = mlflow_client.get_run(plugin["entries"]["root_run_id"]["value"])
    assert parent.data.tags["kfp.pipeline_run_id"] == run_id and parent.info.status == "FINISHED", parent.info


def test_a_submitted_deepspeed_run_checkpoints_to_the_workspace_claim(
    cluster, kfp_host, cpu_images, release, node_images, lane_data, tmp_path
):
    """DeepSpeed's checkpoints are local files: submitted with `--workspace-pvc` naming the
    chart's ReadWriteMany claim, its TrainJob writes them there (under the run's id), trains to the
    end and hands its model back through the store; the run Succeeds."""
    node_images("runtime", "deepspeed")
    folder = tmp_path / "workspace"
    folder.mkdir()
    with workspace_claim(cluster, KFP_NAMESPACE, folder):
        options = training_options(lane_data, "deepspeed", 20, "lane-deepspeed")
        run_id = submit(kfp_host, cpu_images, *options, "--workspace-pvc", WORKSPACE_CLAIM)
        run, seconds = watch(kfp_host, run_id, timeout=1800)
    print(f"deepspeed training run {run_id}: {run['state']} in {seconds:.0f} s")
    tasks = step_states(run)
    assert run["state"] == "SUCCEEDED", (run.get("error"), tasks)
    assert {step: tasks.get(step) for step in TRAIN_STEPS} == dict.fromkeys(TRAIN_STEPS, "SUCCEEDED"), tasks
    (job,) = run_trainjobs(cluster, run_id)
    summary = job_summary(job_outputs(cluster, job))
    assert (summary["strategy"], summary["step"], summary["stop_reason"]) == ("deepspeed", 20, "finished")
    assert summary["checkpoint"].startswith(f"/workspace/checkpoints/{run_id}/"), summary["checkpoint"]
    written = sorted(path.name for path in (folder / "checkpoints" / run_id).iterdir())
    assert written and (folder / "checkpoints" / run_id / written[-1] / "COMPLETE").exists(), written
