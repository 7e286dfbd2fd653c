"""`invfold submit` against a local stand-in of the Kubeflow Pipelines v2beta1 API (kfp_api.py):
the real CLI in a subprocess, with HOME an empty folder (no kubeconfig, no kfp context file)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import yaml

from invfold import __version__
from invfold.pipelines.compile import COMMITTED_DESIGN_YAML, COMMITTED_YAML, with_runtime_image
from tests.support.kfp_api import PREFIX, KfpApi

TOKEN = f"kfp-token-{secrets.token_hex(8)}"
HEALTHZ, EXPERIMENTS, RUNS = f"{PREFIX}/healthz", f"{PREFIX}/experiments", f"{PREFIX}/runs"
REGISTRY = "registry.acme.example/invfold"  # the committed YAML names a placeholder registry, which submit refuses
IMAGE = f"{REGISTRY}/invfold-runtime:{__version__}"
ARGS = (
    "--registry",
    REGISTRY,
    "--data",
    "s3://bucket/set.jsonl.gz",
    "--strategy",
    "horovod",
    "--nproc",
    "4",
    "--param",
    "storage_root=s3://b/p",
)
PARAMS = {
    "data_uri": "s3://bucket/set.jsonl.gz",
    "strategy": "horovod",
    "procs_per_node": 4,
    "storage_root": "s3://b/p",
}


@pytest.fixture
def api():
    with KfpApi() as server:
        yield server


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


def invfold_submit(host: str, home, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "KF_PIPELINES_")) and k not in ("KUBECONFIG",)
    }
    env["HOME"] = str(home)
    command = [sys.executable, "-m", "invfold", "submit", "--host", host, *args]
    if token:
        command += ["--token", token]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=home, timeout=120)


def _committed_spec(path=COMMITTED_YAML) -> dict:
    """What kfp.Client sends as `pipeline_spec` for a two-document YAML (pipeline + platform spec),
    with REGISTRY's runtime image in every step."""
    pipeline, platform = yaml.safe_load_all(with_runtime_image(path.read_text(), IMAGE))
    return {"pipeline_spec": pipeline, "platform_spec": platform}


def _assert_typed_equal(actual: dict, expected: dict) -> None:
    assert actual == expected
    for name, value in expected.items():
        assert type(actual[name]) is type(value), (name, actual[name])


def test_submit_creates_one_run_with_the_committed_spec_and_given_parameters(api, home):
    result = invfold_submit(api.url, home, *ARGS, "--kfp-experiment", "invfold-ci", "--run-name", "ci-run")
    assert result.returncode == 0, result.stderr

    # What kfp 2.17 calls, in order: health check (no namespace given), experiment look-up by
    # name, experiment creation (none found), run creation.
    assert api.calls() == [("GET", HEALTHZ), ("GET", EXPERIMENTS), ("POST", EXPERIMENTS), ("POST", RUNS)]
    assert all(r.status == 200 for r in api.requests), [(r.call, r.status) for r in api.requests]

    lookup = api.requests_to("GET", EXPERIMENTS)[0]
    assert json.loads(lookup.query["filter"][0]) == {
        "predicates": [{"operation": 1, "key": "display_name", "stringValue": "invfold-ci"}]
    }
    assert "namespace" not in lookup.query
    assert api.requests_to("POST", EXPERIMENTS)[0].body == {"display_name": "invfold-ci"}
    (experiment,) = api.experiments.values()

    (run,) = api.runs.values()
    body = api.requests_to("POST", RUNS)[0].body
    assert body["experiment_id"] == experiment["experiment_id"]
    assert body["display_name"] == "ci-run"
    assert body["pipeline_spec"] == _committed_spec()
    assert set(body["runtime_config"]) == {"parameters"}
    _assert_typed_equal(body["runtime_config"]["parameters"], PARAMS)
    declared = body["pipeline_spec"]["pipeline_spec"]["root"]["inputDefinitions"]["parameters"]
    assert set(PARAMS) <= set(declared)

    # Bearer token on every call, never printed.
    assert {r.headers.get("authorization") for r in api.requests} == {f"Bearer {TOKEN}"}
    assert TOKEN not in result.stdout + result.stderr
    assert f"submitted run {run['run_id']}: {api.url}/#/runs/details/{run['run_id']}" in result.stdout.splitlines()


def test_an_existing_experiment_is_reused(api, home):
    existing = api.add_experiment("invfold")
    result = invfold_submit(api.url, home, *ARGS)
    assert result.returncode == 0, result.stderr
    assert api.calls() == [("GET", HEALTHZ), ("GET", EXPERIMENTS), ("POST", RUNS)]
    (run,) = api.runs.values()
    assert run["experiment_id"] == existing["experiment_id"]
    assert run["display_name"].startswith("invfold_pipeline.yaml ")  # kfp's default run name
    _assert_typed_equal(run["runtime_config"]["parameters"], PARAMS)


def test_namespace_goes_to_the_experiment_and_so_to_the_run(home):
    with KfpApi(multi_user=True) as api:
        elsewhere = api.add_experiment("invfold", namespace="team-b")
        result = invfold_submit(api.url, home, *ARGS, "--namespace", "team-a")
        assert result.returncode == 0, result.stderr

    # Given a namespace, kfp skips the health check; v2beta1 runs carry no namespace (nor
    # resource references): a run lives in its experiment's namespace.
    assert api.calls() == [("GET", EXPERIMENTS), ("POST", EXPERIMENTS), ("POST", RUNS)]
    assert api.requests_to("GET", EXPERIMENTS)[0].query["namespace"] == ["team-a"]
    assert api.requests_to("POST", EXPERIMENTS)[0].body == {"display_name": "invfold", "namespace": "team-a"}
    (team_a,) = [e for e in api.experiments.values() if e["namespace"] == "team-a"]
    (run,) = api.runs.values()
    assert run["experiment_id"] == team_a["experiment_id"] != elsewhere["experiment_id"]
    assert "namespace" not in api.requests_to("POST", RUNS)[0].body
    assert TOKEN not in result.stdout + result.stderr


def test_submit_design_sends_the_design_pipeline_with_the_registered_model(api, home):
    args = ("--pipeline", "design", "--data", "s3://bucket/chains.jsonl", "--model", "models:/my-model/3")
    result = invfold_submit(api.url, home, *args, "--shards", "3", "--temperatures", "0.1,0.2", "--registry", REGISTRY)
    assert result.returncode == 0, result.stderr
    body = api.requests_to("POST", RUNS)[0].body
    assert body["pipeline_spec"] == _committed_spec(COMMITTED_DESIGN_YAML)
    expected = {
        "structures": "s3://bucket/chains.jsonl",
        "model_name": "my-model",
        "model_version": "3",
        "shards": 3,
        "temperatures": "0.1,0.2",
    }
    _assert_typed_equal(body["runtime_config"]["parameters"], expected)


def test_submit_design_refuses_a_model_that_is_not_registered(api, home):
    args = ("--pipeline", "design", "--data", "s3://bucket/chains.jsonl", "--model", "model.pt")
    result = invfold_submit(api.url, home, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--model 'model.pt': expected a registered model, models:/NAME@ALIAS" in result.stderr
    assert api.requests == []


def test_param_without_equals_exits_2(api, home):
    result = invfold_submit(api.url, home, *ARGS, "--param", "storage_secret")
    assert result.returncode == 2
    assert "--param expects NAME=VALUE, got 'storage_secret'" in result.stderr
    assert "Traceback" not in result.stderr
    assert api.requests == []


@pytest.mark.parametrize(
    "status, message", [(401, "Unauthenticated: token expired"), (500, "Internal error: failed to create workflow")]
)
def test_an_error_answer_to_run_creation_is_one_clear_line(api, home, status, message):
    api.fail("POST", RUNS, status, message)
    result = invfold_submit(api.url, home, *ARGS)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("invfold submit:")]
    assert api.url in line and f"HTTP {status}" in line and message in line
    assert "submitted run" not in result.stdout
    assert TOKEN not in result.stdout + result.stderr
    assert len(api.requests_to("POST", RUNS)) == 1 and api.runs == {}


def test_a_rejected_token_fails_cleanly(home):
    with KfpApi(token="the-right-one") as api:
        result = invfold_submit(api.url, home, *ARGS, "--namespace", "team-a")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"invfold submit: error: the KFP API at {api.url} answered HTTP 401" in result.stderr
    assert api.calls() == [("GET", EXPERIMENTS)]  # nothing after the refused look-up
    assert TOKEN not in result.stdout + result.stderr


def test_an_unreachable_host_fails_cleanly(home):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        result = invfold_submit(host, home, *ARGS)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"invfold submit: error: could not reach the KFP API at {host}" in result.stderr
    assert TOKEN not in result.stdout + result.stderr


def test_the_stand_in_refuses_what_it_does_not_serve(api):
    def status(method: str, path: str) -> int:
        request = urllib.request.Request(api.url + path, method=method, data=b"{}" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            assert json.loads(err.read())["code"] in (5, 12)
            return err.code

    assert status("GET", HEALTHZ) == 200
    assert status("GET", "/apis/v1beta1/experiments") == 404
    assert status("POST", f"{PREFIX}/pipelines/some-id:unarchive") == 404
    assert status("POST", f"{EXPERIMENTS}/some-id:archive") == 404
    assert status("DELETE", RUNS) == 405
