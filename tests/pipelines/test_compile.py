"""The compiled pipeline: committed and current, naming our images, installing nothing at run
time, documented for the Kubeflow UI, and free of credentials."""

from __future__ import annotations

import subprocess
import sys

import yaml

from invfold.pipelines.compile import COMMITTED_YAML, compile_pipeline
from invfold.runtime import runtime_image
from tests.support.credentials import literal_credentials


def _spec(text: str) -> dict:
    return next(yaml.safe_load_all(text))


def test_committed_yaml_is_current(tmp_path):
    fresh = compile_pipeline(tmp_path / "p.yaml")
    # Parsed, not as text: the header comment prints dict defaults in no fixed order.
    assert list(yaml.safe_load_all(COMMITTED_YAML.read_text())) == list(yaml.safe_load_all(fresh)), (
        "pipelines/invfold_pipeline.yaml is stale: run `invfold compile --out pipelines/invfold_pipeline.yaml`"
    )


def test_every_step_runs_in_our_image_and_installs_nothing():
    text = COMMITTED_YAML.read_text()
    executors = _spec(text)["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {runtime_image()}
    assert runtime_image().startswith("registry.example.com/invfold/invfold-runtime:")
    assert "pip install" not in text and "pip3 install" not in text


def test_compile_sets_registry_and_tag(tmp_path):
    out = tmp_path / "p.yaml"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "invfold",
            "compile",
            "--out",
            str(out),
            "--registry",
            "registry.acme.example/ml",
            "--tag",
            "2.0.1",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    executors = _spec(out.read_text())["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {"registry.acme.example/ml/invfold-runtime:2.0.1"}


def test_pipeline_and_every_parameter_are_described():
    spec = _spec(COMMITTED_YAML.read_text())
    assert len(spec["pipelineInfo"]["description"]) > 40
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert {
        "data_uri",
        "strategy",
        "nodes",
        "procs_per_node",
        "gpus_per_node",
        "preset",
        "tokens_per_batch",
        "max_steps",
        "epochs",
        "lr",
        "precision",
        "zero_stage",
        "registration_threshold",
    } <= set(parameters)
    undocumented = [n for n, p in parameters.items() if len(p.get("description", "")) < 15]
    assert undocumented == []


def test_train_step_retries_and_passes_scheduling_through_to_the_trainjob():
    spec = _spec(COMMITTED_YAML.read_text())
    tasks = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert tasks["train-op"]["retryPolicy"]["maxRetryCount"] >= 1
    assert tasks["prep-op"]["cachingOptions"].get("enableCache") is True
    assert not tasks["fingerprint-op"]["cachingOptions"].get("enableCache")
    passthroughs = {p["field"] for p in spec["components"]["comp-train-op"]["taskConfigPassthroughs"]}
    assert passthroughs == {"KUBERNETES_NODE_SELECTOR", "KUBERNETES_TOLERATIONS"}


def test_no_literal_credentials_in_the_compiled_pipeline():
    assert literal_credentials(COMMITTED_YAML.read_text()) == []


def test_run_compile_submit_are_subcommands():
    result = subprocess.run([sys.executable, "-m", "invfold", "--help"], capture_output=True, text=True)
    assert all(name in result.stdout for name in ("run", "compile", "submit"))


def test_every_step_pod_carries_the_labels_the_network_policies_select():
    docs = list(yaml.safe_load_all(COMMITTED_YAML.read_text()))
    executors = docs[0]["deploymentSpec"]["executors"]
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    roles = {}
    for name in executors:
        labels = platform.get(name, {}).get("podMetadata", {}).get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "invfold", name
        roles[name] = labels.get("invfold.dev/role")
    # Only the train step, which creates TrainJobs, may reach the Kubernetes API.
    assert roles.pop("exec-train-op") == "launcher"
    assert set(roles.values()) == {"step"}


def test_committed_design_yaml_is_current_documented_and_fans_out(tmp_path):
    from invfold.pipelines.compile import COMMITTED_DESIGN_YAML

    fresh = compile_pipeline(tmp_path / "d.yaml", pipeline="design")
    committed = COMMITTED_DESIGN_YAML.read_text()
    assert list(yaml.safe_load_all(committed)) == list(yaml.safe_load_all(fresh)), (
        "pipelines/design_pipeline.yaml is stale: run `invfold compile --pipeline design`"
    )
    docs = list(yaml.safe_load_all(committed))
    spec = docs[0]
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {runtime_image()}
    assert "pip install" not in committed and literal_credentials(committed) == []
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert {"structures", "model_name", "model_version", "shards", "temperatures"} <= set(parameters)
    assert [n for n, p in parameters.items() if len(p.get("description", "")) < 15] == []
    tasks = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert "parameterIterator" in tasks["for-loop-2"] or "iterator" in str(tasks["for-loop-2"])
    outputs = spec["components"]["comp-gather-designs-op"]["outputDefinitions"]["artifacts"]
    assert outputs["designs"]["artifactType"]["schemaTitle"] == "system.Dataset"
    assert outputs["report"]["artifactType"]["schemaTitle"] == "system.Markdown"
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name in spec["deploymentSpec"]["executors"]:
        assert platform[name]["podMetadata"]["labels"]["invfold.dev/role"] == "step", name
