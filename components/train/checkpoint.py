"""Checkpoint folders: `<root>/step-XXXXXXXX/` holding the strategy's files, then `COMPLETE`.

Why a marker and not a rename: object storage has no atomic rename, so a folder counts only
once its COMPLETE file (written last, after every rank has finished writing) exists; resume
takes the newest complete folder and ignores the rest. Roots may be local paths or fsspec URIs.
"""

from __future__ import annotations

import io
import json
import os
import random
import re

import numpy as np
import torch

from invfold import storage
from invfold.errors import InputError

MARKER = "COMPLETE"
STEP_DIR = re.compile(r"^step-(\d{8})$")


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


def load_torch(uri: str):
    """Our own checkpoints hold optimizer state and RNG tuples: not weights_only material."""
    return torch.load(io.BytesIO(load_bytes(uri)), map_location="cpu", weights_only=False)


def mark_complete(directory: str, info: dict) -> None:
    write_bytes(f"{directory}/{MARKER}", (json.dumps(info, sort_keys=True) + "\n").encode())


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
            deleted.append(step)
    return sorted(deleted)


def capture_rng() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
