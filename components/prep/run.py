"""The prep step: validate -> normalize -> filter -> split -> write shards -> card.

Records stream from the reader through the checks straight into per-dataset Arrow writers, so
memory follows the record-batch size, not the input. With a split file, one pass. Without one,
a first pass keeps only names, sequences and labels of the chains that pass the checks (about
1/50 of the input), decides the split, and a second pass streams the records; both passes apply
the same checks, so they keep the same chains.

Policy for what is dropped (every drop counted by reason in the card):
- input defects: what the reader skips (see protein/errors.py), `duplicate_name` (a name seen
  before; the first occurrence wins), `invalid_letters` (a sequence character that is not an
  upper-case letter), `no_observed_residue`, implausible geometry (`implausible_coordinates`,
  `implausible_bond_length`, `implausible_ca_distance`, `overlapping_atoms`: protein/geometry.py;
  one such chain makes every training loss NaN); and split/subset names absent from the set (counted
  per split, warned). `strict=True` makes each of these an InputError.
- filters (choices of what to train on, never errors): `unknown_letters` (outside the alphabet and
  not X, the unknown residue that readers write for UNK and numbering gaps: with a backbone it
  stays in the model's graph as structural context, its letter out of the loss: protein/batch.py),
  `too_long`, `too_short`, `low_observed_fraction`, `not_in_split_file`, `split_conflict` (a
  complex whose chains a split file names in different splits).
Complexes (complexes=True): one record per entry, its length the whole complex's; a split file's
chain names ("1abc.A") place the complex "1abc". Prep's own split keeps the chains of one entry in
one split either way (split.merge_entries).
Counts always reconcile: read = kept + reader skips + filter drops (asserted, and in the card).
"""

from __future__ import annotations

import ctypes
import errno
import glob
import json
import logging
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from invfold import storage
from invfold.components.prep import split as splitting
from invfold.components.prep.card import CARD_JSON, CARD_MD, CompositionStats, write_card
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.shards import (
    DATASET_NAME,
    FORMAT,
    INDEX_FILE,
    MAX_CARD_BYTES,
    DatasetWriter,
    check_card,
    content_digest,
    dataset_file,
    load_index,
    open_prepared,
)
from invfold.components.protein.alphabet import UNKNOWN
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.geometry import check_backbone
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.splits import SPLIT_NAMES, read_split_file
from invfold.errors import ConfigError

log = logging.getLogger(__name__)

STRICT_REASONS = (
    "duplicate_name",
    "invalid_letters",
    "no_observed_residue",
    "implausible_coordinates",
    "implausible_bond_length",
    "implausible_ca_distance",
    "overlapping_atoms",
)
INVALID_LETTER = re.compile(r"[^A-Z]")


@dataclass
class PrepResult:
    output: str
    digest: str
    counts: dict
    datasets: dict[str, int]
    card: dict
    seconds: float


class _Screen:
    """Validates, normalizes and filters one pass of records, counting everything it drops."""

    def __init__(self, cfg: PrepConfig):
        self.cfg = cfg
        # X (an unknown residue or a numbering gap) keeps its place in the chain: structural context where
        # it has a backbone, never a training target (protein/batch.py)
        self.unknown_letter = re.compile(f"[^{re.escape(cfg.alphabet + UNKNOWN)}]")
        self.read = 0
        self.reader_skips: Counter = Counter()
        self.filtered: Counter = Counter()
        self.examples: dict[str, str] = {}
        self.names: set[str] = set()
        self.members: set[str] = set()  # "<entry>.<chain>" names of kept-or-dropped complexes' chains

    def check(self, item: ChainRecord | Skip) -> ChainRecord | None:
        self.read += 1
        if isinstance(item, Skip):
            self.reader_skips[item.reason] += 1
            self.examples.setdefault(item.reason, item.message)
            if item.name:
                self.names.add(item.name)
            return None
        record = item
        if record.name in self.names:
            return self.drop(record, "duplicate_name", "name", "a name not used by an earlier record", "a repeat")
        self.names.add(record.name)
        self.members.update(f"{record.name}.{c}" for c in record.chain_names)
        bad = INVALID_LETTER.search(record.seq)
        if bad:
            return self.drop(
                record,
                "invalid_letters",
                "seq",
                "upper-case residue letters",
                f"{bad.group()!r} at residue {bad.start()}",
            )
        bad = self.unknown_letter.search(record.seq)
        if bad:
            return self.drop(
                record,
                "unknown_letters",
                "seq",
                f"letters of {self.cfg.alphabet} or {UNKNOWN}",
                f"{bad.group()!r} at residue {bad.start()}",
            )
        length = len(record.seq)
        if length > self.cfg.max_length:
            return self.drop(record, "too_long", "seq", f"at most {self.cfg.max_length} residues", length)
        if length < self.cfg.min_length:
            return self.drop(record, "too_short", "seq", f"at least {self.cfg.min_length} residues", length)
        observed = int(np.count_nonzero(record.mask))
        if observed == 0:
            return self.drop(record, "no_observed_residue", "coords", "at least one residue with N, CA, C, O", "none")
        if observed < self.cfg.min_observed_fraction * length:
            return self.drop(
                record,
                "low_observed_fraction",
                "coords",
                f"at least {self.cfg.min_observed_fraction:g} of residues observed",
                f"{observed}/{length}",
            )
        implausible = check_backbone(record.coords, record.mask, record.residue_index)
        if implausible:
            return self.drop(record, implausible.reason, implausible.field, implausible.expected, implausible.got)
        return record

    def drop(self, record: ChainRecord, reason: str, field: str, expected: str, got) -> None:
        if self.cfg.strict and reason in STRICT_REASONS:
            raise InputError(
                record.source or self.cfg.input,
                f"record '{record.name}'",
                field,
                expected,
                got,
                reason=reason,
                name=record.name,
            )
        self.filtered[reason] += 1
        self.examples.setdefault(
            reason, f"{record.source or record.name}: {reason} ({field}: expected {expected}, got {got})"
        )
        return None

    @property
    def skipped(self) -> int:
        return sum(self.reader_skips.values()) + sum(self.filtered.values())


def _progress_enabled() -> bool:
    return sys.stderr.isatty() and os.environ.get("INVFOLD_NO_PROGRESS") != "1"


def _with_progress(items: Iterable, label: str, log_every: int) -> Iterator:
    """Yields items unchanged, showing a transient count on stderr (a TTY only) and logging a line
    every `log_every` items."""
    start = time.monotonic()
    progress = None
    if _progress_enabled():
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.completed} records"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        progress.start()
        task = progress.add_task(label)
    n = 0
    try:
        for n, item in enumerate(items, 1):
            yield item
            if progress is not None and n % 64 == 0:
                progress.update(task, completed=n)
            if n % log_every == 0:
                log.info("%s: %d records (%.0f/s)", label, n, n / max(time.monotonic() - start, 1e-9))
    finally:
        if progress is not None:
            progress.stop()
    log.info("%s: %d records in %.1f s", label, n, time.monotonic() - start)


def _read_splits(cfg: PrepConfig) -> tuple[dict[str, list[str]] | None, dict[str, list[str]]]:
    splits = None
    if cfg.split_file:
        parsed = read_split_file(cfg.split_file, cfg.read_limits())
        if not parsed.splits:
            raise InputError(
                cfg.split_file,
                None,
                None,
                "a split file with train / validation / test lists",
                "a subset file (only a 'test' list); pass it as a subset file",
                reason="not_a_split_file",
            )
        splits = parsed.splits
    subsets: dict[str, list[str]] = {}
    for path in cfg.subset_files:
        parsed = read_split_file(path, cfg.read_limits())
        if parsed.splits or not parsed.subsets:
            raise InputError(
                path,
                None,
                None,
                "a subset file with only a 'test' list",
                "train / validation lists; pass it as the split file",
                reason="not_a_subset_file",
            )
        for name, names in parsed.subsets.items():
            if name in subsets or name in SPLIT_NAMES:
                raise InputError(
                    path, None, None, "a subset name not used already", f"'{name}'", reason="duplicate_subset"
                )
            if not DATASET_NAME.match(name):  # it becomes a file name: `<name>.arrow`
                raise InputError(
                    path, None, None, f"a subset name matching {DATASET_NAME.pattern}", repr(name), reason="bad_name"
                )
            subsets[name] = names
    return splits, subsets


def _make_split(cfg: PrepConfig) -> tuple[dict[str, str], dict, dict[str, splitting.IdentityHit]]:
    """First pass: the kept chains' sequences and labels -> name -> split, the card's split entry,
    and the held-out chains dropped for being too similar to a train chain."""
    screen = _Screen(cfg)
    seqs: dict[str, str] = {}
    topologies: dict[str, tuple[str, ...]] = {}
    clusters: dict[str, str | None] = {}
    multi_chain: set[str] = set()
    for item in _with_progress(
        read_protein_set(cfg.input, strict=cfg.strict, complexes=cfg.complexes, limits=cfg.read_limits()),
        "prep: pass 1 (split)",
        cfg.log_every,
    ):
        record = screen.check(item)
        if record is not None:
            seqs[record.name] = record.seq
            topologies[record.name] = splitting.cath_topologies(record.cath)
            clusters[record.name] = record.cluster
            if record.num_chains > 1:
                multi_chain.add(record.name)
    if not seqs:  # nothing to split (a clustering tool would fail on an empty input, not say why)
        raise _nothing_kept(cfg, screen)
    method = splitting.choose_method(cfg.split_by, [(topologies[n], clusters[n]) for n in seqs])
    tool = splitting.resolve_tool(cfg.identity_tool)
    if method == "cath":
        merged = splitting.merge_groups(topologies)
        groups = {name: f"cath:{merged[name]}" for name in seqs}
    elif method == "cluster":
        groups = {name: f"cluster:{clusters[name]}" for name in seqs}
    else:
        by_identity = splitting.cluster_sequences(seqs, cfg.identity_threshold, tool)
        groups = {name: f"identity:{by_identity[name]}" for name in seqs}
    groups = splitting.merge_entries(groups, multi_chain)
    sizes = Counter(groups.values())
    by_group = splitting.assign_groups(dict(sorted(sizes.items())), cfg.split_fractions, cfg.seed)
    assignment = {name: by_group[group] for name, group in groups.items()}
    excluded, bound, test_hits = _bound_identity(assignment, seqs, tool, cfg.identity_threshold)
    top = splitting.highest(test_hits, tool)
    split_info = {
        "method": method,
        "tool": tool,
        "groups": len(sizes),
        "identity_bound": bound,
        "highest_train_test_identity": {
            "identity": round(top.identity, 4),
            "test": top.test,
            "train": top.train,
            "tool": tool,
        },
    }
    if method == "cath":
        split_info["topology_overlap"] = splitting.topology_overlap(assignment, topologies)
    return assignment, split_info, excluded


def _bound_identity(
    assignment: dict[str, str], seqs: dict[str, str], tool: str, threshold: float
) -> tuple[dict[str, splitting.IdentityHit], dict, dict[str, splitting.IdentityHit]]:
    """Drop validation and test chains at `threshold` identity or more to any train chain (groups
    bound identity only as far as their labels do: CATH topologies, cluster ids, or a clustering
    that a heuristic estimate may miss). Returns the dropped chains' hits, the card entry, and the
    remaining test chains' hits."""
    held_out = {n: seqs[n] for n, s in assignment.items() if s != "train"}
    train = {n: seqs[n] for n, s in assignment.items() if s == "train"}
    hits = splitting.best_hits(held_out, train, tool)
    excluded = {n: hit for n, hit in sorted(hits.items()) if hit.identity >= threshold}
    dropped = Counter(assignment.pop(n) for n in excluded)
    for split in ("validation", "test"):
        if dropped[split] and not any(s == split for s in assignment.values()):
            raise ConfigError(
                f"every {split} chain is at {threshold:g} identity or more to a train chain "
                f"({dropped[split]} dropped); lower split_fractions' train share, raise identity_threshold, "
                "or give a split file"
            )
    test_hits = {n: h for n, h in hits.items() if assignment.get(n) == "test"}
    return (
        excluded,
        {
            "threshold": threshold,
            "tool": tool,
            "dropped": {"validation": dropped["validation"], "test": dropped["test"]},
            "examples": [
                {"chain": h.test, "train": h.train, "identity": round(h.identity, 4)}
                for h in list(excluded.values())[:5]
            ],
        },
        test_hits,
    )


def _identity(assignment: dict[str, str], seqs: dict[str, str], tool: str) -> dict | None:
    test = {n: seqs[n] for n, s in assignment.items() if s == "test"}
    train = {n: seqs[n] for n, s in assignment.items() if s == "train"}
    hit = splitting.highest_identity(test, train, tool)
    return (
        None
        if hit is None
        else {"identity": round(hit.identity, 4), "test": hit.test, "train": hit.train, "tool": hit.tool}
    )


@dataclass
class _SplitPlan:
    """The split stage's decision, made before any record is written: which split (and subsets)
    each name goes to, how it was decided, and the held-out chains dropped as too similar."""

    splits: dict[str, list[str]] | None  # from a split file; None when prep made the split
    subsets: dict[str, list[str]]
    assignment: dict[str, str]
    info: dict
    excluded: dict[str, splitting.IdentityHit]
    subset_of: dict[str, list[str]]

    @property
    def dataset_names(self) -> list[str]:
        return list(SPLIT_NAMES) + sorted(self.subsets)


@dataclass
class _Written:
    """What the shards stage wrote and kept aside for the checks and the card."""

    screen: _Screen
    writers: dict[str, DatasetWriter]
    stats: CompositionStats
    kept: int
    identity_seqs: dict[str, str]  # train/test/subset members, for identity checks
    external_seqs: dict[str, dict[str, str]]  # non-train dataset -> name -> seq (check_against)
    topologies: dict[str, tuple[str, ...]]


def run_prep(cfg: PrepConfig) -> PrepResult:
    """Prepare `cfg.input` into `cfg.out`; raises InputError on bad input (see module policy)."""
    start = time.monotonic()
    reference = _open_reference(cfg) if cfg.check_against else None  # fail before the first pass
    remote = storage.is_remote(cfg.out)
    out = None if remote else _judge_out(cfg.out)  # fail before the first pass
    plan = _plan_split(cfg)
    if out is None:
        staging = Path(tempfile.mkdtemp(prefix=".prep-"))
    else:
        try:
            out.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"--out {cfg.out}: cannot make its parent folder ({err.strerror})") from None
        _remove_stale_staging(out.path)
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(out.path), dir=out.path.parent))
    try:
        written = _write_shards(cfg, plan, staging, collect_external=reference is not None)
        _check_split(cfg, plan, written, reference)
        card = _write_card(cfg, plan, written, staging)
        if out is None:  # uploaded; readers verify the digest (shards._cached_copy), so a half upload is refused
            storage.upload_folder(staging, cfg.out)
        else:
            _publish(staging, _judge_out(cfg.out))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    seconds = time.monotonic() - start
    log.info(
        "prep: kept %d of %d records (%s) in %.1f s; digest %s",
        written.kept,
        written.screen.read,
        ", ".join(f"{k} {v}" for k, v in card["dropped"].items()) or "nothing dropped",
        seconds,
        card["digest"],
    )
    datasets = {n: d["chains"] for n, d in card["datasets"].items()}
    return PrepResult(cfg.out, card["digest"], card["counts"], datasets, card, seconds)


def _plan_split(cfg: PrepConfig) -> _SplitPlan:
    """Split: the split file's assignment, or prep's own (a first pass over names and sequences)."""
    splits, subsets = _read_splits(cfg)
    excluded: dict[str, splitting.IdentityHit] = {}
    if splits is None:
        assignment, split_info, excluded = _make_split(cfg)
    else:
        assignment = {name: split for split, names in splits.items() for name in names}
        split_info = {"method": "split_file", "tool": None}
    subset_of: dict[str, list[str]] = {}
    for subset, names in subsets.items():
        for name in names:
            subset_of.setdefault(name, []).append(subset)
    return _SplitPlan(splits, subsets, assignment, split_info, excluded, subset_of)


def _write_shards(cfg: PrepConfig, plan: _SplitPlan, staging: Path, collect_external: bool) -> _Written:
    """Validate, normalize and filter each record (`_Screen`), then stream it into the Arrow
    writer of its split and subsets; counts must reconcile and something must be kept."""
    screen = _Screen(cfg)
    writers = {
        name: DatasetWriter(staging / dataset_file(name), cfg.batch_rows, cfg.batch_bytes)
        for name in plan.dataset_names
    }
    collect_identity = plan.splits is None or cfg.check_identity
    written = _Written(screen, writers, CompositionStats(), 0, {}, {}, {})
    for item in _with_progress(
        read_protein_set(cfg.input, strict=cfg.strict, complexes=cfg.complexes, limits=cfg.read_limits()),
        "prep",
        cfg.log_every,
    ):
        record = screen.check(item)
        if record is None:
            continue
        split, conflict = _split_of(record, plan.assignment)
        if conflict:
            screen.drop(record, "split_conflict", "name", "the chains of one complex in one split", conflict)
            continue
        targets = ([split] if split else []) + _subsets_of(record, plan.subset_of)
        if not targets and record.name in plan.excluded:
            hit = plan.excluded[record.name]
            screen.drop(
                record,
                "similar_to_train",
                "seq",
                f"under {cfg.identity_threshold:g} identity to every train chain",
                f"{hit.identity:.3f} to '{hit.train}'",
            )
            continue
        if not targets:
            screen.drop(record, "not_in_split_file", "name", "a chain named in the split or subset files", "not named")
            continue
        for target in targets:
            writers[target].add(record)
            if collect_external and target != "train":
                written.external_seqs.setdefault(target, {})[record.name] = record.seq
        written.stats.add(record.seq, record.mask)
        written.kept += 1
        if collect_identity and (split in ("train", "test") or record.name in plan.subset_of):
            written.identity_seqs[record.name] = record.seq
        if record.cath:
            written.topologies[record.name] = splitting.cath_topologies(record.cath)
    for writer in writers.values():
        writer.close()
    if screen.read != written.kept + screen.skipped:
        raise AssertionError(
            f"records do not reconcile: read {screen.read} != kept {written.kept} + skipped {screen.skipped}"
        )
    if written.kept == 0:
        raise _nothing_kept(cfg, screen)
    return written


def _nothing_kept(cfg: PrepConfig, screen: _Screen) -> InputError:
    return InputError(
        cfg.input,
        None,
        None,
        "at least one chain passing the checks",
        f"none of {screen.read} records ({dict(screen.reader_skips + screen.filtered)})",
        reason="nothing_kept",
    )


def _check_split(cfg: PrepConfig, plan: _SplitPlan, written: _Written, reference) -> None:
    """What the card reports about the split: absent names, train/test and subset identity,
    overlap with another prepared set's train split, topology overlap (into plan.info)."""
    info, assignment, names = plan.info, plan.assignment, written.screen.names
    info["absent_from_set"] = _absent(cfg, plan.splits, plan.subsets, names | written.screen.members)
    tool = splitting.resolve_tool(cfg.identity_tool)
    if plan.splits is None or cfg.check_identity:
        in_split = {n: assignment[n] for n in written.identity_seqs if n in assignment}
        if plan.splits is not None:
            info["highest_train_test_identity"] = _identity(in_split, written.identity_seqs, tool)
        info["subset_overlap"] = _subset_overlap(plan.subsets, in_split, written.identity_seqs, tool, cfg)
    if reference is not None:
        info["external_overlap"] = _external_overlap(reference, cfg, written.external_seqs, tool)
    if written.topologies and "topology_overlap" not in info:
        info["topology_overlap"] = splitting.topology_overlap(
            {n: s for n, s in assignment.items() if n in written.topologies}, written.topologies
        )
    info["subset_members_by_split"] = {
        subset: dict(Counter(assignment.get(n, "none") for n in members if n in names))
        for subset, members in sorted(plan.subsets.items())
    }


def _write_card(cfg: PrepConfig, plan: _SplitPlan, written: _Written, staging: Path) -> dict:
    """The content digest, index.json (datasets in order: splits, subsets) and the card."""
    screen, writers = written.screen, written.writers
    digest = content_digest(staging, plan.dataset_names)
    index = {
        "format": FORMAT,
        "digest": digest,
        "datasets": {
            name: {
                "file": dataset_file(name),
                "rows": len(writers[name].lengths),
                "residues": int(sum(writers[name].lengths)),
                "lengths": writers[name].lengths,
            }
            for name in plan.dataset_names
        },
    }
    card = {
        "format": FORMAT,
        "digest": digest,
        "counts": {
            "read": screen.read,
            "kept": written.kept,
            "skipped": screen.skipped,
            "reader_skipped": sum(screen.reader_skips.values()),
            "filtered": sum(screen.filtered.values()),
        },
        "dropped": dict(sorted((screen.reader_skips + screen.filtered).items())),
        "drop_examples": dict(sorted(screen.examples.items())),
        "datasets": {
            name: {
                "chains": len(w.lengths),
                "residues": int(sum(w.lengths)),
                "median_length": float(np.median(w.lengths)) if w.lengths else 0.0,
            }
            for name, w in writers.items()
        },
        "split": plan.info,
        "kept": written.stats.summary(cfg.max_length),
        "options": cfg.options(),
    }
    (staging / INDEX_FILE).write_text(json.dumps(index) + "\n")
    write_card(staging, card)
    return card


def _overlap(present: dict[str, str], train: dict[str, str], tool: str, threshold: float) -> dict:
    """How much a set of evaluation chains overlaps train: members that are train chains by name, and
    members at `threshold` identity or more to a train chain (reported, never dropped: an evaluation
    list is someone else's benchmark)."""
    in_train = sorted(n for n in present if n in train)
    others = {n: s for n, s in present.items() if n not in train}
    hits = splitting.best_hits(others, train, tool)
    above = sorted(n for n, h in hits.items() if h.identity >= threshold)
    top = splitting.highest(hits, tool)
    return {
        "chains": len(present),
        "in_train": len(in_train),
        "above_threshold": len(above),
        "threshold": threshold,
        "examples": (in_train + above)[:5],
        "highest_identity": {"identity": round(top.identity, 4), "chain": top.test, "train": top.train},
    }


def _subset_overlap(
    subsets: dict[str, list[str]], assignment: dict[str, str], seqs: dict[str, str], tool: str, cfg: PrepConfig
) -> dict:
    """Each subset file's overlap with this set's own train split."""
    train = {n: seqs[n] for n, s in assignment.items() if s == "train"}
    return {
        name: _overlap({n: seqs[n] for n in members if n in seqs}, train, tool, cfg.identity_threshold)
        for name, members in sorted(subsets.items())
    }


def _open_reference(cfg: PrepConfig):
    """The prepared folder named by check_against, checked before the input is read."""
    reference = open_prepared(cfg.check_against)
    if "train" not in reference.datasets or not len(reference.open("train")):
        raise InputError(
            cfg.check_against,
            None,
            "datasets.train",
            "a prepared folder with train chains to check against",
            f"datasets {reference.datasets}",
            reason="no_train_set",
        )
    return reference


def _external_overlap(reference, cfg: PrepConfig, datasets: dict[str, dict[str, str]], tool: str) -> dict:
    """Each non-train dataset's overlap with the train split of another prepared folder."""
    train_set = reference.open("train")
    train = {r.name: r.seq for r in (train_set[i] for i in range(len(train_set)))}
    return {
        "reference": cfg.check_against,
        "reference_digest": reference.digest,
        "train_chains": len(train),
        "tool": tool,
        "datasets": {
            name: _overlap(seqs, train, tool, cfg.identity_threshold) for name, seqs in sorted(datasets.items())
        },
    }


def _split_of(record: ChainRecord, assignment: dict[str, str]) -> tuple[str | None, str]:
    """(split, conflict): a record's split by its name, or a complex's by its chains' names
    ("1abc.A"); conflict describes chains named in different splits ("" when none)."""
    if record.name in assignment or not record.chain_names:
        return assignment.get(record.name), ""
    named = {c: assignment[f"{record.name}.{c}"] for c in record.chain_names if f"{record.name}.{c}" in assignment}
    if len(set(named.values())) > 1:
        return None, ", ".join(f"{c} in {s}" for c, s in named.items())
    return next(iter(named.values()), None), ""


def _subsets_of(record: ChainRecord, subset_of: dict[str, list[str]]) -> list[str]:
    if record.name in subset_of or not record.chain_names:
        return subset_of.get(record.name, [])
    found: list[str] = []
    for c in record.chain_names:
        found.extend(s for s in subset_of.get(f"{record.name}.{c}", []) if s not in found)
    return found


def _absent(cfg: PrepConfig, splits, subsets, seen: set[str]) -> dict[str, int]:
    named = dict(splits or {}) | subsets
    absent = {name: [n for n in names if n not in seen] for name, names in named.items()}
    total = sum(len(v) for v in absent.values())
    if total:
        detail = ", ".join(f"{k} {len(v)} (e.g. '{v[0]}')" for k, v in absent.items() if v)
        source = cfg.split_file or cfg.subset_files[0]
        if cfg.strict:
            raise InputError(
                source,
                None,
                None,
                "every named chain present in the protein set",
                f"{total} absent: {detail}",
                reason="absent_from_set",
            )
        warnings.warn(f"{source}: {total} named chain(s) absent from {cfg.input}: {detail}", stacklevel=3)
        log.warning("split names absent from the set: %s", detail)
    return {name: len(v) for name, v in absent.items()}


# The files prep writes into its output folder besides one `<dataset>.arrow` per dataset.
PREP_FILES = (INDEX_FILE, CARD_JSON, CARD_MD)
AT_FDCWD, RENAME_EXCHANGE = -100, 2


@dataclass
class _OutFolder:
    """What `out` names locally, judged before any work and again right before publishing."""

    path: Path
    existing: os.stat_result | None  # None: no folder yet
    prepared: bool  # an earlier prep output (else an empty folder)


def _judge_out(output: str) -> _OutFolder:
    """A local output folder prep may publish into: a new one, an empty one (filled in place,
    so its inode, mode and owner stay), or exactly an earlier prep output (its index.json and
    card.json say so and it holds nothing else: replaced whole). Anything else is refused with
    one line, as a file in its place is: prep never deletes what it did not write."""
    path = Path(output.removeprefix("file://")).resolve()  # `.`, `..` and symlinks: the real folder
    shown = f"--out {storage.display_uri(output)}"
    try:
        existing = os.stat(path)
    except FileNotFoundError:
        return _OutFolder(path, None, False)
    except OSError as err:
        raise ConfigError(f"{shown}: expected a folder prep can write, got {err.strerror}") from None
    if not stat.S_ISDIR(existing.st_mode):
        kind = "a file" if stat.S_ISREG(existing.st_mode) else "a device or other non-folder"
        raise ConfigError(f"{shown}: expected a folder (new, empty, or an earlier prep output), got {kind}")
    try:
        names = set(os.listdir(path))
    except OSError as err:
        raise ConfigError(f"{shown}: expected a folder prep can read and write, got {err.strerror}") from None
    if not names:
        return _OutFolder(path, existing, False)
    ours = set(PREP_FILES)
    try:
        index = load_index(path / INDEX_FILE)
        check_card(storage.load_json(path / CARD_JSON, MAX_CARD_BYTES, "MAX_CARD_BYTES"), index, path / CARD_JSON)
        ours.update(dataset_file(name) for name in index["datasets"])
    except InputError:
        ours = set()  # not prep's output: every name counts as someone else's
    # staging folders an older invfold made inside its output folder are prep's own too
    foreign = sorted(n for n in names - ours if not (n.startswith(".prep-") and (path / n).is_dir()))
    if foreign:
        listed = ", ".join(repr(n) for n in foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConfigError(
            f"{shown}: expected a new or empty folder, or an earlier prep output to replace; it holds "
            f"{len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} prep did not write ({listed}), which prep "
            "never deletes: choose another folder"
        )
    return _OutFolder(path, existing, True)


def _staging_prefix(out_dir: Path, pid: int | None = None) -> str:
    """A sibling of the output folder (same filesystem, so publishing is a rename), named after
    the host and process that own it so a later prep can tell a crashed run's leftovers."""
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40]
    return f".{out_dir.name}.prep-{host}-{os.getpid() if pid is None else pid}-"


def _remove_stale_staging(out_dir: Path) -> None:
    """Delete staging folders of earlier preps into `out_dir` on this host whose process is gone
    (a crash or kill skips the `finally` that removes them)."""
    host_prefix = _staging_prefix(out_dir, 0)[: -len("0-")]
    for entry in out_dir.parent.glob(f"{glob.escape(host_prefix)}*"):
        pid = entry.name[len(host_prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where the
    kernel or filesystem cannot, so the caller falls back to two renames."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _publish(staging: Path, out: _OutFolder) -> None:
    """Put the finished folder in place so that a reader sees the old complete folder or the new
    complete one, never a mix (SQLite-style: everything is written and synced aside, then one
    atomic step publishes it). `out` is judged again just before (_judge_out): only a new folder,
    an empty one or an earlier prep output gets here.
    - new: the staging folder (a sibling) is renamed into place, with the mode a new folder gets;
    - empty: the files are hard-linked in, index.json last (a reader before it finds no index:
      an InputError, never a mix), so the folder itself (inode, mode, owner) stays the user's;
    - earlier prep output: the staging folder, given the old one's mode and (where permitted)
      owner, is swapped with it in one renameat2(RENAME_EXCHANGE); where the exchange is
      unsupported, the old folder is renamed aside, the new one into place, and a failure of the
      second rename puts the old one back (a reader in between finds no folder and an InputError)."""
    _sync(staging)
    if out.existing is None:
        os.chmod(staging, _new_folder_mode(staging))
        os.rename(staging, out.path)
        return
    if not out.prepared:
        _link_into(staging, out.path)
        return
    _adopt(staging, out.existing)
    cwd = Path.cwd()
    if out.path in (cwd, *cwd.parents):
        log.warning(
            "prep: %s is replaced by a new folder: a shell inside it sees the new one after `cd %s`", out.path, out.path
        )
    if not _exchange(staging, out.path):
        aside = Path(tempfile.mkdtemp(prefix=_staging_prefix(out.path), dir=out.path.parent))
        try:
            os.rename(out.path, aside / "old")
            try:
                os.rename(staging, out.path)
            except BaseException:
                os.rename(aside / "old", out.path)
                raise
        except BaseException:
            shutil.rmtree(aside, ignore_errors=True)
            raise
        shutil.rmtree(aside, ignore_errors=True)  # published: removing the old folder is cleanup
    # after an exchange, staging holds the old folder: the caller's `finally` removes it


def _new_folder_mode(folder: Path) -> int:
    """What mkdir would have given the folder (0777 less the umask; a setgid parent's bit kept),
    where tempfile.mkdtemp gives 0700."""
    umask = os.umask(0o022)
    os.umask(umask)
    return (0o777 & ~umask) | (os.stat(folder).st_mode & stat.S_ISGID)


def _adopt(staging: Path, old: os.stat_result) -> None:
    """Give the new folder the old one's mode, and its owner and group as far as this process
    may (root: both; a member of the group: the group); its files take the group too, as the
    old folder's setgid bit would have given them."""
    mine = os.stat(staging)
    if (mine.st_uid, mine.st_gid) != (old.st_uid, old.st_gid):
        for path in [staging, *staging.iterdir()]:
            try:
                os.chown(path, old.st_uid, old.st_gid)
            except PermissionError:
                try:
                    os.chown(path, -1, old.st_gid)
                except PermissionError:
                    break
    os.chmod(staging, stat.S_IMODE(old.st_mode))  # after chown, which clears setgid


def _link_into(staging: Path, folder: Path) -> None:
    """Hard-link each file of `staging` into the empty `folder`, index.json last. A link never
    replaces a file (EEXIST): one that appeared since _judge_out stops the publish."""
    folder_stat = os.stat(folder)
    for path in sorted(staging.iterdir(), key=lambda p: p.name == INDEX_FILE):
        try:
            os.link(path, folder / path.name)
        except FileExistsError:
            raise ConfigError(
                f"--out {folder}: '{path.name}' appeared in it while prep ran; prep never replaces "
                "a file it did not write: choose another folder"
            ) from None
        if folder_stat.st_mode & stat.S_ISGID and os.stat(path).st_gid != folder_stat.st_gid:
            try:
                os.chown(folder / path.name, -1, folder_stat.st_gid)  # as if written there
            except OSError:
                pass
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync(folder: Path) -> None:
    """fsync each file and the folder, so a power loss after the publish cannot lose its content."""
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
