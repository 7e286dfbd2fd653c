"""Saving and loading a model as one torch file: {"format", "config", "state_dict"}.

Loading uses torch.load(weights_only=True): the file holds only tensors and plain containers,
so a checkpoint from elsewhere cannot run code. Paths may be local or fsspec URIs.
"""

from __future__ import annotations

import io as _io
import os

import torch

from invfold import storage
from invfold.components.model import published
from invfold.components.model.config import ModelConfig
from invfold.components.model.network import InverseFoldingModel
from invfold.errors import InputError, InvfoldError

FORMAT = "invfold.model/1"


def _open(path: str, mode: str):
    fs, inner = storage.filesystem(path)
    return fs.open(inner, mode)


class NonFiniteWeightsError(InvfoldError, ValueError):
    """A model whose weights hold NaN or infinity: it would predict nothing, so it is neither
    written nor loaded."""


def check_finite(state: dict[str, torch.Tensor], source: str) -> None:
    """Raise NonFiniteWeightsError naming the first parameter with a non-finite value."""
    bad = {k: int((~torch.isfinite(v)).sum()) for k, v in state.items() if v.is_floating_point()}
    bad = {k: n for k, n in bad.items() if n}
    if bad:
        first = next(iter(bad))
        raise NonFiniteWeightsError(
            f"{source}: expected finite weights, got NaN or infinity in {len(bad)} tensor(s), first "
            f"'{first}' ({bad[first]} value(s)): the training run diverged; retrain (lower lr, check the data)"
        )


def check_state_matches(cfg: ModelConfig, state, source: str) -> None:
    """The file's tensors are exactly what its config's network holds (names and shapes), judged on
    PyTorch's meta device (no memory): a config that asks for more than the file carries is
    refused before the network is built (a 1.7 KB file declaring hidden=65536)."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(source, None, "state_dict", "a mapping of names to tensors", type(state).__name__,
                         reason="invalid_model")  # fmt: skip
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in InverseFoldingModel(cfg).state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if missing or unexpected or wrong:
        first = (
            f"'{missing[0]}' missing ({len(missing)} in all)"
            if missing
            else f"'{unexpected[0]}' not in the network ({len(unexpected)} in all)"
            if unexpected
            else f"'{wrong[0]}' of shape {tuple(state[wrong[0]].shape)}, the config's network has {expected[wrong[0]]}"
        )
        raise InputError(
            source, None, "state_dict", "the tensors of the network its config describes", first, reason="invalid_model"
        )


def model_payload(model: InverseFoldingModel, provenance: dict | None = None) -> dict:
    """What save_model writes (fp32 CPU tensors), e.g. for embedding in a training checkpoint;
    `provenance` (plain values: where the weights came from) travels along, unread by loading."""
    state = {
        k: v.detach().to("cpu", torch.float32) if v.is_floating_point() else v.detach().cpu()
        for k, v in model.state_dict().items()
    }
    check_finite(state, "model to save")
    payload = {"format": FORMAT, "config": model.cfg.to_dict(), "state_dict": state}
    if provenance:
        payload["provenance"] = dict(provenance)
    return payload


def model_from_payload(payload: dict, source: str = "<memory>") -> InverseFoldingModel:
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise InputError(
            source, None, "format", f"an invfold model file ({FORMAT!r})", repr(found), reason="not_a_model"
        )
    if not isinstance(payload.get("config"), dict):  # a model file holds its network's settings
        got = "none" if "config" not in payload else type(payload["config"]).__name__
        raise InputError(source, None, "config", "the model's config (a mapping)", got, reason="invalid_model")
    try:
        cfg = ModelConfig.from_dict(payload["config"])
    except (TypeError, ValueError) as err:
        raise InputError(source, None, "config", "a valid model config", err, reason="invalid_model") from None
    state = payload.get("state_dict")
    check_state_matches(cfg, state, source)
    check_finite(state, source)
    model = InverseFoldingModel(cfg)
    model.load_state_dict(state)
    model.eval()
    return model


def save_model(path: str | os.PathLike, model: InverseFoldingModel, provenance: dict | None = None) -> None:
    """Write atomically for local paths (temp file + rename)."""
    buffer = _io.BytesIO()
    torch.save(model_payload(model, provenance), buffer)
    path = str(path)
    if "://" not in path or path.startswith("file://"):
        local = path.removeprefix("file://")
        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
        tmp = f"{local}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(buffer.getvalue())
        os.replace(tmp, local)
        return
    with _open(path, "wb") as fh:
        fh.write(buffer.getvalue())


def load_model(path: str | os.PathLike, map_location: str = "cpu") -> InverseFoldingModel:
    """Rebuild the model from its file; eval mode."""
    data = storage.read_bytes(path)  # a missing file is an InputError naming it
    try:
        payload = torch.load(_io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for corrupt / foreign files
        raise InputError(
            path, None, None, "an invfold model file", f"unreadable ({err})", reason="not_a_model"
        ) from None
    return model_from_payload(payload, source=str(path))


def load_model_or_published(spec: str | os.PathLike, map_location: str = "cpu") -> InverseFoldingModel:
    """A model file (path or URI) or a published name such as "proteinmpnn:v_48_020"."""

    if published.is_published_name(str(spec)):
        return published.load_published(str(spec))[0].to(map_location)
    return load_model(spec, map_location=map_location)
