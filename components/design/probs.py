"""Per-position probabilities as ProteinMPNN's `protein_mpnn_run.py` writes them (npz, its layout).

Modes (upstream flag): "unconditional" (--unconditional_probs_only: log p(s_i | backbone), one
pass, no neighbour's letter read); "conditional" (--conditional_probs_only: log p(s_i | backbone,
every other letter): position i decoded last, the others in a random order); "conditional-backbone"
(--conditional_probs_only_backbone 1: position i decoded first). Upstream's order for position i is
argsort((onehot_i + 1e-4) * |randn|) (i last) or with 1 - onehot_i (i first); here the same
values are the decoding order (visibility order_j < order_i, as argsort's ranks).

The file holds what upstream's does: log_p [B, L, 21] (B copies, each its own random order;
rows of positions not computed are 0 in conditional modes), S [L] (indices into
ACDEFGHIKLMNPQRSTVWYX), mask [L] (backbone observed), design_mask [L] (designed and observed), in
upstream's residue order: designed chains sorted by label, then the others sorted. The 21st
letter X gets a fixed logit of -1e4 before the softmax (our read-out has no X; the same number
`invfold export --format proteinmpnn` writes), so the 20 letters carry all the mass; chain_order
(the chains in that order) is added.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from invfold.components.design.config import PROB_MODES
from invfold.components.design.positions import chain_positions
from invfold.components.model.published import X_LOGIT_BIAS
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord
from invfold.errors import ConfigError

POSITIONS_PER_RUN = 16  # conditional modes: positions (one decoding order each) per model run


def upstream_order(record: ChainRecord, designed: list[str]) -> tuple[np.ndarray, list[str]]:
    """(perm [L]: upstream position p holds our residue perm[p], the chains in that order)."""
    chains = chain_positions(record)
    order = sorted(c for c in chains if c in designed) + sorted(c for c in chains if c not in designed)
    return np.concatenate([chains[c] for c in order]), order


def with_x(logits: torch.Tensor) -> torch.Tensor:
    """[..., 20] logits -> [..., 21] log-probabilities over ACDEFGHIKLMNPQRSTVWYX."""
    x = torch.full((*logits.shape[:-1], 1), X_LOGIT_BIAS, dtype=logits.dtype)
    return torch.log_softmax(torch.cat([logits, x], dim=-1), dim=-1)


def log_probabilities(backend, record: ChainRecord, mode: str, design: torch.Tensor, noise: torch.Tensor):
    """log_p [L, 21] in the record's order for one copy. design [L] bool: positions computed in
    conditional modes; noise [L]: upstream's randn for this copy (only its magnitude is used)."""
    one = collate([record])
    length = len(record)
    if mode == "unconditional":
        return with_x(backend.logits(one, one.tokens, torch.zeros(1, length)).float()[0])
    out = torch.zeros(length, 21)
    todo = torch.nonzero(design & (one.structure_mask[0] > 0)).flatten().tolist()
    for start in range(0, len(todo), POSITIONS_PER_RUN):
        chunk = todo[start : start + POSITIONS_PER_RUN]
        onehot = torch.zeros(len(chunk), length)
        onehot[torch.arange(len(chunk)), torch.tensor(chunk)] = 1.0
        flag = onehot if mode == "conditional" else 1.0 - onehot
        order = (flag + 1e-4) * noise.abs()[None]
        b = collate([record] * len(chunk))
        logp = with_x(backend.logits(b, b.tokens, order).float())
        out[chunk] = logp[torch.arange(len(chunk)), torch.tensor(chunk)]
    return out


def probabilities(backend, record: ChainRecord, mode: str, designed: list[str], copies: int, seed: int) -> dict:
    """upstream's npz contents for `copies` random orders (noise of copy k: seed + k)."""
    chains = chain_positions(record)
    design = torch.zeros(len(record), dtype=torch.bool)
    for c in designed:
        design[torch.from_numpy(np.asarray(chains[c]))] = True
    if mode not in PROB_MODES:
        raise ConfigError(f"probabilities: mode: expected one of {PROB_MODES}, got {mode!r}")
    copies = 1 if mode == "unconditional" else copies
    rows = []
    for k in range(copies):
        noise = torch.randn(len(record), generator=torch.Generator().manual_seed(seed + k))
        rows.append(log_probabilities(backend, record, mode, design, noise))
    perm, order = upstream_order(record, designed)
    one = collate([record])
    observed = (one.structure_mask[0] > 0).numpy().astype(np.float32)
    return {
        "log_p": torch.stack(rows).numpy()[:, perm].astype(np.float32),
        "S": one.tokens[0].numpy()[perm].astype(np.int64),
        "mask": observed[perm],
        "design_mask": (observed * design.numpy())[perm].astype(np.float32),
        "chain_order": np.array(order),
    }


def design_probs_arrays(record: ChainRecord, designs: list) -> dict:
    """What protein_mpnn_run.py --save_probs 1 writes (probs/<name>.npz) for one record's designs
    (design.Design, each with probs, log_probs and tokens), in upstream's residue order (designed
    chains sorted, then the others sorted): probs [N, L, 21] (the distribution each designed letter
    was drawn from, T, biases and omitted letters included; 0 at positions not designed and in the
    X column), log_probs [N, L, 21] (log p at T = 1, teacher-forced in the sample's decoding order;
    X fixed at -1e4, see with_x), S [N, L] int32 (the designs: designed letters, native tokens
    elsewhere), mask [1, L] (designed positions, upstream's mask_for_loss of its one batch copy),
    chain_order [1, chains]; beside upstream's keys, decoding_order [N, L] (positions in upstream's
    order, listed in the order decoded; absent for a one-shot model)."""
    chains = chain_positions(record)
    designed = list(designs[0].designed_chains) or list(chains)
    perm, order = upstream_order(record, designed)
    where = np.empty(len(perm), dtype=np.int64)
    where[perm] = np.arange(len(perm))  # our residue r is upstream position where[r]
    probs = np.stack([d.probs for d in designs])[:, perm]
    zero_x = np.zeros((*probs.shape[:-1], 1), dtype=np.float32)
    log_probs = with_x(torch.from_numpy(np.stack([d.log_probs for d in designs]))).numpy()[:, perm]
    designed_rows = (probs.sum(-1) > 0)[0]
    arrays = {
        "probs": np.concatenate([probs, zero_x], axis=-1).astype(np.float32),
        "log_probs": log_probs.astype(np.float32),
        "S": np.stack([d.tokens for d in designs])[:, perm].astype(np.int32),
        "mask": designed_rows.astype(np.float32)[None],
        "chain_order": np.array([order]),
    }
    if designs[0].decoding_order is not None:
        arrays["decoding_order"] = np.stack([where[d.decoding_order] for d in designs]).astype(np.int64)
    return arrays


def probs_path(out: str | os.PathLike) -> Path:
    """Where `invfold score --probs` and `invfold design --save-probs` write: <out stem>.probs.npz
    beside the CSV or FASTA."""
    out = Path(out)
    return out.with_name(out.stem + ".probs.npz")


def write_probs(path: str | os.PathLike, arrays: dict) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        np.savez(f, **arrays)
    return out
