"""What `invfold run` expects to take, printed before it starts: each step's time from the size of
the data (chains and residues, and those of the validation and test splits) and the training
budget.

Each step is a fixed part (its process, imports, MLflow) plus seconds per residue of what it
reads, from two `invfold run`s of the default recipe (`small` preset, 2 ddp processes) on our
2-core machine: `make run` on the bundled sample (300 chains, 61,760 residues; validation 4,536,
test 6,075; 180 s budget, quiet machine, 2026-11-26 at 8a6fb92, README "Using it"), and `invfold
run --time-budget-s 60` on the real shared set (833 chains, 166,878 residues; validation 17,049,
test 13,387; `/usr/bin/time -v`). Step times (sample, real): fingerprint 4.0, 5.4 s;
prep 1.0, 2.1 s; evaluate 9.8, 13.1 s; compare 4.7, 5.1 s; export-and-register 24.5, 27.4 s;
finish-tracking 2.8, 3.1 s; before the first step (the CLI, KFP's local runner) about 4 s. A
larger preset or a fine-tuned ProteinMPNN evaluates more slowly than this says.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass

from invfold.components.prep.config import PrepConfig

# step: (fixed seconds, seconds per residue, which residues: all | validation | test | none)
STEP_RATES = {
    "start-up": (4.0, 0.0, "none"),
    "fingerprint": (3.18, 1.33e-5, "all"),
    "prep": (0.35, 1.05e-5, "all"),
    "train": (0.0, 0.0, "none"),  # the time budget
    "evaluate": (7.06, 4.51e-4, "test"),
    "compare": (4.55, 3.2e-5, "validation"),
    "export-and-register": (27.4, 0.0, "none"),  # the larger of the two runs: no data dependence seen
    "finish-tracking": (3.1, 0.0, "none"),
}
# train, validation, test: the split prep makes when no split file is given
DEFAULT_FRACTIONS = next(f.default for f in dataclasses.fields(PrepConfig) if f.name == "split_fractions")

_SEQ = re.compile(rb'"seq"\s*:\s*"([^"]*)"')
_NAME = re.compile(rb'"name"\s*:\s*"([^"]*)"')


@dataclass
class DataSize:
    chains: int
    residues: int
    validation_residues: int
    test_residues: int


def chain_set_size(path: str, split_file: str | None = None, fractions=DEFAULT_FRACTIONS) -> DataSize | None:
    """Chains and residues of a local chain-set file (.jsonl or .jsonl.gz), and of the validation
    and test chains the split file names (else the default fractions); None for anything else
    (a URI, a folder, an unreadable file): the estimate then leaves the data out."""
    if "://" in path or not os.path.isfile(path):
        return None
    lengths: dict[str, int] = {}
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:
            for number, line in enumerate(fh):
                seq, name = _SEQ.search(line), _NAME.search(line)
                if seq:
                    lengths[name.group(1).decode() if name else str(number)] = len(seq.group(1))
    except (OSError, EOFError, UnicodeDecodeError, zlib.error):
        return None  # prep reports the broken file with its reason; the estimate leaves the data out
    if not lengths:
        return None
    total = sum(lengths.values())
    validation, test = total * fractions[1], total * fractions[2]
    if split_file and os.path.isfile(split_file):
        try:
            with open(split_file) as fh:
                split = json.load(fh)
            validation = sum(lengths.get(n, 0) for n in split.get("validation", []))
            test = sum(lengths.get(n, 0) for n in split.get("test", []))
        except (OSError, ValueError, AttributeError, TypeError, RecursionError):
            pass  # prep reports a bad split file with its line; the estimate keeps the fractions
    return DataSize(len(lengths), total, int(validation), int(test))


def step_seconds(size: DataSize | None, time_budget_s: float) -> dict[str, float | None]:
    """Each step's expected seconds; None where it cannot be told (no data size; training with
    no time budget)."""
    out: dict[str, float | None] = {}
    for step, (fixed, per_residue, reads) in STEP_RATES.items():
        if step == "train":
            out[step] = float(time_budget_s) if time_budget_s > 0 else None
        elif reads == "none":
            out[step] = fixed
        elif size is None:
            out[step] = None
        else:
            residues = {"all": size.residues, "validation": size.validation_residues, "test": size.test_residues}
            out[step] = fixed + per_residue * residues[reads]
    return out


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def estimate_line(size: DataSize | None, time_budget_s: float, max_steps: int = 0) -> str:
    """One line: the whole run's expected time and each step's."""
    seconds = step_seconds(size, time_budget_s)
    known = sum(v for v in seconds.values() if v is not None)
    unknown = [k for k, v in seconds.items() if v is None]
    data = f"{size.chains:,} chains, {size.residues:,} residues" if size else "data size unknown"
    total = f"about {_duration(known)}" + (f" plus {', '.join(unknown)}" if unknown else "")
    train = (
        f"train {_duration(time_budget_s)} (its budget)"
        if time_budget_s > 0
        else f"train {max_steps or '?'} steps (no time budget: not estimated)"
    )
    parts = [train if k == "train" else f"{k} {'?' if v is None else _duration(v)}" for k, v in seconds.items()]
    return f"estimate: {total} ({data}): " + ", ".join(parts)


# The design pipeline (`invfold run --pipeline design`): each step's seconds, and the shards'
# (2 run side by side) as a fixed part plus seconds per designed residue (residues x sequences x
# temperatures, each design scored over the default 4 orders). From two runs with a `small`
# model (what `invfold run` trains; one-shot), the pipeline's defaults (4 shards, T 0.1, 4
# sequences) on the first 10 and 40 chains of the bundled sample (2,049 and 9,197 residues) on
# our 2-core machine at load 8-11 (2026-11-28): fetch-model 23.7, 22.4 s; plan-shards 10.2,
# 6.0 s; the shards 61, 111 s; gather-designs 23.9, 23.3 s; finish-tracking 19.0, 13.1 s; wall
# 139, 176 s. A quiet machine is faster; an autoregressive model (proteinmpnn) designs slower.
DESIGN_STEP_SECONDS = {
    "start-up": 3.0,
    "fetch-model": 23.0,
    "plan-shards": 8.0,
    "design-shard": None,  # DESIGN_SHARD_RATE
    "gather-designs": 24.0,
    "finish-tracking": 16.0,
}
DESIGN_SHARD_RATE = (46.7, 1.75e-3)  # all shards: fixed seconds, seconds per designed residue


def design_step_seconds(size: DataSize | None, designs_per_residue: int) -> dict[str, float | None]:
    """The design pipeline's steps' expected seconds; the shards' None without a data size."""
    fixed, rate = DESIGN_SHARD_RATE
    shards = fixed + rate * size.residues * designs_per_residue if size else None
    return {step: shards if step == "design-shard" else s for step, s in DESIGN_STEP_SECONDS.items()}


def design_estimate_line(size: DataSize | None, designs_per_residue: int) -> str:
    """One line: the design pipeline's expected time and each step's (`designs_per_residue`:
    sequences x temperatures)."""
    seconds = design_step_seconds(size, designs_per_residue)
    known = sum(v for v in seconds.values() if v is not None)
    data = f"{size.chains:,} chains, {size.residues:,} residues" if size else "data size unknown"
    total = f"about {_duration(known)}" + ("" if size else " plus design-shard")
    parts = [f"{k} {'?' if v is None else _duration(v)}" for k, v in seconds.items()]
    return f"estimate: {total} ({data}): " + ", ".join(parts)
