"""The install's own images reach every step of every pipeline it uploads.

The upload hook (charts/invfold/templates/pipeline-upload.yaml, `python -m invfold.pipelines.upload`)
gets the chart's runtime image (registry, tag, digest) and pull Secrets as PIPELINE_IMAGE and
IMAGE_PULL_SECRETS; `invfold.pipelines.upload.for_install` is what it does to the package before the
upload. Here it runs on the real compiled pipelines (the ConfigMap's copies, both the training and the
design pipeline) with the environment `helm template` renders for the hook; the hook's upload to
KFP's real API server, and a run of what it uploaded, are in tests/cluster/test_pipeline_upload.py.

Upstream fact: kfp-kubernetes 2.17.0 `kfp/kubernetes/image.py` `set_image_pull_secrets` writes
`imagePullSecret: [{secretName, secretNameParameter: {runtimeValue: {constant}}}]` into the
executor's Kubernetes platform config; `with_pull_secrets` writes the same entry (compared below with
kfp's own output), which KFP's driver turns into the pod's imagePullSecrets
(kubeflow/pipelines 2.15.0, 2.16.0 and 2.17.0 backend/src/v2/driver/k8s.go, `extendPodSpecPatch`).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from invfold.pipelines.compile import SubmitError, check_images, with_pull_secrets
from invfold.pipelines.upload import UploadTarget, for_install
from tests.support.deploy_tools import documents, helm_template

DIGEST = "sha256:" + "ab" * 32
REGISTRY = "registry.acme.example/invfold"
VALUES = (
    "--set", f"images.registry={REGISTRY}",
    "--set", "images.tag=1.4.2",
    "--set", f"images.digests.runtime={DIGEST}",
    "--set", "images.pullSecrets[0].name=regcred",
    "--set", "images.pullSecrets[1].name=mirror-cred",
)  # fmt: skip
PIPELINES = {"upload": "invfold_pipeline.yaml", "upload-design": "design_pipeline.yaml"}


def rendered(*values: str, namespace: str = "team-a") -> tuple[dict, dict]:
    """The upload Job and the pipeline ConfigMap, as `helm template` renders them."""
    objects = documents(helm_template(*values, namespace=namespace))
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("-pipeline-upload"))
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-pipelines"))
    return job, config


def targets(job: dict, config: dict, tmp_path) -> list[tuple[UploadTarget, str]]:
    """Each hook container's UploadTarget (from its rendered env) and the package text it uploads."""
    out = []
    for container in job["spec"]["template"]["spec"]["containers"]:
        env = {e["name"]: e["value"] for e in container["env"]}
        text = config["data"][PIPELINES[container["name"]]]
        package = tmp_path / PIPELINES[container["name"]]
        package.write_text(text)
        env["PIPELINE_PACKAGE"] = str(package)
        out.append((UploadTarget.from_env(env), text))
    assert len(out) == 2, "the training and the design pipeline"
    return out


def step_images(text: str) -> set[str]:
    executors = next(yaml.safe_load_all(text))["deploymentSpec"]["executors"]
    return {e["container"]["image"] for e in executors.values()}


def step_pull_secrets(text: str) -> dict[str, list[str]]:
    docs = list(yaml.safe_load_all(text))
    executors = docs[0]["deploymentSpec"]["executors"]
    configs = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    return {name: [s["secretName"] for s in configs.get(name, {}).get("imagePullSecret", [])] for name in executors}


def test_every_uploaded_pipeline_runs_the_installs_pinned_image_with_its_pull_secrets(tmp_path):
    job, config = rendered(*VALUES)
    hook_image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert hook_image == f"{REGISTRY}/invfold-runtime:1.4.2@{DIGEST}"
    for target, text in targets(job, config, tmp_path):
        assert step_images(text) == {"registry.example.com/invfold/invfold-runtime:0.1.0"}  # as committed
        uploaded = for_install(text, target)
        assert step_images(uploaded) == {hook_image}, target.pipeline_name
        assert set(map(tuple, step_pull_secrets(uploaded).values())) == {("regcred", "mirror-cred")}
        check_images(uploaded, target.package)  # the guard `invfold submit` runs passes


def test_an_install_on_the_placeholder_registry_refuses_to_upload(tmp_path):
    job, config = rendered()
    for target, text in targets(job, config, tmp_path):
        with pytest.raises(SubmitError, match=r"placeholder registry.*images\.registry"):
            for_install(text, target)


def test_without_pull_secrets_the_steps_get_none(tmp_path):
    job, config = rendered("--set", f"images.registry={REGISTRY}")
    for target, text in targets(job, config, tmp_path):
        assert target.pull_secrets == []
        assert set(map(tuple, step_pull_secrets(for_install(text, target)).values())) == {()}


def test_the_pull_secret_entry_is_kfp_kubernetes_own(tmp_path):
    """A pipeline compiled with kfp-kubernetes' set_image_pull_secrets and the same pipeline compiled
    bare and given the Secrets by with_pull_secrets hold the same platform config."""
    from kfp import compiler, dsl, kubernetes

    @dsl.component(base_image="python:3.11")
    def hello():
        print("hi")

    @dsl.pipeline(name="with-kfp")
    def with_kfp():
        kubernetes.set_image_pull_secrets(hello(), ["regcred", "mirror-cred"])

    @dsl.pipeline(name="with-kfp")
    def bare():
        hello()

    compiler.Compiler().compile(with_kfp, str(tmp_path / "kfp.yaml"))
    compiler.Compiler().compile(bare, str(tmp_path / "bare.yaml"))
    ours = with_pull_secrets((tmp_path / "bare.yaml").read_text(), ["regcred", "mirror-cred"])
    theirs = list(yaml.safe_load_all((tmp_path / "kfp.yaml").read_text()))[1]
    assert list(yaml.safe_load_all(ours))[1] == theirs


@pytest.mark.slow  # two real `invfold compile` runs
@pytest.mark.parametrize("pipeline", ["train", "design"])
def test_invfold_compile_pins_digest_and_pull_secrets_in_either_pipeline(tmp_path, pipeline):
    out = tmp_path / f"{pipeline}.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "invfold", "compile", "--pipeline", pipeline, "--registry", REGISTRY]
        + ["--tag", "1.4.2", "--digest", DIGEST, "--pull-secret", "regcred", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert step_images(text) == {f"{REGISTRY}/invfold-runtime:1.4.2@{DIGEST}"}
    assert set(map(tuple, step_pull_secrets(text).values())) == {("regcred",)}


def test_a_malformed_digest_is_one_error_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "invfold", "compile", "--digest", "sha256:abc", "--out", str(tmp_path / "x.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--digest" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.yaml").exists()
