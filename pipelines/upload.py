"""Upload the compiled pipeline to Kubeflow Pipelines as a new version: the chart's post-install /
post-upgrade hook runs `python -m invfold.pipelines.upload` with its settings in the environment.

- Into the release's namespace: a multi-user KFP (2.17) authorizes writes to a shared pipeline
  against its own namespace, where a profile's `default-editor` has no rights, and may require a
  namespace for every pipeline; a single-user KFP ignores the namespace.
- A version name that no earlier install has used: KFP keeps pipelines after `helm uninstall`, and
  a reinstall starts the release revision at 1 again, so the name carries the upload time too.
- With the projected service-account token (audience pipelines.kubeflow.org): kfp.Client given a
  host sends no credentials unless it is handed them.
- With the install's own parameter defaults (PIPELINE_DEFAULTS, JSON: the chart's storage endpoint
  and root, its MLflow service, its workspace claim), so a run started from the KFP UI needs none.
- With the install's own images: every step runs PIPELINE_IMAGE (the chart's runtime image,
  registry, tag and digest: the image the hook itself runs) and pulls with the Secrets of
  IMAGE_PULL_SECRETS (JSON list of names, the chart's images.pullSecrets); the result passes the
  image guard `invfold submit` runs, so a package still naming the placeholder registry is refused
  before anything is uploaded.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime

import yaml

from invfold.errors import ConfigError
from invfold.pipelines.compile import SubmitError, check_images, kfp_errors, with_pull_secrets, with_runtime_image

ENV = {
    "host": "KFP_HOST",
    "namespace": "NAMESPACE",
    "pipeline_name": "PIPELINE_NAME",
    "version_prefix": "PIPELINE_VERSION_PREFIX",
    "package": "PIPELINE_PACKAGE",
    "token_path": "KF_PIPELINES_SA_TOKEN_PATH",
    "defaults": "PIPELINE_DEFAULTS",
    "image": "PIPELINE_IMAGE",
    "pull_secrets": "IMAGE_PULL_SECRETS",
}


@dataclass
class UploadTarget:
    """Where and under which names the package goes; `from_env` reads the hook's variables."""

    host: str
    namespace: str
    pipeline_name: str
    version_prefix: str
    package: str
    token_path: str | None = None
    defaults: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    pull_secrets: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, environ=os.environ) -> UploadTarget:
        optional = ("token_path", "defaults", "image", "pull_secrets")
        missing = [var for key, var in ENV.items() if key not in optional and not environ.get(var)]
        if missing:
            raise SubmitError(f"pipeline upload: set {', '.join(missing)}")
        values = {key: environ.get(var) or None for key, var in ENV.items()}
        try:
            defaults = json.loads(values["defaults"] or "{}")
            pull_secrets = json.loads(values["pull_secrets"] or "[]")
        except json.JSONDecodeError as err:
            raise SubmitError(f"pipeline upload: PIPELINE_DEFAULTS or IMAGE_PULL_SECRETS is not JSON: {err}") from None
        if not isinstance(defaults, dict):
            raise SubmitError(f"pipeline upload: PIPELINE_DEFAULTS must be a JSON object, got {defaults!r}")
        if not isinstance(pull_secrets, list) or not all(isinstance(s, str) and s for s in pull_secrets):
            raise SubmitError(f"pipeline upload: IMAGE_PULL_SECRETS must be a JSON list of names, got {pull_secrets!r}")
        return cls(
            **{
                **values,
                "defaults": {k: v for k, v in defaults.items() if v not in (None, "")},
                "pull_secrets": pull_secrets,
            }
        )


def with_defaults(package_text: str, defaults: dict[str, str]) -> str:
    """The compiled pipeline with `defaults` as its parameters' default values; a name that is not
    a string parameter of the pipeline is an error (a typo would otherwise be dropped silently)."""
    docs = list(yaml.safe_load_all(package_text))
    parameters = docs[0]["root"]["inputDefinitions"]["parameters"]
    for name, value in defaults.items():
        if parameters.get(name, {}).get("parameterType") != "STRING":
            known = sorted(k for k, v in parameters.items() if v.get("parameterType") == "STRING")
            raise SubmitError(f"pipeline upload: {name!r} is not a string parameter of the pipeline (known: {known})")
        parameters[name]["defaultValue"] = str(value)
    return yaml.safe_dump_all(docs, sort_keys=True)


def for_install(package_text: str, target: UploadTarget) -> str:
    """The package as this install uploads it: its parameter defaults, every step on the install's
    runtime image with its pull Secrets, then the image guard (a step still on the placeholder
    registry refuses the upload: SubmitError, the hook fails and helm reports it)."""
    text = with_defaults(package_text, target.defaults)
    if target.image:
        text = with_runtime_image(text, target.image, target.package)
    if target.pull_secrets:
        text = with_pull_secrets(text, target.pull_secrets, target.package)
    try:
        check_images(text, target.package)
    except ConfigError:
        raise SubmitError(
            f"pipeline upload: the steps of {target.package} would run in {target.image or 'the package image'}, "
            "a placeholder registry no cluster pulls from: set the chart's images.registry (and images.tag) to "
            "where scripts/build_images.sh pushed the images"
        ) from None
    return text


def version_name(prefix: str, now: datetime | None = None) -> str:
    """`<prefix>-<UTC time to the second>`: unique across uninstall/reinstall (KFP allows each
    version name once per pipeline and answers 409 to a second one)."""
    return f"{prefix}-{(now or datetime.now(UTC)):%Y%m%d-%H%M%S}"


def find_pipeline(client, name: str, namespace: str) -> str | None:
    """The id of the pipeline called `name` in `namespace`, or None."""
    predicate = {"operation": "EQUALS", "key": "name", "stringValue": name}
    found = client.list_pipelines(filter=json.dumps({"predicates": [predicate]}), namespace=namespace).pipelines or []
    if len(found) > 1:
        raise SubmitError(f"{len(found)} pipelines are called {name!r} in namespace {namespace!r}: expected one")
    return found[0].pipeline_id if found else None


def create_pipeline(client, name: str, namespace: str) -> str:
    """A new pipeline without versions; its id. (`Client.upload_pipeline` would also make a
    version named after the pipeline: kubeflow/pipelines 2.17.0
    backend/src/apiserver/server/pipeline_upload_server.go; `CreatePipeline` makes the pipeline
    alone: pipeline_server.go `createPipeline`, same namespace rules and authorization.)"""
    from kfp_server_api import V2beta1Pipeline

    body = V2beta1Pipeline(name=name, display_name=name, namespace=namespace or None)
    return client._pipelines_api.pipeline_service_create_pipeline(pipeline=body).pipeline_id


def upload(target: UploadTarget, now: datetime | None = None) -> dict:
    """Upload the package as a new version of the pipeline (made on the first install); returns
    pipeline id, version name and id. Raises SubmitError with what the API answered."""
    import kfp
    from kfp.client import ServiceAccountTokenVolumeCredentials

    version = version_name(target.version_prefix, now)
    credentials = ServiceAccountTokenVolumeCredentials(target.token_path) if target.token_path else None
    with open(target.package) as fh:
        text = for_install(fh.read(), target)
    with tempfile.TemporaryDirectory() as tmp:
        package = os.path.join(tmp, "invfold_pipeline.yaml")
        with open(package, "w") as fh:
            fh.write(text)
        with kfp_errors(target.host, what=f"pipeline {target.pipeline_name!r} in namespace {target.namespace!r}"):
            client = kfp.Client(host=target.host, namespace=target.namespace, credentials=credentials)
            pipeline_id = find_pipeline(client, target.pipeline_name, target.namespace)
            if pipeline_id is None:
                pipeline_id = create_pipeline(client, target.pipeline_name, target.namespace)
            uploaded = client.upload_pipeline_version(package, pipeline_version_name=version, pipeline_id=pipeline_id)
    return {"pipeline_id": pipeline_id, "version": version, "version_id": uploaded.pipeline_version_id}


def main() -> int:
    try:
        target = UploadTarget.from_env()
        result = upload(target)
    except SubmitError as err:
        print(f"pipeline upload: error: {err}", file=sys.stderr)
        return err.exit_code
    print(
        f"uploaded pipeline {target.pipeline_name!r} version {result['version']!r} "
        f"(pipeline {result['pipeline_id']}, version {result['version_id']}) into namespace {target.namespace!r}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
