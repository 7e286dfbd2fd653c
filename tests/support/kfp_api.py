"""A stand-in for the Kubeflow Pipelines v2beta1 REST API, on 127.0.0.1 (random port).

Kept for what the test cluster's real KFP (single-user, `make test-cluster`) cannot show: the
multi-user rules below (namespaces, authorization answered 400/403, 401 without the projected
token: they need KFP's multi-user mode and a profile controller), and submission and upload tests
on machines without the cluster. Uploads and runs on the real API server:
tests/cluster/test_pipeline_upload.py, tests/cluster/test_submitted_runs.py.

It serves what `kfp.Client(host=...)` (kfp 2.17.0, kfp-server-api 2.17) calls for
`create_run_from_pipeline_package`, with the paths, query parameters and JSON field names of
kfp_server_api's generated client (`kfp_server_api/api/*_service_api.py`, `models/v2beta1_*.py`):

- `GET  /apis/v2beta1/healthz` -> V2beta1GetHealthzResponse. The client calls it from its
  constructor only when it has no namespace (neither given nor in ~/.config/kfp/context.json).
- `GET  /apis/v2beta1/experiments?filter=...&namespace=...` -> V2beta1ListExperimentsResponse
  (`Client.get_experiment(experiment_name=...)`: filter is a JSON `{"predicates": [{"operation":
  1, "key": "display_name", "stringValue": NAME}]}`, operation 1 = EQUALS).
- `POST /apis/v2beta1/experiments` with a V2beta1Experiment -> the stored experiment.
- `POST /apis/v2beta1/runs` with a V2beta1Run (`experiment_id`, `display_name`, `pipeline_spec`,
  `runtime_config.parameters`) -> the stored run. v2beta1 runs carry no namespace: a run lives in
  its experiment's namespace.
- `GET  /apis/v2beta1/experiments/{id}` and `GET /apis/v2beta1/runs/{id}`.
- `GET  /apis/v2beta1/pipelines?namespace=&filter=` -> V2beta1ListPipelinesResponse.
- `POST /apis/v2beta1/pipelines` with a V2beta1Pipeline (`name`, `display_name`, `namespace`) ->
  the stored pipeline, without a version (`CreatePipeline`).
- `POST /apis/v2beta1/pipelines/upload?name=&namespace=` (multipart/form-data, file field
  `uploadfile`) -> V2beta1Pipeline, and `POST /apis/v2beta1/pipelines/upload_version?name=&pipelineid=`
  -> V2beta1PipelineVersion (`Client.upload_pipeline` / `upload_pipeline_version`).

Pipeline rules, as kubeflow/pipelines 2.17.0 has them:
- backend/src/apiserver/resource/resource_manager.go `ReplaceNamespace`: a single-user server
  ignores the namespace (every pipeline is shared, namespace "").
- backend/src/apiserver/validation/namespace.go `ValidateNamespaceRequired`: a multi-user server
  run with the pipelines namespace requirement (`require_namespace=True`) answers 400 to an upload
  without a namespace.
- backend/src/apiserver/server/pipeline_upload_server.go `canUploadVersionedPipeline`: an upload
  into a namespace (a new version: into its pipeline's namespace) is authorized for the caller
  (SubjectAccessReview `create pipelines.pipelines.kubeflow.org` there); a denial answers HTTP 400
  "Failed to create a pipeline" (`writable_namespaces`: the namespaces the caller may write, None:
  all). A duplicate pipeline name in a namespace, or version name in a pipeline, answers 409.
- backend/src/apiserver/server/pipeline_server.go `canAccessPipeline`: writes to a shared pipeline
  (namespace "") are authorized against KFP's own namespace (`system_namespace`), so a profile's
  `default-editor` gets 403 there: `DELETE /apis/v2beta1/pipelines/{id}` (its versions go with it)
  and `CreatePipeline` (`createPipeline`: a pipeline in a namespace is authorized there, 403
  otherwise; a duplicate name in the namespace answers 409) follow that rule.
  The upload server answers errors as `{"error_message", "error_details"}` (apiv1beta1.Error).

Every request is recorded (`.requests`: method, path, query, headers with lower-cased names, JSON
body, the status answered). Errors are answered like the API server's grpc-gateway: an HTTP status with a JSON
google.rpc.Status body (`error`, `code`, `message`, `details`). Any other path answers 404 and a
known path with another method 405, so a client calling an endpoint this stand-in does not know
fails loudly. `token=` makes every request without `Authorization: Bearer <token>` answer 401;
`multi_user=True` makes listing/creating experiments without a namespace answer 400, as the
real server does in multi-user mode; `fail(method, path, status)` injects an error answer.
"""

from __future__ import annotations

import email.policy
import http.server
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

PREFIX = "/apis/v2beta1"
EPOCH = "1970-01-01T00:00:00Z"

# HTTP status -> (gRPC code, reason) as grpc-gateway maps them.
_GRPC = {
    400: (3, "InvalidArgument"),
    401: (16, "Unauthenticated"),
    403: (7, "PermissionDenied"),
    404: (5, "NotFound"),
    405: (12, "Unimplemented"),
    409: (6, "AlreadyExists"),
    500: (13, "Internal"),
    503: (14, "Unavailable"),
}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, the raw text when it is not JSON, None when empty
    status: int = 0  # what the stand-in answered

    @property
    def call(self) -> tuple[str, str]:
        return self.method, self.path


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class UploadError(ApiError):
    """An error of the pipeline upload server (plain HTTP handler, not grpc-gateway)."""


def _form_files(content_type: str, raw: bytes) -> dict[str, str]:
    """The files of a multipart/form-data body: field name -> text."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    return {
        part.get_param("name", header="content-disposition"): part.get_payload(decode=True).decode()
        for part in message.iter_parts()
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class KfpApi:
    """Start with `.start()` (or as a context manager); `.url` is the host to give kfp.Client."""

    multi_user: bool = False
    token: str | None = None
    require_namespace: bool = False
    writable_namespaces: set[str] | None = None
    system_namespace: str = "kubeflow"
    requests: list[Request] = field(default_factory=list)
    experiments: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)
    pipelines: dict[str, dict] = field(default_factory=dict)
    versions: dict[str, dict] = field(default_factory=dict)
    _failures: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- test-facing helpers -------------------------------------------------------------
    def start(self) -> KfpApi:
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as urllib3's pool expects

            def _handle(self):
                api._serve(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args):  # keep test output clean
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> KfpApi:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, method: str, path: str, status: int, message: str | None = None) -> None:
        """Answer `method path` (e.g. "POST", "/apis/v2beta1/runs") with an error from now on."""
        self._failures[(method, path)] = (status, message or _GRPC.get(status, (2, "Unknown"))[1])

    def add_experiment(self, display_name: str, namespace: str | None = None) -> dict:
        return self._store_experiment({"display_name": display_name, "namespace": namespace or ""})

    def add_pipeline(self, name: str, namespace: str = "", versions: tuple[str, ...] = ()) -> dict:
        """A pipeline left by an earlier install (KFP keeps pipelines after `helm uninstall`)."""
        pipeline = self._store_pipeline(name, namespace, "")
        for version in versions:
            self._store_version(pipeline["pipeline_id"], version, "")
        return pipeline

    def versions_of(self, pipeline_id: str) -> list[str]:
        return [v["name"] for v in self.versions.values() if v["pipeline_id"] == pipeline_id]

    def calls(self) -> list[tuple[str, str]]:
        return [r.call for r in self.requests]

    def requests_to(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if r.call == (method, path)]

    # ---- HTTP ----------------------------------------------------------------------------
    def _serve(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        content_type = handler.headers.get("Content-Type") or ""
        if content_type.startswith("multipart/form-data"):
            body = _form_files(content_type, raw)
        else:
            try:
                body = json.loads(raw) if raw else None
            except (json.JSONDecodeError, UnicodeDecodeError):
                body = raw.decode(errors="replace")
        request = Request(
            handler.command,
            parts.path,
            parse_qs(parts.query, keep_blank_values=True),
            {k.lower(): v for k, v in handler.headers.items()},
            body,
        )
        with self._lock:
            self.requests.append(request)
            try:
                status, answer = 200, self._route(request)
            except UploadError as err:  # the upload server's own error body
                status, answer = err.status, {"error_message": err.message, "error_details": err.message}
            except ApiError as err:
                code, _ = _GRPC.get(err.status, (2, "Unknown"))
                status, answer = err.status, {"error": err.message, "code": code, "message": err.message, "details": []}
            request.status = status
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    _ROUTES = (
        (r"/healthz", {"GET": "_healthz"}),
        (r"/experiments", {"GET": "_list_experiments", "POST": "_create_experiment"}),
        (r"/experiments/(?P<id>[^/:]+)", {"GET": "_get_experiment"}),
        (r"/runs", {"POST": "_create_run"}),
        (r"/runs/(?P<id>[^/:]+)", {"GET": "_get_run"}),
        (r"/pipelines", {"GET": "_list_pipelines", "POST": "_create_pipeline"}),
        (r"/pipelines/upload", {"POST": "_upload_pipeline"}),
        (r"/pipelines/upload_version", {"POST": "_upload_version"}),
        (r"/pipelines/(?P<id>[^/:]+)", {"DELETE": "_delete_pipeline"}),
    )

    def _route(self, request: Request) -> dict:
        for pattern, methods in self._ROUTES:  # noqa: B007 - `methods` of the route found is used below
            match = re.fullmatch(re.escape(PREFIX) + pattern, request.path)
            if match:
                break
        else:
            raise ApiError(404, "Not Found")
        if request.method not in methods:
            raise ApiError(405, "Method Not Allowed")
        if self.token is not None and request.headers.get("authorization") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthenticated: Request header error: there is no user identity header.")
        if request.call in self._failures:
            raise ApiError(*self._failures[request.call])
        return getattr(self, methods[request.method])(request, **match.groupdict())

    # ---- endpoints -----------------------------------------------------------------------
    def _healthz(self, request: Request) -> dict:
        return {"multi_user": self.multi_user, "pipeline_store": "database"}

    def _namespace(self, namespace: str | None, what: str) -> str:
        if self.multi_user and not namespace:
            raise ApiError(400, f"Invalid input error: In multi-user mode, {what} requires a namespace.")
        return namespace or ""

    def _list_experiments(self, request: Request) -> dict:
        query = {k: v[-1] for k, v in request.query.items()}
        unknown = set(query) - {"page_token", "page_size", "sort_by", "filter", "namespace"}
        if unknown:
            raise ApiError(400, f"unknown query parameters {sorted(unknown)}")
        namespace = self._namespace(query.get("namespace"), "ListExperiments")
        found = [e for e in self.experiments.values() if e["namespace"] == namespace]
        for predicate in json.loads(query.get("filter") or "{}").get("predicates", []):
            if predicate.get("operation") not in (1, "EQUALS") or "stringValue" not in predicate:
                raise ApiError(400, f"Invalid input error: unsupported predicate {predicate}")
            key = predicate["key"]
            if key not in ("display_name", "name", "experiment_id", "description"):
                raise ApiError(400, f"Invalid input error: unknown filter key {key!r}")
            key = "display_name" if key == "name" else key
            found = [e for e in found if e.get(key) == predicate["stringValue"]]
        # proto3 JSON leaves out empty fields: an empty list is `{}`.
        return {"experiments": found, "total_size": len(found)} if found else {}

    def _store_experiment(self, body: dict) -> dict:
        experiment = {
            "experiment_id": str(uuid.uuid4()),
            "display_name": body["display_name"],
            "description": body.get("description") or "",
            "created_at": _now(),
            "namespace": body.get("namespace") or "",
            "storage_state": "AVAILABLE",
            "last_run_created_at": EPOCH,
        }
        if not experiment["description"]:
            del experiment["description"]
        self.experiments[experiment["experiment_id"]] = experiment
        return experiment

    def _create_experiment(self, request: Request) -> dict:
        body = request.body if isinstance(request.body, dict) else None
        if body is None or not body.get("display_name"):
            raise ApiError(400, "Invalid input error: Experiment must have a non-empty name.")
        namespace = self._namespace(body.get("namespace"), "CreateExperiment")
        if any(
            e["display_name"] == body["display_name"] and e["namespace"] == namespace for e in self.experiments.values()
        ):
            raise ApiError(
                409, f"Failed to create a new experiment: experiment {body['display_name']!r} already exists"
            )
        return self._store_experiment({**body, "namespace": namespace})

    def _get_experiment(self, request: Request, id: str) -> dict:
        if id not in self.experiments:
            raise ApiError(404, f"ResourceNotFoundError: Experiment {id} not found.")
        return self.experiments[id]

    def _create_run(self, request: Request) -> dict:
        body = request.body if isinstance(request.body, dict) else None
        if body is None:
            raise ApiError(400, "Invalid input error: the request body must be a run.")
        if not body.get("display_name"):
            raise ApiError(400, "Invalid input error: The run name is empty. Please specify a valid name.")
        if not body.get("pipeline_spec") and not body.get("pipeline_version_reference"):
            raise ApiError(400, "Invalid input error: a run needs a pipeline spec or a pipeline version.")
        experiment_id = body.get("experiment_id") or request.query.get("experiment_id", [""])[-1]
        if not experiment_id:
            if self.multi_user:
                raise ApiError(400, "Invalid input error: In multi-user mode, CreateRun requires an experiment.")
            default = [e for e in self.experiments.values() if e["display_name"] == "Default"]
            experiment_id = (default[0] if default else self.add_experiment("Default"))["experiment_id"]
        if experiment_id not in self.experiments:
            raise ApiError(404, f"ResourceNotFoundError: Experiment {experiment_id} not found.")
        now = _now()
        run = {
            "experiment_id": experiment_id,
            "run_id": str(uuid.uuid4()),
            "display_name": body["display_name"],
            "storage_state": "AVAILABLE",
            "pipeline_spec": body.get("pipeline_spec"),
            "runtime_config": body.get("runtime_config") or {},
            "service_account": body.get("service_account") or "pipeline-runner",
            "created_at": now,
            "scheduled_at": now,
            "finished_at": EPOCH,
            "state": "PENDING",
            "state_history": [{"update_time": now, "state": "PENDING"}],
        }
        if body.get("pipeline_version_reference"):
            run["pipeline_version_reference"] = body["pipeline_version_reference"]
        self.runs[run["run_id"]] = run
        self.experiments[experiment_id]["last_run_created_at"] = now
        return run

    def _get_run(self, request: Request, id: str) -> dict:
        if id not in self.runs:
            raise ApiError(404, f"ResourceNotFoundError: Run {id} not found.")
        return self.runs[id]

    # ---- pipelines -----------------------------------------------------------------------
    def _pipeline_namespace(self, namespace: str) -> str:
        """ReplaceNamespace, then ValidateNamespaceRequired (see the module docstring)."""
        namespace = namespace if self.multi_user else ""
        if self.multi_user and self.require_namespace and not namespace:
            raise UploadError(400, "Invalid input error: Namespace is required for pipeline operations")
        return namespace

    def _authorize_upload(self, namespace: str, what: str) -> None:
        if self.multi_user and namespace and self.writable_namespaces is not None:
            if namespace not in self.writable_namespaces:
                raise UploadError(400, f"Failed to create a {what}")

    def _store_pipeline(self, name: str, namespace: str, spec: str) -> dict:
        pipeline = {
            "pipeline_id": str(uuid.uuid4()),
            "name": name,
            "display_name": name,
            "created_at": _now(),
            "namespace": namespace,
        }
        self.pipelines[pipeline["pipeline_id"]] = pipeline
        return pipeline

    def _store_version(self, pipeline_id: str, name: str, spec: str) -> dict:
        version = {
            "pipeline_id": pipeline_id,
            "pipeline_version_id": str(uuid.uuid4()),
            "name": name,
            "display_name": name,
            "created_at": _now(),
            "pipeline_spec": spec,
        }
        self.versions[version["pipeline_version_id"]] = version
        return version

    def _list_pipelines(self, request: Request) -> dict:
        query = {k: v[-1] for k, v in request.query.items()}
        unknown = set(query) - {"page_token", "page_size", "sort_by", "filter", "namespace"}
        if unknown:
            raise ApiError(400, f"unknown query parameters {sorted(unknown)}")
        namespace = query.get("namespace", "") if self.multi_user else ""
        found = [p for p in self.pipelines.values() if p["namespace"] == namespace]
        for predicate in json.loads(query.get("filter") or "{}").get("predicates", []):
            if predicate.get("operation") not in (1, "EQUALS") or predicate.get("key") not in ("name", "display_name"):
                raise ApiError(400, f"Invalid input error: unsupported predicate {predicate}")
            found = [p for p in found if p[predicate["key"]] == predicate["stringValue"]]
        return {"pipelines": found, "total_size": len(found)} if found else {}

    def _uploaded_spec(self, request: Request) -> str:
        if not isinstance(request.body, dict) or "uploadfile" not in request.body:
            raise UploadError(400, "Failed to read pipeline from file")
        return request.body["uploadfile"]

    def _upload_pipeline(self, request: Request) -> dict:
        spec = self._uploaded_spec(request)
        query = {k: v[-1] for k, v in request.query.items()}
        namespace = self._pipeline_namespace(query.get("namespace", ""))
        self._authorize_upload(namespace, "pipeline")
        name = query.get("name") or query.get("display_name")
        if not name:
            raise UploadError(400, "Invalid input error: pipeline name is empty")
        if any(p["name"] == name and p["namespace"] == namespace for p in self.pipelines.values()):
            raise UploadError(409, "Failed to create a pipeline and a pipeline version")
        pipeline = self._store_pipeline(name, namespace, spec)
        self._store_version(pipeline["pipeline_id"], name, spec)
        return pipeline

    def _may_write_pipelines(self, namespace: str) -> bool:
        """canAccessPipeline for a write: a shared pipeline's (namespace "") against KFP's own namespace."""
        if not self.multi_user or self.writable_namespaces is None:
            return True
        return (namespace or self.system_namespace) in self.writable_namespaces

    def _create_pipeline(self, request: Request) -> dict:
        body = request.body if isinstance(request.body, dict) else {}
        namespace = (body.get("namespace") or "") if self.multi_user else ""
        if self.multi_user and self.require_namespace and not namespace:
            raise ApiError(400, "Invalid input error: Namespace is required for pipeline operations")
        name = body.get("name") or ""
        if not name:
            raise ApiError(400, "Invalid input error: name is required")
        if not self._may_write_pipelines(namespace):
            raise ApiError(
                403,
                "Failed to create a pipeline due to authorization error. "
                f"Check if you have write permissions to namespace {namespace}",
            )
        if any(p["name"] == name and p["namespace"] == namespace for p in self.pipelines.values()):
            raise ApiError(409, f"Already exists error: pipeline {name!r} in namespace {namespace!r}")
        pipeline = self._store_pipeline(name, namespace, "")
        pipeline["display_name"] = body.get("display_name") or name
        return pipeline

    def _upload_version(self, request: Request) -> dict:
        spec = self._uploaded_spec(request)
        query = {k: v[-1] for k, v in request.query.items()}
        pipeline = self.pipelines.get(query.get("pipelineid", ""))
        if pipeline is None:
            raise UploadError(400, "Failed to create a pipeline version")
        self._pipeline_namespace(pipeline["namespace"])
        self._authorize_upload(pipeline["namespace"], "pipeline version")
        name = query.get("name") or query.get("display_name")
        if not name:
            raise UploadError(400, "Invalid input error: pipeline version name is empty")
        if name in self.versions_of(pipeline["pipeline_id"]):
            raise UploadError(409, "Failed to create a pipeline version")
        return self._store_version(pipeline["pipeline_id"], name, spec)

    def _delete_pipeline(self, request: Request, id: str) -> dict:
        pipeline = self.pipelines.get(id)
        if pipeline is None:
            raise ApiError(404, f"ResourceNotFoundError: Pipeline {id} not found.")
        if not self._may_write_pipelines(pipeline["namespace"]):
            raise ApiError(
                403, f"Failed to access shared pipeline {id}. Check if you have permission to delete shared pipelines"
            )
        del self.pipelines[id]
        for version_id in [k for k, v in self.versions.items() if v["pipeline_id"] == id]:
            del self.versions[version_id]
        return {}
