"""Compile the pipeline to YAML with the image reference of choice, and submit it to Kubeflow."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

import yaml

from invfold import __version__
from invfold.errors import ConfigError, InvfoldError
from invfold.runtime import DEFAULT_REGISTRY, RUNTIME_IMAGE, runtime_image

COMMITTED_YAML = Path(__file__).resolve().parent / "invfold_pipeline.yaml"
COMMITTED_DESIGN_YAML = Path(__file__).resolve().parent / "design_pipeline.yaml"


def compile_pipeline(
    out: str | os.PathLike,
    registry: str = DEFAULT_REGISTRY,
    tag: str = __version__,
    pipeline: str = "train",
    digest: str | None = None,
    pull_secrets: tuple[str, ...] | list[str] = (),
) -> str:
    """Write the pipeline YAML (`pipeline`: "train", the training pipeline, or "design") naming
    `registry`/invfold-runtime:`tag`[@`digest`] in every step, each step pulling with
    `pull_secrets`; returns the text."""
    from kfp import compiler

    if pipeline == "design":
        from invfold.pipelines.design_pipeline import design_pipeline as definition
    else:
        from invfold.pipelines.pipeline import invfold_pipeline as definition

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pipeline.yaml")
        compiler.Compiler().compile(definition, path)
        text = Path(path).read_text()
    wanted = runtime_image(registry, tag, digest)
    if wanted != runtime_image():
        text = with_runtime_image(text, wanted)
    if pull_secrets:
        text = with_pull_secrets(text, pull_secrets)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    return text


def _documents(text: str, where: str) -> list:
    """The YAML documents of a compiled pipeline; text that is not YAML is one ConfigError line."""
    try:
        return list(yaml.safe_load_all(text))
    except (yaml.YAMLError, RecursionError) as err:  # PyYAML recurses into nested values
        problem = getattr(err, "problem", None) or "values nested deeper than the parser's limit"
        raise ConfigError(f"{where}: expected a compiled pipeline YAML ({problem})") from None


def _executors(docs: list, where: str) -> dict:
    try:
        return docs[0]["deploymentSpec"]["executors"]
    except (IndexError, KeyError, TypeError):
        raise ConfigError(f"{where}: expected a compiled pipeline (deploymentSpec.executors)") from None


def _is_runtime_image(image: str) -> bool:
    """Whether `image` is invfold's runtime image, under any registry, tag or digest."""
    return image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0] == RUNTIME_IMAGE


def with_runtime_image(text: str, image: str, where: str = "the compiled pipeline") -> str:
    """The compiled pipeline `text` with every step that runs invfold's runtime image running `image`."""
    docs = _documents(text, where)
    for executor in _executors(docs, where).values():
        container = executor.get("container", {})
        if _is_runtime_image(container.get("image", "")):
            container["image"] = image
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    return header + "---\n".join(yaml.safe_dump(doc, sort_keys=True) for doc in docs)


def with_pull_secrets(text: str, names, where: str = "the compiled pipeline") -> str:
    """The compiled pipeline `text` with every step pulling its image with the Secrets `names`: the
    entry kfp-kubernetes' `set_image_pull_secrets(task, names)` writes into each executor's
    Kubernetes platform config (kfp-kubernetes 2.17: `imagePullSecret` with `secretName` and a
    constant `secretNameParameter`), added after the ones a step already has."""
    docs = _documents(text, where)
    executors = _executors(docs, where)
    if len(docs) < 2 or not isinstance(docs[1], dict):
        docs[1:2] = [{"platforms": {"kubernetes": {"deploymentSpec": {"executors": {}}}}}]
    platform = docs[1].setdefault("platforms", {}).setdefault("kubernetes", {}).setdefault("deploymentSpec", {})
    configs = platform.setdefault("executors", {})
    for name in executors:
        config = configs.setdefault(name, {})
        present = [entry.get("secretName") for entry in config.get("imagePullSecret", [])]
        config.setdefault("imagePullSecret", []).extend(
            {"secretName": secret, "secretNameParameter": {"runtimeValue": {"constant": secret}}}
            for secret in names
            if secret not in present
        )
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    return header + "---\n".join(yaml.safe_dump(doc, sort_keys=True) for doc in docs)


def check_images(text: str, where: str) -> None:
    """Refuse a pipeline whose steps run an image of the placeholder registry: the committed YAML
    names `registry.example.com/invfold` until `invfold compile --registry` rewrites it, and the
    copy inside an installed (non-editable) package is never rewritten, so no cluster could pull
    its images (every step would wait in ImagePullBackOff)."""
    for executor in _executors(_documents(text, where), where).values():
        image = executor.get("container", {}).get("image", "")
        if image.startswith(DEFAULT_REGISTRY.rstrip("/") + "/"):
            raise ConfigError(
                f"{where}: its steps run in {image}, a placeholder registry no cluster pulls from: give "
                "--registry REGISTRY (and --tag TAG) to name the runtime image you pushed "
                "(scripts/build_images.sh), or submit your own compiled YAML "
                "(invfold compile --registry REGISTRY --tag TAG --out FILE; --package FILE)"
            )


class SubmitError(InvfoldError, RuntimeError):
    """Submission failed; the message is one line naming the host and what it answered."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))


def _answer_detail(body, token: str | None) -> str:
    """The API's error message from a google.rpc.Status JSON body (else the body), on one line."""
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    detail = body or ""
    try:
        parsed = json.loads(detail)
        if isinstance(parsed, dict):
            # grpc-gateway's google.rpc.Status, or the upload server's apiv1beta1.Error
            detail = parsed.get("message") or parsed.get("error") or parsed.get("error_message") or detail
    except ValueError:
        pass
    detail = " ".join(str(detail).split())
    if token:
        detail = detail.replace(token, "***")
    return detail[:300] + ("..." if len(detail) > 300 else "")


@contextlib.contextmanager
def kfp_errors(host: str, token: str | None = None, what: str = ""):
    """Turn what kfp.Client raises (an API error answer, an unreachable host, a failed health
    check) into one SubmitError line naming the host (and `what` was asked), token masked."""
    import urllib3
    from kfp_server_api.exceptions import ApiException

    about = f" ({what})" if what else ""
    try:
        yield
    except ApiException as err:
        answer = f"HTTP {err.status} {err.reason or ''}".strip() if err.status else (err.reason or "an error")
        detail = _answer_detail(err.body, token)
        raise SubmitError(
            f"the KFP API at {host} answered {answer}{about}" + (f": {detail}" if detail else "")
        ) from None
    except urllib3.exceptions.HTTPError as err:
        reason = str(getattr(err, "reason", None) or err)
        if reason.startswith("<"):  # "<HTTPConnection object at 0x...>: Failed to establish ..."
            reason = reason.split(": ", 1)[-1]
        raise SubmitError(f"could not reach the KFP API at {host}{about}: {' '.join(reason.split())}") from None
    except TimeoutError as err:  # kfp.Client's health check gives up after 5 failed tries
        raise SubmitError(f"the KFP API at {host} failed its health check{about}: {err}") from None


def submit(
    host: str,
    params: dict,
    package: str | None = None,
    experiment: str = "invfold",
    run_name: str | None = None,
    token: str | None = None,
    namespace: str | None = None,
    registry: str | None = None,
    tag: str | None = None,
) -> dict:
    """Submit the compiled pipeline (default: the committed YAML) to the KFP API at `host`, with
    a bearer token when given (else the kubeconfig / in-cluster credentials kfp.Client finds).
    `registry`/`tag` name the runtime image every step runs in (the package's is replaced); a
    package whose steps still name the placeholder registry is refused before anything is sent.

    Raises ConfigError for such a package, SubmitError when the API answers an error or cannot
    be reached."""
    import kfp

    path = Path(package or COMMITTED_YAML)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"--package {path}: expected a compiled pipeline YAML ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--package {path}: expected a compiled pipeline YAML (not UTF-8 text)") from None
    if registry or tag:
        text = with_runtime_image(text, runtime_image(registry or DEFAULT_REGISTRY, tag or __version__), str(path))
    check_images(text, str(path))
    with tempfile.TemporaryDirectory() as tmp:
        sent = Path(tmp) / path.name  # kfp names a run after its package file
        sent.write_text(text)
        with kfp_errors(host, token):
            client = kfp.Client(host=host, existing_token=token or None, namespace=namespace)
            result = client.create_run_from_pipeline_package(
                str(sent),
                arguments=params,
                run_name=run_name,
                experiment_name=experiment,
                namespace=namespace,
            )
    if not result.run_id:
        # Behind Kubeflow's gateway (oauth2-proxy) a request without an accepted token is
        # redirected to the login page; kfp follows the redirect and reads that HTML page as an
        # empty answer, so the "run" has no id.
        raise SubmitError(
            f"the KFP API at {host} gave no run id: the request most likely reached a login page "
            "(Kubeflow's gateway answers requests without an accepted token with a redirect to it). "
            "Send a token the platform accepts (--token or KFP_TOKEN), or reach the API directly "
            "(kubectl -n kubeflow port-forward svc/ml-pipeline 8888:8888, --host http://127.0.0.1:8888, "
            "a ServiceAccount token for the pipelines.kubeflow.org audience): docs/deploy.md, Authentication"
        )
    url = f"{host.rstrip('/')}/#/runs/details/{result.run_id}"
    return {"run_id": result.run_id, "url": url}
