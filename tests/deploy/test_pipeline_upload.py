"""The chart's pipeline-upload hook, run as rendered (its command and environment, only the API host
and the token file swapped for local ones) against the KFP API stand-in (tests/support/kfp_api.py),
which follows kubeflow/pipelines 2.17.0's rules for pipelines:

- backend/src/apiserver/server/pipeline_upload_server.go: uploads into a namespace are authorized
  for the caller there; a version name is allowed once per pipeline (409 AlreadyExists after).
- backend/src/apiserver/validation/namespace.go: a multi-user server may require a namespace.
- backend/src/apiserver/server/pipeline_server.go `canAccessPipeline`: writes to a shared pipeline
  are authorized against KFP's own namespace, so a profile's default-editor cannot manage one.
- backend/src/apiserver/resource/resource_manager.go `ReplaceNamespace`: single-user ignores it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
import yaml

from invfold.pipelines.upload import version_name
from tests.support.deploy_tools import CHART, documents, helm_template, run, tool
from tests.support.kfp_api import PREFIX, KfpApi

PROFILE = "team-a"
TOKEN = f"sa-token-{secrets.token_hex(8)}"
# The hook refuses to upload steps on the placeholder registry: every install here names one.
REGISTRY = ("--set", "images.registry=registry.acme.example/invfold")


def hook_job(*args: str, namespace: str = PROFILE) -> dict:
    objects = documents(helm_template(*REGISTRY, *args, namespace=namespace))
    return next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("-pipeline-upload"))


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return documents(helm_template(*REGISTRY, namespace=PROFILE))


@pytest.fixture(scope="module")
def job(objects) -> dict:
    return next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("-pipeline-upload"))


@pytest.fixture
def package(tmp_path, objects):
    """The ConfigMap's pipeline at a local path (the hook reads it from the mounted ConfigMap)."""
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-pipelines"))
    path = tmp_path / "invfold_pipeline.yaml"
    path.write_text(config["data"]["invfold_pipeline.yaml"])
    return path


def run_hook(job: dict, api: KfpApi, package, tmp_path, revision: int | None = None) -> subprocess.CompletedProcess:
    """The hook's container command with its rendered env; host, token file and package path local."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    env |= {"KFP_HOST": api.url, "KF_PIPELINES_SA_TOKEN_PATH": str(token_file), "PIPELINE_PACKAGE": str(package)}
    if revision is not None:  # what `helm template` cannot render: a later release revision
        key = next(k for k in env if k.startswith("PIPELINE_VERSION"))
        env[key] = env[key].replace("-r1", f"-r{revision}")
    env["HOME"] = str(tmp_path)  # no ~/.config/kfp/context.json
    env["PATH"] = os.environ["PATH"]
    command = container["command"]
    assert command[0] == "python"
    argv = [sys.executable, *command[1:], *container.get("args", [])]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def uploads(api: KfpApi) -> list:
    return [r for r in api.requests if r.path.startswith(f"{PREFIX}/pipelines/upload")]


def test_uploads_into_the_release_namespace_with_the_service_account_token(job, package, tmp_path):
    with KfpApi(multi_user=True, token=TOKEN, require_namespace=True, writable_namespaces={PROFILE}) as api:
        proc = run_hook(job, api, package, tmp_path)
        assert proc.returncode == 0, proc.stderr
        (pipeline,) = api.pipelines.values()
        assert (pipeline["name"], pipeline["namespace"]) == ("invfold", PROFILE)
        (create,) = api.requests_to("POST", f"{PREFIX}/pipelines")
        assert create.body["namespace"] == PROFILE and create.status == 200
        # the pipeline holds the hook's version alone (an upload of the pipeline would add one named after it)
        (version,) = api.versions_of(pipeline["pipeline_id"])
        assert version.startswith("0.1.0-r1-"), version
        assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in api.requests)
        # the profile's own account can manage what the hook made (a shared pipeline: 403, below)
        request = urllib.request.Request(f"{api.url}{PREFIX}/pipelines/{pipeline['pipeline_id']}", method="DELETE")
        request.add_header("Authorization", f"Bearer {TOKEN}")
        assert urllib.request.urlopen(request).status == 200
    assert PROFILE in proc.stdout and "invfold" in proc.stdout


def test_a_shared_pipeline_is_what_a_profile_account_cannot_manage():
    """Why the namespace matters even where KFP accepts a shared upload: the stand-in's rule."""
    with KfpApi(multi_user=True, writable_namespaces={PROFILE}) as api:
        shared = api.add_pipeline("invfold", namespace="")
        request = urllib.request.Request(f"{api.url}{PREFIX}/pipelines/{shared['pipeline_id']}", method="DELETE")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request)
        assert err.value.code == 403


def test_upgrade_adds_a_version_to_the_namespaced_pipeline(job, package, tmp_path):
    with KfpApi(multi_user=True, token=TOKEN, require_namespace=True, writable_namespaces={PROFILE}) as api:
        assert run_hook(job, api, package, tmp_path).returncode == 0
        proc = run_hook(job, api, package, tmp_path, revision=2)
        assert proc.returncode == 0, proc.stderr
        (pipeline,) = api.pipelines.values()  # found in the namespace, not uploaded twice
        versions = api.versions_of(pipeline["pipeline_id"])
        assert [v for v in versions if v.startswith("0.1.0-r1-")] and [v for v in versions if v.startswith("0.1.0-r2-")]


def test_reinstall_after_uninstall_gets_a_new_version_name(job, package, tmp_path):
    """KFP keeps the pipeline after `helm uninstall`; the reinstall is revision 1 again. The name
    the chart used to give (`<appVersion>-r<revision>`) is answered 409 then."""
    with KfpApi(multi_user=True, token=TOKEN, writable_namespaces={PROFILE}) as api:
        earlier = api.add_pipeline("invfold", namespace=PROFILE, versions=("invfold", "0.1.0-r1"))
        proc = run_hook(job, api, package, tmp_path)
        assert proc.returncode == 0, proc.stderr
        versions = api.versions_of(earlier["pipeline_id"])
        assert len(versions) == 3 and len(set(versions)) == 3
        assert all(r.status == 200 for r in uploads(api))
        # the stand-in's duplicate rule, which the old name ran into
        request = urllib.request.Request(
            f"{api.url}{PREFIX}/pipelines/upload_version?name=0.1.0-r1&pipelineid={earlier['pipeline_id']}",
            data=b"--x\r\nContent-Disposition: form-data; name=uploadfile; filename=p.yaml\r\n\r\na: 1\r\n--x--\r\n",
            headers={"Content-Type": "multipart/form-data; boundary=x", "Authorization": f"Bearer {TOKEN}"},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request)
        assert err.value.code == 409


def test_version_names_differ_for_the_same_revision():
    first = version_name("0.1.0-r1", datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC))
    again = version_name("0.1.0-r1", datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC))
    assert first != again and first.startswith("0.1.0-r1-")


def test_single_user_kfp_ignores_the_namespace(job, package, tmp_path):
    with KfpApi(multi_user=False) as api:
        assert run_hook(job, api, package, tmp_path).returncode == 0
        (pipeline,) = api.pipelines.values()
        assert pipeline["namespace"] == ""


def test_a_refused_upload_fails_the_hook_and_says_where(job, package, tmp_path):
    with KfpApi(multi_user=True, token=TOKEN, writable_namespaces={"someone-else"}) as api:
        proc = run_hook(job, api, package, tmp_path)
    assert proc.returncode == 1
    assert "HTTP 403" in proc.stderr and PROFILE in proc.stderr and api.url in proc.stderr
    assert TOKEN not in proc.stderr + proc.stdout


def test_the_hook_outlasts_a_cold_image_pull(job):
    """helm waits for the hook up to its --timeout (5m by default), the Job up to its deadline:
    a first pull of the CUDA runtime image plus retries needs more than 5 minutes."""
    assert job["spec"]["activeDeadlineSeconds"] >= 1800
    assert hook_job("--set", "pipelineUpload.activeDeadlineSeconds=3600")["spec"]["activeDeadlineSeconds"] == 3600
    assert job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def parameter_defaults(spec_text: str) -> dict[str, object]:
    parameters = next(yaml.safe_load_all(spec_text))["root"]["inputDefinitions"]["parameters"]
    return {name: p.get("defaultValue") for name, p in parameters.items()}


def test_the_install_sets_the_pipelines_storage_and_tracking_defaults(package, tmp_path):
    """storage.endpoint / storage.root (chart values) become the uploaded pipeline's defaults, with
    the chart's MLflow service and workspace claim: a run from the KFP UI needs none of them typed."""
    job = hook_job(
        "--set",
        "storage.endpoint=http://seaweedfs.kubeflow:8333,storage.root=s3://mlpipeline/private/team-a/invfold,workspace.create=true",
    )
    with KfpApi(multi_user=True, token=TOKEN, writable_namespaces={PROFILE}) as api:
        proc = run_hook(job, api, package, tmp_path)
        assert proc.returncode == 0, proc.stderr
        specs = [v["pipeline_spec"] for v in api.versions.values()]
    assert specs
    for spec in specs:
        defaults = parameter_defaults(spec)
        assert defaults["storage_endpoint"] == "http://seaweedfs.kubeflow:8333"
        assert defaults["storage_root"] == "s3://mlpipeline/private/team-a/invfold"
        assert defaults["mlflow_tracking_uri"] == f"http://invfold-mlflow.{PROFILE}.svc.cluster.local:5000"
        assert defaults["workspace_pvc"] == "invfold-workspace"
        assert defaults["storage_secret"] == "mlpipeline-minio-artifact"  # untouched
    untouched = parameter_defaults(package.read_text())
    assert untouched["storage_endpoint"] == "" and untouched["storage_root"] == ""


def test_a_default_for_no_such_parameter_fails_the_hook(job, package, tmp_path):
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    bad = dict(job, spec={**job["spec"]})
    bad["spec"]["template"] = {
        "spec": {
            "containers": [
                dict(
                    container,
                    env=[
                        {"name": k, "value": '{"storage_endpont": "http://x:9000"}' if k == "PIPELINE_DEFAULTS" else v}
                        for k, v in env.items()
                    ],
                )
            ]
        }
    }
    with KfpApi() as api:
        proc = run_hook(bad, api, package, tmp_path)
        assert not api.pipelines
    assert proc.returncode == 1 and "'storage_endpont' is not a string parameter" in proc.stderr


@pytest.mark.parametrize("value", ["storage.endpoint=minio:9000", "storage.root=/local/path"])
def test_storage_values_are_checked(value):
    proc = run([tool("helm"), "template", "x", str(CHART), "--set", value], check=False)
    assert proc.returncode != 0 and "storage" in proc.stderr


def test_the_design_pipeline_is_shipped_with_its_tracking_and_storage_defaults(objects, tmp_path):
    """The hook's second container uploads the design pipeline (`<pipelineName>-design`) from the
    same ConfigMap, with the chart's MLflow service and store as its defaults: a design run from
    the KFP UI reads the champion without typing a tracking URI."""
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-pipelines"))
    design = tmp_path / "design_pipeline.yaml"
    design.write_text(config["data"]["design_pipeline.yaml"])
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("-pipeline-upload"))
    containers = job["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == "upload-design"]
    single = {
        **job,
        "spec": {
            **job["spec"],
            "template": {
                **job["spec"]["template"],
                "spec": {**job["spec"]["template"]["spec"], "containers": [container]},
            },
        },
    }
    with KfpApi(multi_user=True, token=TOKEN, writable_namespaces={PROFILE}) as api:
        proc = run_hook(single, api, design, tmp_path)
        assert proc.returncode == 0, proc.stderr
        (pipeline,) = api.pipelines.values()
        specs = [v["pipeline_spec"] for v in api.versions.values()]
    assert pipeline["name"] == "invfold-design" and pipeline["namespace"] == PROFILE
    assert specs
    for spec in specs:
        defaults = parameter_defaults(spec)
        assert defaults["mlflow_tracking_uri"] == f"http://invfold-mlflow.{PROFILE}.svc.cluster.local:5000"
        assert defaults["storage_endpoint"] == "http://seaweedfs.kubeflow:8333"
        assert "design-shard" in spec
