"""What every step shares at run time: the runtime image it runs in, its timing record, and how it
reports a failure to Kubernetes.

Images: every step runs in the project's runtime image (images/ builds it, with invfold and kfp
installed, so nothing installs at run time). The committed YAML names a clearly fake registry
(`registry.example.com/invfold`) with the package version as tag; `invfold compile --registry R
--tag T` writes the real one. Components and pipelines both read it here.
"""

from __future__ import annotations

import json
import os
import sys
import time

from invfold import __version__

DEFAULT_REGISTRY = "registry.example.com/invfold"
RUNTIME_IMAGE = "invfold-runtime"
TIMINGS_ENV = "INVFOLD_TIMINGS_FILE"


def runtime_image(registry: str = DEFAULT_REGISTRY, tag: str = __version__, digest: str | None = None) -> str:
    """REGISTRY/invfold-runtime:TAG, pinned as TAG@DIGEST when a digest (sha256:...) is given."""
    return f"{registry.rstrip('/')}/{RUNTIME_IMAGE}:{tag}" + (f"@{digest}" if digest else "")


def artifact_metadata(values: dict) -> dict:
    """`values` as a KFP artifact's metadata, its None entries left out: KFP's launcher refuses an
    output whose metadata holds a top-level null ("failed to convert RuntimeArtifact to MLMD
    artifact: unknown/unsupported value type *structpb.Value_NullValue", kubeflow/pipelines 2.17.0
    backend/src/v2/metadata/converter.go, seen on a real KFP) and fails the step after its work
    is done; KFP's local runner accepts it. Nested nulls go through (as one struct value)."""
    return {key: value for key, value in values.items() if value is not None}


def record_timing(step: str, compute_s: float, **figures) -> None:
    """Append the step's own compute time and its key figures (shown on the step's line and in
    the summary) to the file named by INVFOLD_TIMINGS_FILE (set by `invfold run`), so the run
    can report wall time against compute time."""
    path = os.environ.get(TIMINGS_ENV)
    if path:
        record = {"step": step, "compute_s": round(compute_s, 3), "end": time.time(), "figures": figures}
        with open(path, "a") as fh:
            fh.write(json.dumps(record, default=str) + "\n")


TERMINATION_LOG = "/dev/termination-log"  # Kubernetes' default terminationMessagePath
TERMINATION_LIMIT = 4096  # bytes of a termination message the kubelet keeps


def report_failures_to_kubernetes(path: str = TERMINATION_LOG) -> None:
    """An uncaught error of this process becomes its container's termination message, one line
    (the error's type and text, credentials hidden), as well as the usual traceback: Argo puts
    the message into the failed step's status (`main: Error (exit code 1): InputError: ...`),
    which KFP's run keeps and `kubectl describe pod` shows, so a failed run says why without its
    logs. The runtime image calls it as Python starts (a .pth file); outside a container, or with
    no termination log mounted, nothing changes."""
    if not os.access(path, os.W_OK):
        return
    previous = sys.excepthook

    def hook(kind, error, traceback):
        try:
            with open(path, "w") as fh:
                fh.write(termination_message(error))
        except OSError:
            pass
        previous(kind, error, traceback)

    sys.excepthook = hook


def termination_message(error: BaseException) -> str:
    """`Type: text` on one line, credentials hidden, cut to what the kubelet keeps."""
    from invfold import storage

    text = " ".join(str(error).split())
    line = storage.redact(f"{type(error).__name__}: {text}" if text else type(error).__name__)
    return line.encode()[: TERMINATION_LIMIT - 4].decode(errors="ignore")
