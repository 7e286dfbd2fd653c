"""Checkpoint folders: `<root>/step-XXXXXXXX/` holding the strategy's files, then `COMPLETE`.

Why a marker and not a rename: object storage has no atomic rename, so a folder counts only
once its COMPLETE file (written last, after every rank has finished writing) exists; resume
takes the newest complete folder and ignores the rest. Roots may be local paths or fsspec URIs.

Why weights_only: whoever can write the checkpoint prefix (a bucket, a shared volume) would
otherwise run code in every training pod that resumes from it. Everything we save is tensors and
plain values (RNG states included, see capture_rng), so every load here is
`torch.load(weights_only=True)`; DeepSpeed's own loads run under `safe_loading()`, which forces
the same and allows only the few classes its checkpoints name (DEEPSPEED_SAFE_GLOBALS).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import pickle
import random
import re

import numpy as np
import torch

from invfold import storage
from invfold.errors import ConfigError, InputError

MARKER = "COMPLETE"
STEP_DIR = re.compile(r"^step-(\d{8})$")
log = logging.getLogger(__name__)


def step_dir(root: str, step: int) -> str:
    return f"{root.rstrip('/')}/step-{step:08d}"


def step_of(path: str) -> int:
    match = STEP_DIR.match(path.rstrip("/").rsplit("/", 1)[-1])
    if not match:
        raise InputError(path, None, None, "a checkpoint folder named step-XXXXXXXX", "another name")
    return int(match.group(1))


def complete_steps(root: str) -> list[int]:
    """Steps with a COMPLETE marker, ascending; folders without one are ignored."""
    fs, path = storage.filesystem(root)
    if not fs.exists(path):
        return []
    fs.invalidate_cache(path)
    steps = []
    for entry in fs.ls(path, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        match = STEP_DIR.match(name)
        if match and fs.exists(f"{entry.rstrip('/')}/{MARKER}"):
            steps.append(int(match.group(1)))
    return sorted(steps)


def latest_complete(root: str) -> str | None:
    steps = complete_steps(root)
    return step_dir(root, steps[-1]) if steps else None


def write_bytes(uri: str, data: bytes) -> None:
    """Local: temp file + rename (never a torn file); remote: one PUT."""
    if not storage.is_remote(uri):
        local = uri.removeprefix("file://")
        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
        tmp = f"{local}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, local)
        return
    fs, path = storage.filesystem(uri)
    with fs.open(path, "wb") as fh:
        fh.write(data)


def save_torch(obj, uri: str) -> None:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes(uri, buffer.getvalue())


def load_bytes(uri: str) -> bytes:
    fs, path = storage.filesystem(uri)
    with fs.open(path, "rb") as fh:
        return fh.read()


def unsafe_checkpoint(uri: str, err: Exception) -> InputError:
    """The error for a checkpoint file that needs more than tensors and plain values to load."""
    named = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
    if named:
        detail = f"a pickle that calls or builds {named.group(1)}"
    else:
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    return InputError(
        uri,
        None,
        None,
        "a checkpoint of tensors and plain values (loaded with weights_only=True; nothing in it was run)",
        detail[:300],
        reason="unsafe_checkpoint",
    )


def load_torch(uri: str):
    """A checkpoint file loaded with weights_only=True: a file that names any other class or
    function is refused (InputError naming it) before anything in it runs."""
    try:
        return torch.load(io.BytesIO(load_bytes(uri)), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise unsafe_checkpoint(uri, err) from None


def _deepspeed_safe_globals() -> list:
    """What DeepSpeed 0.19.8's checkpoints name besides tensors and plain values, found with
    torch.serialization.get_unsafe_globals_in_checkpoint on our ZeRO 0 (none), 1, 2 (bf16) and 3
    saves: the ZeRO stage enum, the static loss scaler (a float and a flag) and a fragment
    address (two ints). Each is a plain data holder: allowing it runs none of its code beyond
    building the object from its saved fields."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [ZeroStageEnum, LossScaler, fragment_address]


# torch.load's switches: ours forces weights_only; the other (set in a user's environment) would
# make torch refuse every load that has both set (RuntimeError), so it is set aside meanwhile
FORCE_WEIGHTS_ONLY, FORCE_NO_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


@contextlib.contextmanager
def safe_loading(where: str):
    """Every torch.load inside (DeepSpeed's loaders pass weights_only=False) runs as
    weights_only=True with only DEEPSPEED_SAFE_GLOBALS allowed, whatever the environment asks
    (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 is set aside: loading code is never the user's choice
    here, see SECURITY.md); a refusal names `where`."""
    saved = {name: os.environ.pop(name, None) for name in (FORCE_WEIGHTS_ONLY, FORCE_NO_WEIGHTS_ONLY)}
    os.environ[FORCE_WEIGHTS_ONLY] = "1"
    try:
        with torch.serialization.safe_globals(_deepspeed_safe_globals()):
            yield
    except pickle.UnpicklingError as err:
        raise unsafe_checkpoint(where, err) from None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def mark_complete(directory: str, info: dict) -> None:
    write_bytes(f"{directory}/{MARKER}", (json.dumps(info, sort_keys=True) + "\n").encode())


def read_marker(directory: str) -> dict:
    """The COMPLETE marker's record (step, strategy, world size, settings). An empty or damaged
    marker is refused naming it: nothing says what wrote the folder or under which settings."""
    uri = f"{directory}/{MARKER}"
    data = load_bytes(uri)
    expected = (
        "the JSON object invfold writes last into a finished checkpoint (remove this folder to "
        "resume from an earlier checkpoint, or start fresh with a new --checkpoint-dir)"
    )
    try:
        marker = json.loads(data) if data.strip() else None
    except (ValueError, RecursionError) as err:  # invalid JSON or UTF-8
        detail = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise InputError(uri, None, None, expected, f"invalid JSON ({detail})", reason="invalid_checkpoint") from None
    if not isinstance(marker, dict):
        got = "an empty file" if marker is None else f"a JSON {type(marker).__name__}"
        raise InputError(uri, None, None, expected, got, reason="invalid_checkpoint")
    return marker


def check_resumable(directory: str, marker: dict, settings: dict) -> None:
    """Refuse to resume a checkpoint written under other settings (data, model, learning rate,
    seed, ...): the run would silently continue someone else's trajectory and report its own
    settings. The error names each differing field and how to start fresh."""
    recorded = marker.get("settings")
    if recorded is None:
        differ = ["(none recorded: written by an older invfold)"]
    else:
        differ = []
        for name in sorted(set(recorded) | set(settings)):
            old, new = recorded.get(name, "<absent>"), settings.get(name, "<absent>")
            if name == "model" and isinstance(old, dict) and isinstance(new, dict):
                differ += [
                    f"model.{k} {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
                    for k in sorted(set(old) | set(new))
                    if old.get(k, "<absent>") != new.get(k, "<absent>")
                ]
            elif old != new:
                differ.append(f"{name} {old!r} -> {new!r}")
    if differ:
        raise ConfigError(
            f"{directory}: this checkpoint was written under other settings ({'; '.join(differ)}); "
            "resume with the settings it was written with, or start fresh with a new --checkpoint-dir "
            "(or --out) or after removing its checkpoints"
        )


def check_world_size(directory: str, saved: int | None, world_size: int) -> None:
    """Refuse to resume a checkpoint written by another number of processes: each rank's share of
    every epoch (the sampler's sharding), its place in it and its random streams belong to the
    process count that wrote them (and ZeRO partitions the optimizer by it), so exact resume holds
    only with the same count. The error names both counts and how to start fresh."""
    if saved is not None and saved != world_size:
        raise ConfigError(
            f"{directory}: written by {saved} training processes, resuming with {world_size}; resume with "
            f"{saved} (--nproc {saved} on one node), or start fresh with a new --checkpoint-dir (or --out) "
            "or after removing its checkpoints"
        )


def prune(root: str, keep: int) -> list[int]:
    """Delete all but the newest `keep` complete checkpoints (and incomplete ones older than
    the newest complete one: leftovers of interrupted saves). Returns the deleted steps."""
    steps = complete_steps(root)
    if not steps:
        return []
    newest = steps[-1]
    fs, path = storage.filesystem(root)
    deleted = []
    for entry in fs.ls(path, detail=False):
        match = STEP_DIR.match(entry.rstrip("/").rsplit("/", 1)[-1])
        if not match:
            continue
        step = int(match.group(1))
        if (step in steps[:-keep]) or (step not in steps and step < newest):
            fs.rm(entry, recursive=True)
            # s3fs deletes a folder with DeleteObjects and drops the answer's per-key errors
            # (AccessDenied among them): only a second look tells a refused delete.
            fs.invalidate_cache(entry)
            if fs.exists(entry):
                raise PermissionError(f"{entry} is still there after its delete (the store refused it)")
            deleted.append(step)
    return sorted(deleted)


class Pruner:
    """`prune` after each save, until the store refuses a delete: then one warning, and from then on
    every checkpoint is kept (training goes on; the run's summary says so: `refused`).

    Why: the keys KFP 2.16's profile controller mints for a namespace may put, get and list under
    mlpipeline/private/<ns>/ but not delete (kubeflow/pipelines 2.16.0
    manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py: s3:Put*,
    s3:Get*, s3:List*; 2.17.0 adds s3:DeleteObject), so the first prune is refused: s3fs raises
    AccessDenied as PermissionError, or (DeleteObjects' per-key errors) `prune` finds the folder
    still there and raises it."""

    def __init__(self, root: str, keep: int):
        self.root, self.keep = root, keep
        self.refused: str | None = None

    def __call__(self) -> list[int]:
        if self.refused:
            return []
        try:
            return prune(self.root, self.keep)
        except PermissionError as err:
            self.refused = (
                f"the store refused to delete an old checkpoint under {storage.display_uri(self.root)} "
                f"({' '.join(str(err).split())[:200]}): checkpoints are no longer pruned in this run; "
                "give the credentials delete rights (KFP 2.17's profile keys have s3:DeleteObject) or remove old "
                "step-* folders yourself"
            )
            log.warning("%s", self.refused)
            return []


def capture_rng() -> dict:
    """This process's RNG states as tensors and plain values (weights_only material): Python's
    Mersenne Twister words and numpy's key array become int64 tensors."""
    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": {"version": version, "words": torch.tensor(words, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    py, npy = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(int(w) for w in py["words"].tolist()), py["gauss"]))
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
