"""Compile the pipeline to YAML with the image reference of choice, and submit it to Kubeflow."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from invfold import __version__

from .settings import DEFAULT_REGISTRY, runtime_image

COMMITTED_YAML = Path(__file__).resolve().parent / "invfold_pipeline.yaml"


def compile_pipeline(out: str | os.PathLike, registry: str = DEFAULT_REGISTRY, tag: str = __version__) -> str:
    """Write the pipeline YAML naming `registry`/invfold-runtime:`tag` in every step; returns the text."""
    from kfp import compiler

    from .pipeline import invfold_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pipeline.yaml")
        compiler.Compiler().compile(invfold_pipeline, path)
        text = Path(path).read_text()
    image, wanted = runtime_image(), runtime_image(registry, tag)
    if wanted != image:
        docs = list(yaml.safe_load_all(text))
        for executor in docs[0]["deploymentSpec"]["executors"].values():
            container = executor.get("container", {})
            if container.get("image") == image:
                container["image"] = wanted
        header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
        text = header + "---\n".join(yaml.safe_dump(doc, sort_keys=True) for doc in docs)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    return text


def submit(host: str, params: dict, package: str | None = None, experiment: str = "invfold",
           run_name: str | None = None, token: str | None = None, namespace: str | None = None) -> dict:
    """Submit the compiled pipeline (default: the committed YAML) to the KFP API at `host`, with
    a bearer token when given (else the kubeconfig / in-cluster credentials kfp.Client finds)."""
    import kfp

    client = kfp.Client(host=host, existing_token=token or None, namespace=namespace)
    result = client.create_run_from_pipeline_package(
        str(package or COMMITTED_YAML), arguments=params, run_name=run_name,
        experiment_name=experiment, namespace=namespace)
    url = f"{host.rstrip('/')}/#/runs/details/{result.run_id}"
    return {"run_id": result.run_id, "url": url}
