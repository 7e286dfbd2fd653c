"""The chart's upload hook against KFP 2.17's real API server on the test cluster, as docs/deploy.md's
walk-through S installs it: `helm upgrade --install` with `pipelineUpload.enabled=true` and the
install's images. The hook runs in the runtime image on the node with the pipeline's service account
and uploads both pipelines; what the server then holds is read back through `kfp.Client`, as the
Kubeflow UI shows it. (The multi-user rules of tests/deploy/test_pipeline_upload.py need KFP's
multi-user mode and a profile controller, which this cluster does not run.)"""

import json
from datetime import UTC, datetime

import pytest
from kfp.client import Client

from tests.support.cluster import (
    CHART_NAMESPACE,
    CHART_STORAGE_ROOT,
    CHART_TRACKING_URI,
    RELEASE,
    STORE_ENDPOINT,
    install_args,
)
from tests.support.deploy_tools import CHART

pytestmark = [pytest.mark.cluster, pytest.mark.kfp, pytest.mark.slow]


def uploaded_version(client: Client, name: str, revision: int):
    """The version of pipeline `name` the hook uploaded for release `revision` (`<appVersion>-r<revision>-<time>`).
    On a first install KFP's upload also makes a version named after the pipeline, in the same second."""
    pipeline_id = client.get_pipeline_id(name)
    assert pipeline_id, f"no pipeline {name!r} on the server"
    listed = client.list_pipeline_versions(pipeline_id, page_size=100).pipeline_versions or []
    ours = [v for v in listed if f"-r{revision}-" in v.display_name]
    assert len(ours) == 1, [v.display_name for v in listed]
    return ours[0]


def test_the_install_hook_uploads_both_pipelines_on_the_installs_image(
    cluster, kfp_host, release, cpu_images, node_images
):
    node_images("runtime")  # the hook's own image
    before = datetime.now(UTC)
    cluster.helm("upgrade", RELEASE, str(CHART), *install_args(cpu_images), "--set", "pipelineUpload.enabled=true")
    revision = json.loads(cluster.helm("status", RELEASE, "-n", CHART_NAMESPACE, "-o", "json").stdout)["version"]
    client = Client(host=kfp_host)
    image = f"invfold-test/invfold-runtime:{cpu_images.tag}-cpu"
    for name in ("invfold", "invfold-design"):
        version = uploaded_version(client, name, revision)
        assert version.created_at >= before, (name, version.created_at, before)
        spec = version.pipeline_spec.get("pipeline_spec", version.pipeline_spec)
        images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
        assert images == {image}, (name, images)
        defaults = {k: v.get("defaultValue") for k, v in spec["root"]["inputDefinitions"]["parameters"].items()}
        assert defaults["storage_endpoint"] == STORE_ENDPOINT, (name, defaults)
        assert defaults["mlflow_tracking_uri"] == CHART_TRACKING_URI, (name, defaults)
        if name == "invfold":
            assert defaults["storage_root"] == CHART_STORAGE_ROOT, defaults
