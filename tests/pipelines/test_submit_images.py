"""`invfold submit` never sends a pipeline whose steps name the placeholder registry.

The committed YAML names `registry.example.com/invfold/invfold-runtime:<version>` until `invfold
compile --registry` rewrites it in a source checkout; the copy inside an installed (non-editable)
package is never rewritten, so before this check `invfold submit` from a wheel sent it as it was
and every step waited in ImagePullBackOff. Here invfold is installed from its own wheel into a
folder (pip install --target) and run from there against the local stand-in of the KFP API
(tests/support/kfp_api.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from invfold import __version__
from invfold.errors import ConfigError
from invfold.pipelines.compile import COMMITTED_YAML, check_images, with_runtime_image
from invfold.runtime import DEFAULT_REGISTRY
from tests.support.kfp_api import PREFIX, KfpApi

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = f"{DEFAULT_REGISTRY}/invfold-runtime:{__version__}"
REGISTRY = "registry.acme.example/invfold"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """invfold installed from its wheel into a folder of its own: the layout of a non-editable install."""
    tmp = tmp_path_factory.mktemp("wheel-install")
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp), str(ROOT)], check=True)
    (wheel,) = tmp.glob("invfold-*.whl")
    site = tmp / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-compile", "--target", str(site), str(wheel)], check=True)
    return site


def run_installed(site: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "KF_PIPELINES_")) and k != "KUBECONFIG"}
    env.update(HOME=str(home), PYTHONPATH=str(site))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=home, timeout=180)


def executor_images(spec: dict) -> set[str]:
    return {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}


def test_submit_from_a_wheel_install_refuses_the_placeholder_images_and_sends_the_given_ones(installed, tmp_path):
    where = run_installed(installed, tmp_path, "-c", "import invfold.pipelines.compile as c; print(c.COMMITTED_YAML)")
    committed = Path(where.stdout.strip())
    assert committed.is_relative_to(installed), where.stdout + where.stderr  # not the source tree's copy
    assert executor_images(next(yaml.safe_load_all(committed.read_text()))) == {PLACEHOLDER}

    submit = ("-m", "invfold", "submit", "--data", "s3://bucket/set.jsonl.gz", "--token", "t")
    with KfpApi() as api:
        refused = run_installed(installed, tmp_path, *submit, "--host", api.url)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "Traceback" not in refused.stderr
        (line,) = [line for line in refused.stderr.splitlines() if line.startswith("invfold submit: error:")]
        assert f"its steps run in {PLACEHOLDER}, a placeholder registry" in line and "--registry REGISTRY" in line
        assert api.requests == []  # refused before anything reached the API

        sent = run_installed(installed, tmp_path, *submit, "--host", api.url, "--registry", REGISTRY, "--tag", "1.2.3")
        assert sent.returncode == 0, sent.stderr
        (run,) = api.requests_to("POST", f"{PREFIX}/runs")
    assert executor_images(run.body["pipeline_spec"]["pipeline_spec"]) == {f"{REGISTRY}/invfold-runtime:1.2.3"}
    assert run.body["display_name"].startswith("invfold_pipeline.yaml ")  # still named after its package


def test_a_compiled_package_with_a_real_registry_passes_and_a_tag_alone_does_not():
    text = COMMITTED_YAML.read_text()
    with pytest.raises(ConfigError, match=f"its steps run in {PLACEHOLDER}"):
        check_images(text, "p.yaml")
    mine = with_runtime_image(text, f"{REGISTRY}/invfold-runtime:0.2.0@sha256:" + "a" * 64)
    check_images(mine, "p.yaml")
    assert executor_images(next(yaml.safe_load_all(mine))) == {f"{REGISTRY}/invfold-runtime:0.2.0@sha256:" + "a" * 64}
    with pytest.raises(ConfigError, match="placeholder registry"):
        check_images(with_runtime_image(text, f"{DEFAULT_REGISTRY}/invfold-runtime:9.9.9"), "p.yaml")
    with pytest.raises(ConfigError, match="p.yaml: expected a compiled pipeline"):
        check_images("just: text\n", "p.yaml")
