"""onnxruntime sessions and the model's ONNX input/output contract, shared by export, design
and the benchmark so all three run the graph the same way."""

from __future__ import annotations

import base64
import json
import os

import numpy as np

from invfold.components.model.config import ModelConfig
from invfold.errors import InputError

# ONNX metadata_props keys written by export (what design needs to drive the graph).
META_CONFIG = "invfold.model_config"
META_ALPHABET = "invfold.alphabet"
# an autoregressive model's graphs of incremental decoding: JSON {"encoder", "step", "update"}
# -> base64 ONNX (onnx_export.decoding_graphs), so one file still holds the whole model
META_DECODING = "invfold.decoding_graphs"
ENCODER_OUTPUTS = ("h_enc", "E_idx", "nb_mask", "e_proj", "enc_proj")
STEP_INPUTS = ("h", "e_rows", "nb_proj", "nb_mask", "mask")
INPUT_NAMES = ("X", "S", "mask", "residue_index", "decoding_order")
OUTPUT_NAMES = ("logits",)
# name -> (dtype, shape); B and L are dynamic.
CONTRACT = {
    "X": ("float32", ["B", "L", 4, 3], "backbone N, CA, C, O coordinates in Angstrom; 0 where unobserved"),
    "S": (
        "int64",
        ["B", "L"],
        "sequence as indices into ALPHABET (ACDEFGHIKLMNPQRSTVWY); read only by "
        "autoregressive models, and only at positions decoded earlier",
    ),
    "mask": ("float32", ["B", "L"], "1 = observed residue (all four backbone atoms), 0 = unobserved or padding"),
    "residue_index": (
        "int64",
        ["B", "L"],
        "residue numbering; a jump > 1 is a chain break; padding continues the numbering far away (+1000)",
    ),
    "decoding_order": (
        "float32",
        ["B", "L"],
        "residue j is visible to residue i iff order[j] < order[i] "
        "(argsort ascending = decoding order); ignored by one-shot models",
    ),
    "logits": ("float32", ["B", "L", 20], "unnormalized log-probabilities over ALPHABET"),
}


def session(path: str | os.PathLike, threads: int | None = None):
    """A CPU session with all graph optimizations, `threads` intra-op threads (default: the
    OMP_NUM_THREADS setting, else onnxruntime's choice) and sequential execution."""
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(path), sess_options=_options(threads), providers=["CPUExecutionProvider"])
    except (
        ort.capi.onnxruntime_pybind11_state.Fail,
        ort.capi.onnxruntime_pybind11_state.InvalidProtobuf,
        ort.capi.onnxruntime_pybind11_state.NoSuchFile,
        ort.capi.onnxruntime_pybind11_state.InvalidGraph,
    ) as err:
        # a truncated or foreign file: onnxruntime's message is several lines of its own source
        detail = str(err).splitlines()[0][-160:] if str(err) else type(err).__name__
        raise InputError(path, None, None, "an ONNX model written by invfold export", f"unreadable ({detail})",
                         reason="not_a_model") from None  # fmt: skip


def _options(threads: int | None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        threads = int(os.environ["OMP_NUM_THREADS"])
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def feeds(X, S, mask, residue_index, decoding_order) -> dict[str, np.ndarray]:
    """Numpy inputs in the contract's dtypes from tensors or arrays."""

    def arr(value, dtype):
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        return np.ascontiguousarray(value, dtype=dtype)

    return {
        "X": arr(X, np.float32),
        "S": arr(S, np.int64),
        "mask": arr(mask, np.float32),
        "residue_index": arr(residue_index, np.int64),
        "decoding_order": arr(decoding_order, np.float32),
    }


def encoder_feeds(X, mask, residue_index) -> dict[str, np.ndarray]:
    """Inputs of the embedded encoder graph (decoding_sessions) in the contract's dtypes."""
    full = feeds(X, residue_index, mask, residue_index, mask)
    return {name: full[name] for name in ("X", "mask", "residue_index")}


def model_config_of(sess):
    """The ModelConfig stored in an exported graph's metadata."""

    props = sess.get_modelmeta().custom_metadata_map
    if META_CONFIG not in props:
        raise InputError(
            "the ONNX model",
            None,
            f"metadata {META_CONFIG!r}",
            "a model written by invfold export",
            "none",
            reason="not_a_model",
        )
    return ModelConfig.from_dict(json.loads(props[META_CONFIG]))


def decoding_sessions(sess, threads: int | None = None) -> dict | None:
    """{"encoder", "step", "update"} sessions of the graphs an autoregressive export embeds
    (None for a file without them: one-shot models, or files written before they existed)."""
    import onnxruntime as ort

    props = sess.get_modelmeta().custom_metadata_map
    if META_DECODING not in props:
        return None
    options = _options(threads)
    # These run once per decoding step with torch's gathers in between: idle workers that spin
    # take the cores those gathers need (bench/design_bench.py: 0.62x PyTorch at 100 residues
    # with spinning, see bench/README.md for the figure without).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    graphs = json.loads(props[META_DECODING])
    return {
        name: ort.InferenceSession(base64.b64decode(data), sess_options=options, providers=["CPUExecutionProvider"])
        for name, data in graphs.items()
    }
