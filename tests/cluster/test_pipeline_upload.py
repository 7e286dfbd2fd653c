"""The chart's upload hook against KFP 2.17's real API server on the test cluster, as docs/deploy.md's
walk-through S installs it: `helm upgrade --install` with `pipelineUpload.enabled=true`, the
install's images and a pull Secret (`images.pullSecrets`). The hook runs in the runtime image on the
node with the pipeline's service account and uploads both pipelines; what the server then holds is
read back through `kfp.Client`, as the Kubeflow UI shows it, and a run of the uploaded training
pipeline (as a user starts it from the UI: the pipeline's version and its parameters) runs every
step on the install's image with its pull Secret. (The multi-user rules of
tests/deploy/test_pipeline_upload.py need KFP's multi-user mode and a profile controller, which
this cluster does not run.)"""

import base64
import json
import uuid
from datetime import UTC, datetime

import pytest
from kfp.client import Client

from tests.support.cluster import (
    CHART_NAMESPACE,
    CHART_STORAGE_ROOT,
    CHART_TRACKING_URI,
    RELEASE,
    STORE_ENDPOINT,
    step_pods,
    step_states,
    wait_for_run,
)
from tests.support.deploy_tools import CHART

pytestmark = [pytest.mark.cluster, pytest.mark.kfp, pytest.mark.slow]

PULL_SECRET = "invfold-registry"
PIPELINES = ("invfold", "invfold-design")


def install_image(images) -> str:
    """The runtime image the lane's install names (the hook's, and every uploaded step's)."""
    return f"invfold-test/invfold-runtime:{images.tag}-cpu"


@pytest.fixture(scope="module")
def uploaded(cluster, kfp_host, release, cpu_images, node_images):
    """The release upgraded with the upload hook on and a pull Secret; its revision and the time
    before. The release goes back to the lane's values after the module."""
    node_images("runtime")  # the hook's own image
    registry = {"auths": {"registry.invalid": {"auth": base64.b64encode(f"lane:{uuid.uuid4().hex}".encode()).decode()}}}
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": PULL_SECRET, "namespace": CHART_NAMESPACE},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": json.dumps(registry)},
        }
    )
    client = Client(host=kfp_host)
    for name in PIPELINES:  # an earlier install's: the hook makes them anew
        if pipeline_id := client.get_pipeline_id(name):
            client._pipelines_api.pipeline_service_delete_pipeline(pipeline_id, cascade=True)
    before = datetime.now(UTC)
    values = ("--set", "pipelineUpload.enabled=true", "--set", f"images.pullSecrets[0].name={PULL_SECRET}")
    cluster.helm("upgrade", RELEASE, str(CHART), *release.args, *values)
    revision = json.loads(cluster.helm("status", RELEASE, "-n", CHART_NAMESPACE, "-o", "json").stdout)["version"]
    yield revision, before
    cluster.helm("upgrade", RELEASE, str(CHART), *release.args)
    cluster.kubectl("delete", "secret", PULL_SECRET, "-n", CHART_NAMESPACE, "--ignore-not-found")


def uploaded_version(client: Client, name: str, revision: int):
    """The one version of pipeline `name`, which the hook made for release `revision`
    (`<appVersion>-r<revision>-<time>`): the fixture removed the pipeline first, so the hook made
    the pipeline too, and nothing else (no version named after the pipeline beside it)."""
    pipeline_id = client.get_pipeline_id(name)
    assert pipeline_id, f"no pipeline {name!r} on the server"
    listed = client.list_pipeline_versions(pipeline_id, page_size=100).pipeline_versions or []
    assert [f"-r{revision}-" in v.display_name for v in listed] == [True], [v.display_name for v in listed]
    return listed[0]


def test_the_install_hook_uploads_both_pipelines_on_the_installs_image_and_pull_secret(
    cluster, kfp_host, cpu_images, uploaded
):
    revision, before = uploaded
    client = Client(host=kfp_host)
    image = install_image(cpu_images)
    for name in PIPELINES:
        version = uploaded_version(client, name, revision)
        assert version.created_at >= before, (name, version.created_at, before)
        spec = version.pipeline_spec.get("pipeline_spec", version.pipeline_spec)
        images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
        assert images == {image}, (name, images)
        platform = version.pipeline_spec.get("platform_spec", {}).get("platforms", {}).get("kubernetes", {})
        configs = platform.get("deploymentSpec", {}).get("executors", {})
        assert set(configs) == set(spec["deploymentSpec"]["executors"]), (name, sorted(configs))
        secrets = {e: [s["secretName"] for s in c.get("imagePullSecret", [])] for e, c in configs.items()}
        assert all(PULL_SECRET in names for names in secrets.values()), (name, secrets)
        defaults = {k: v.get("defaultValue") for k, v in spec["root"]["inputDefinitions"]["parameters"].items()}
        assert defaults["storage_endpoint"] == STORE_ENDPOINT, (name, defaults)
        assert defaults["mlflow_tracking_uri"] == CHART_TRACKING_URI, (name, defaults)
        if name == "invfold":
            assert defaults["storage_root"] == CHART_STORAGE_ROOT, defaults


def test_a_run_of_the_uploaded_training_pipeline_runs_every_step_on_the_installs_image_and_pull_secret(
    cluster, kfp_host, cpu_images, uploaded, lane_data
):
    """Started from the uploaded version with only the data and the run's size (the install's
    defaults give the store, its root and MLflow), as a user starts it in the UI."""
    revision, _ = uploaded
    client = Client(host=kfp_host)
    version = uploaded_version(client, "invfold", revision)
    params = {
        "data_uri": f"{lane_data}/sample_chain_set.jsonl.gz",
        "split_file": f"{lane_data}/sample_chain_set_splits.json",
        "registered_model_name": f"invfold-lane-{uuid.uuid4().hex[:8]}",
        "preset": "tiny",
        "max_steps": 20,
        "procs_per_node": 1,
        "threads": 1,
    }
    experiment = client.create_experiment("invfold-lane")
    run_id = client.run_pipeline(
        experiment.experiment_id, "lane-uploaded-training", params=params,
        pipeline_id=version.pipeline_id, version_id=version.pipeline_version_id,
    ).run_id  # fmt: skip
    run = wait_for_run(client, run_id, timeout=2400)
    assert run["state"] == "SUCCEEDED", (run.get("error"), step_states(run))
    image = install_image(cpu_images)
    steps = [p for p in step_pods(cluster, run_id) if "-system-container-impl-" in p["metadata"]["name"]]
    assert len(steps) >= 6, [p["metadata"]["name"] for p in steps]
    for pod in steps:
        main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
        assert main["image"] == image, (pod["metadata"]["name"], main["image"])
        assert {"name": PULL_SECRET} in pod["spec"].get("imagePullSecrets", []), pod["metadata"]["name"]
