"""One model reference for every command that takes a model (design, score, evaluate, export,
train --init-from):

- a file: model.pt (training, `invfold weights import`) or model.onnx (`invfold export`), a local
  path or a URI (s3://, gs://, https://, file://);
- a published name: `proteinmpnn:v_48_020` (`invfold weights list`);
- an MLflow model URI read from `--tracking-uri` (default MLFLOW_TRACKING_URI):
  `models:/NAME@ALIAS` or `models:/NAME/VERSION` (a registered version: the PyTorch checkpoint
  its run logged beside the ONNX model, `model_pt/model.pt`, else the ONNX model itself), or
  `runs:/RUN_ID/PATH` (a run's artifact: a model file, or a folder holding model.pt or
  model.onnx).

`check_model` judges the text (and a local file's first bytes) without torch or MLflow, so a
mistake costs one line before any heavy import; `resolve_model` downloads an MLflow model and
returns the local file; files and published names come back as given.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass

from invfold.components.model import published
from invfold.components.tracking import fetch_model_uri
from invfold.errors import ConfigError, InputError
from invfold.options import option

# models:/NAME@ALIAS, models:/NAME/VERSION, runs:/RUN_ID/PATH (MLflow's own URI forms)
_MODELS_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/@]+)|/(?P<version>\d+))$")
_RUNS_URI = re.compile(r"^runs:/(?P<run_id>[0-9A-Za-z_-]+)/(?P<path>.+)$")
_UPSTREAM_NAME = re.compile(r"^v_\d+_\d+$")  # ProteinMPNN's --model_name (v_48_020)
MLFLOW_FORMS = "models:/NAME@ALIAS, models:/NAME/VERSION or runs:/RUN_ID/PATH"
REGISTERED_CHECKPOINT = "model_pt/model.pt"  # where the register step logs the PyTorch checkpoint
ZIP_MAGIC, GZIP_MAGIC = b"PK\x03\x04", b"\x1f\x8b"  # torch.save's zip archive (stored as is, or gzipped)


@dataclass
class ModelSource:
    """Where MLflow model references (models:/, runs:/) are read from."""

    tracking_uri: str | None = option(
        None,
        "MLflow tracking URI for a models:/NAME@ALIAS, models:/NAME/VERSION or runs:/ID/PATH model "
        "(default: MLFLOW_TRACKING_URI)",
    )


def is_mlflow_uri(text: str) -> bool:
    return str(text).startswith(("models:/", "runs:/"))


def check_model(text: str, what: str = "MODEL", *, onnx: bool = True, published_names: bool = True) -> None:
    """Raise a one-line error when `text` cannot name a model: an MLflow URI of another form, an
    unknown published family, a local file that is missing or is neither a torch archive nor an
    ONNX graph (`onnx=False`: a command that needs the PyTorch model)."""
    text = str(text)
    if is_mlflow_uri(text):
        if not (_MODELS_URI.match(text) or _RUNS_URI.match(text)):
            raise ConfigError(f"{what} {text!r}: expected an MLflow model URI {MLFLOW_FORMS}")
        return
    if published.is_published_name(text):
        if not published_names:
            raise ConfigError(f"{what} {text!r}: published weights are not accepted here; expected a model file")
        return
    if _UPSTREAM_NAME.match(text) and not os.path.exists(text):  # ProteinMPNN's --model_name
        raise ConfigError(
            f"{what} {text!r}: no such file; the published weights of that name are proteinmpnn:{text} "
            f"(or proteinmpnn-soluble:{text}, proteinmpnn-ca:{text})"
        )
    family, sep, rest = text.partition(":")
    if sep and not rest.startswith("//") and not os.path.exists(text):
        raise ConfigError(
            f"{what} {text!r}: unknown published family {family!r}; expected one of "
            f"{sorted(published.FAMILIES)} (e.g. proteinmpnn:v_48_020), {MLFLOW_FORMS}, or a model file"
        )
    if text.endswith(".onnx") and not onnx:
        raise ConfigError(
            f"{what} {text!r}: this command needs the PyTorch model (model.pt), not its ONNX export "
            f"(a registered model's models:/NAME@ALIAS gives its model.pt)"
        )
    if "://" in text and not text.startswith("file://"):
        return  # remote: read (and judged) when it is loaded
    check_model_file(text.removeprefix("file://"), onnx=onnx)


def check_model_file(path: str, *, onnx: bool = True) -> None:
    """A local model file exists and starts like one: an ONNX graph (.onnx) or torch's archive."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except FileNotFoundError:
        raise InputError(path, None, None, "an existing model file", "no such file", reason="missing_file") from None
    except IsADirectoryError:
        raise InputError(path, None, None, "a model file", "a folder", reason="not_a_model") from None
    except OSError as err:  # a name too long, no permission, ...
        raise InputError(path, None, None, "a readable model file", err.strerror or type(err).__name__,
                         reason="unreadable_file") from None  # fmt: skip
    kinds = "model.pt (training, `invfold weights import`)" + (" or model.onnx (`invfold export`)" if onnx else "")
    if path.endswith(".onnx") and onnx:
        # an ONNX ModelProto begins with its ir_version field (tag 0x08)
        if not head.startswith(b"\x08"):
            raise InputError(path, None, None, "an ONNX model", "another kind of file", reason="not_a_model")
        return
    if not head.startswith((ZIP_MAGIC, GZIP_MAGIC)):
        raise InputError(
            path, None, None, f"an invfold model file: {kinds}", "another kind of file", reason="not_a_model"
        )


@dataclass(frozen=True)
class ResolvedModel:
    """A model reference and what it resolved to: what outputs name (FASTA headers, reports), so
    a kept file says `models:/NAME@champion (version 3)`, not the downloaded `model.pt`."""

    path: str  # the local file (or published name) to load
    reference: str | None = None  # an MLflow reference as the user gave it (None: a file or a published name)
    version: str | None = None  # the registered version a models:/ reference resolved to

    @property
    def label(self) -> str | None:
        """`models:/NAME@champion (version 3)`; None for a file (outputs name it by its file name)."""
        if self.reference is None:
            return None
        return f"{self.reference} (version {self.version})" if self.version else self.reference


def resolve_model(text: str, tracking_uri: str | None = None, *, dst: str | None = None) -> str:
    """The local file (or published name) `text` names: an MLflow URI is downloaded into `dst`
    (default: a folder under the system's temp dir, kept for the process's life)."""
    return resolve(text, tracking_uri, dst=dst).path


def resolve(text: str, tracking_uri: str | None = None, *, dst: str | None = None) -> ResolvedModel:
    """resolve_model's file with the reference as given and the registered version it names."""
    text = str(text)
    if not is_mlflow_uri(text):
        return ResolvedModel(text)
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    dst = dst or tempfile.mkdtemp(prefix="invfold-model-")
    models, runs = _MODELS_URI.match(text), _RUNS_URI.match(text)
    if models:
        found, version = fetch_model_uri(
            uri,
            dst,
            model_name=models["name"],
            version=models["version"] or models["alias"],
            checkpoint=REGISTERED_CHECKPOINT,
        )
    elif runs:
        found, version = fetch_model_uri(uri, dst, run_id=runs["run_id"], artifact_path=runs["path"])
    else:
        raise ConfigError(f"{text!r}: expected an MLflow model URI {MLFLOW_FORMS}")
    return ResolvedModel(found, text, version)


def registered_model(text: str, what: str = "MODEL") -> tuple[str, str]:
    """(name, version or alias) of `models:/NAME@ALIAS` or `models:/NAME/VERSION`: what the
    design pipeline's fetch step reads from the registry."""
    found = _MODELS_URI.match(str(text))
    if not found:
        raise ConfigError(f"{what} {text!r}: expected a registered model, models:/NAME@ALIAS or models:/NAME/VERSION")
    return found["name"], found["version"] or found["alias"]
