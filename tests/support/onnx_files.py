"""ONNX files of test models through a cache keyed by everything the file depends on.

`write_onnx` of a tiny model takes 15-60 s here (torch.export, the dynamo translation and, for an
autoregressive model, three more decoding graphs), and the design, score and reference tests
export eight such models whose files are inputs to them, not what they test. The key covers the
model's config and weights, the opset, the source of the packages that shape the graph
(components/export, components/model, components/protein) and the versions of torch, onnx,
onnxscript and onnxruntime, so any change there exports afresh. Tests of the exporter itself
call `write_onnx` directly. The cache lives beside prep's, under INVFOLD_CACHE_DIR."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from importlib.metadata import version
from pathlib import Path

import torch

from invfold.components.export import write_onnx
from tests.support.paths import CACHE_ROOT, REPO

_SOURCES = ("components/export", "components/model", "components/protein")
_PACKAGES = ("torch", "onnx", "onnxscript", "onnxruntime")


def _key(model, opset: int | None) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(model.cfg.to_dict(), sort_keys=True).encode())
    h.update(f"opset={opset}".encode())
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    for package in _PACKAGES:
        h.update(f"{package}=={version(package)}".encode())
    for folder in _SOURCES:
        for source in sorted((REPO / folder).rglob("*.py")):
            h.update(str(source.relative_to(REPO)).encode())
            h.update(source.read_bytes())
    return h.hexdigest()[:32]


def onnx_file(model, out_path: str | os.PathLike, opset: int | None = None) -> Path:
    """`write_onnx(model, out_path, opset)`, served from the cache when the same inputs were
    exported before (by this run or an earlier one on this machine)."""
    out_path = Path(out_path)
    cached = CACHE_ROOT / "test-onnx" / f"{_key(model, opset)}.onnx"
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.partial")
        write_onnx(model, partial, opset)
        os.replace(partial, cached)
    shutil.copyfile(cached, out_path)
    return out_path


def identity_onnx(path) -> dict:
    """A one-node ONNX graph (y = x) and an input for it: enough for the registry's records."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return {"x": np.ones((1, 3), dtype=np.float32)}
