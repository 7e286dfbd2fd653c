"""Batch design: many structures in, one FASTA per structure (or one jsonl) out, with a backend
loaded once, a progress bar, and every record that could not be designed counted with its reason.

Structures: a folder of PDB/mmCIF files, a chain-set jsonl (or TS50 json), one structure file, or
a text list of structure paths (`*.txt` / `*.list`: one path per line, relative to the list's
folder; blank lines and `#` comments ignored). With `design_chains` every structure is read as a
complex (all protein chains of a file, the lines of one chain-set entry), as a single design
reads it: the named chains are designed, the others are fixed context; a structure without one
of the named chains is skipped (reason `no_design_chain`). Output (`--out`): a folder (one
`<record name>.fasta` per record, plus `summary.json`) or `*.jsonl` (one line per design, plus
`<stem>.summary.json` beside it).

Every record gets its own output name (`output_names`): records that share a name (one chain-set
line twice, `x.pdb` beside `x.cif`) or whose names differ only in case (`Foo.A`, `foo.A`: one file
on macOS and Windows) are numbered in reading order (`x.A`, `x.A-2`, ...), so no design overwrites
another. Nothing an earlier run wrote is overwritten either, unless `overwrite`: a non-empty output
folder, or an existing `.jsonl` (or its summary), is refused before the model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from invfold import storage
from invfold.components.design.design import (
    Design,
    DesignConfig,
    check_backend,
    design_record,
    load_backend,
    memory_guard,
    reference_label,
    write_designs,
)
from invfold.components.design.option_files import check_option_files
from invfold.components.design.score import ScoreConfig, score_sequence
from invfold.components.protein.errors import Skip
from invfold.components.protein.limits import DEFAULT_LIMITS
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.sources import read_protein_set
from invfold.errors import ConfigError, InputError, InvfoldError

log = logging.getLogger(__name__)

LIST_SUFFIXES = (".txt", ".list")
FASTA_SUFFIXES = (".fasta", ".fa", ".faa")


@dataclass
class Skipped:
    name: str
    reason: str  # short stable key ("missing_file", "no_protein_chain", "design_error", ...)
    message: str


@dataclass
class BatchSummary:
    structures: str
    out: str
    model: str
    temperatures: list[float]
    num_sequences: int
    designed: int = 0  # records designed
    designs: int = 0  # sequences written
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)  # files this run wrote (the summary aside)
    renamed: dict[str, str] = field(default_factory=dict)  # output name -> record name, where they differ
    path: str = ""  # the summary file

    @property
    def skip_counts(self) -> dict[str, int]:
        return dict(Counter(s.reason for s in self.skipped))

    def to_json(self) -> dict:
        return {**asdict(self), "skip_counts": self.skip_counts}


def is_batch(cfg: DesignConfig) -> bool:
    """Batch mode: --out is a folder or a .jsonl, or the structures are a folder or a list.
    Otherwise (--out x.fasta with one structure) `invfold design` designs one record as before."""
    out = cfg.out.lower()
    if out.endswith(".jsonl") or not out.endswith(FASTA_SUFFIXES):
        return True
    return is_structure_list(cfg.structure) or storage.is_dir(cfg.structure)


def is_structure_list(path: str) -> bool:
    return storage.strip_gz(storage.basename(path).lower()).endswith(LIST_SUFFIXES)


def read_structures(
    structures: str, complexes: bool = False, numbering: str = "seqres"
) -> Iterator[ChainRecord | Skip]:
    """Every record (or Skip) of a folder, a chain set, a structure file, or a list of paths; a
    structure file that cannot be read at all becomes a Skip naming it, not an error. complexes:
    one record per structure (file or chain-set entry) with all its chains; numbering: as
    DesignConfig.placed_by says (sources.read_protein_set)."""

    if not is_structure_list(structures):
        yield from read_protein_set(structures, complexes=complexes, numbering=numbering)
        return
    base = os.path.dirname(structures)
    text = storage.read_bytes(structures, DEFAULT_LIMITS.max_file_bytes).decode("utf-8", errors="replace")
    for line_no, line in enumerate(text.splitlines(), start=1):
        path = line.split("#", 1)[0].strip()
        if not path:
            continue
        if not os.path.isabs(path) and "://" not in path:
            path = os.path.join(base, path)
        try:
            yield from read_protein_set(path, complexes=complexes, numbering=numbering)
        except InputError as err:
            yield Skip(err.reason, f"{structures}:{line_no}: {err}", path)


def wanted(record: ChainRecord, cfg: DesignConfig) -> bool:
    named = (
        cfg.name is None or record.name == cfg.name or cfg.name in {f"{record.name}.{c}" for c in record.chain_names}
    )
    return named and (cfg.chain is None or record.name.rsplit(".", 1)[-1] == cfg.chain)


def missing_design_chains(record: ChainRecord, cfg: DesignConfig) -> Skipped | None:
    """A Skip for a record that lacks any of cfg.design_chains (None when it holds them all, or
    when no chains are named): in a folder of complexes, the structures without those chains."""
    chains = list(record.chain_positions())
    missing = [c for c in (c.strip() for c in cfg.design_chains.split(",")) if c and c not in chains]
    if not missing:
        return None
    return Skipped(
        record.name,
        "no_design_chain",
        f"{record.name}: chains to design {missing} are not in it (chains: {', '.join(chains)})",
    )


def safe_name(name: str) -> str:
    """A record name as a file name stem: kept as is when it is already plain (letters, digits,
    `._-`, not starting with a dot, at most 120 characters); otherwise its plain characters plus
    the first 10 hex digits of the name's sha256, so distinct names (`a/b`, `a:b`, `a b`) never
    share a file, on any shard, and nothing can name a path outside the output folder."""
    plain = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".")[:120]
    if plain == name:
        return name
    return f"{plain or 'record'}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def output_names(names: list[str]) -> list[str]:
    """One output name per record name, in order: `safe_name(name)`, or, when an earlier record
    already took that name in any letter case, `<safe name>-2`, `-3`, ... (the first free one), so
    no two records share a file on a case-insensitive file system (macOS, Windows) either."""
    taken: set[str] = set()
    out = []
    for name in names:
        stem, k = safe_name(name), 1
        unique = stem
        while unique.casefold() in taken:
            k += 1
            unique = f"{stem}-{k}"
        taken.add(unique.casefold())
        out.append(unique)
    return out


def check_out(cfg: DesignConfig) -> None:
    """Refuse to overwrite what an earlier run left (unless cfg.overwrite): a non-empty output
    folder, whose files would mix with this run's, or an existing .jsonl or summary; and refuse an
    output the system cannot make (an existing file as the folder, a name too long)."""
    out = Path(cfg.out)
    to_jsonl = cfg.out.lower().endswith(".jsonl")
    try:
        if not to_jsonl and out.exists() and not out.is_dir():
            raise ConfigError(f"--out {cfg.out}: a batch writes a folder (or a .jsonl); this is an existing file")
        if cfg.overwrite:
            return
        if to_jsonl:
            found = [p for p in (out, summary_path(cfg.out)) if p.exists()]
        else:
            found = sorted(out.iterdir()) if out.is_dir() else []
    except OSError as err:
        raise ConfigError(f"--out {cfg.out}: cannot be written ({err.strerror or type(err).__name__})") from None
    if found:
        listed = ", ".join(p.name for p in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        where = "exists:" if to_jsonl else "holds"
        raise ConfigError(
            f"--out {cfg.out}: {where} {listed} from an earlier run; give an empty or new --out, or --overwrite "
            "to replace those files"
        )


def design_batch(
    cfg: DesignConfig, progress: bool | None = None, shard: tuple[int, int] | None = None, score_orders: int = 0
) -> BatchSummary:
    """Design cfg.num_sequences sequences per temperature for every record of cfg.structure and
    write them (folder of FASTA or one jsonl) with a summary; records that cannot be designed are
    skipped, counted by reason, and logged.

    shard (k, n): only the items (records and skips, in reading order) i with i % n == k, so n
    shards together design every record and count every skip once. score_orders > 0 (jsonl
    output): each design's `score_nll` too, its mean NLL averaged over that many random decoding
    orders as `invfold score` computes it (ProteinMPNN's global score)."""
    start = time.monotonic()
    check_out(cfg)
    check_option_files(cfg)  # a malformed option file fails the batch, not each of its records
    backend = load_backend(cfg.model, cfg.threads)
    check_backend(backend, cfg)
    model = reference_label(cfg)
    summary = BatchSummary(storage.display_uri(cfg.structure), cfg.out, model, list(cfg.temperature), cfg.num_sequences)
    records: list[tuple[int, ChainRecord]] = []  # (its place among every shard's records, record)
    names: list[str] = []  # every record's name, in every shard: output names agree across shards
    for i, item in enumerate(
        read_structures(cfg.structure, complexes=bool(cfg.design_chains), numbering=cfg.placed_by)
    ):
        missing = missing_design_chains(item, cfg) if isinstance(item, ChainRecord) and wanted(item, cfg) else None
        if isinstance(item, ChainRecord) and wanted(item, cfg) and missing is None:
            names.append(item.name)
        if shard is not None and i % shard[1] != shard[0]:
            continue
        if isinstance(item, Skip):
            summary.skipped.append(Skipped(item.name or "?", item.reason, storage.redact(item.message)))
        elif wanted(item, cfg):
            if missing is None:
                records.append((len(names) - 1, item))
            else:
                summary.skipped.append(missing)
    if not records and not summary.skipped and shard is None:
        raise InputError(cfg.structure, None, None, "at least one record to design", "none",
                         reason="no_records")  # fmt: skip
    unique = output_names(names)
    to_jsonl = cfg.out.lower().endswith(".jsonl")
    out = Path(cfg.out)
    try:
        (out.parent if to_jsonl else out).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--out {cfg.out}: cannot be written ({err.strerror or type(err).__name__})") from None
    lines: list[str] = []
    with _progress(len(records), progress) as advance:
        for place, record in records:
            try:
                designs = design_record(backend, record, cfg)
                with memory_guard(record):
                    scores = score_designs(backend, record, designs, score_orders, cfg.seed) if score_orders else {}
            except InvfoldError as err:
                summary.skipped.append(Skipped(record.name, getattr(err, "reason", "design_error"), str(err)))
                advance(record.name)
                continue
            name = unique[place]
            if name != safe_name(record.name):
                summary.renamed[name] = record.name
            if to_jsonl:
                lines.extend(json.dumps(design_row(d, model, scores.get(d.index), name)) for d in designs)
            else:
                path = out / f"{name}.fasta"
                write_designs(path, record, designs, cfg, backend.cfg.backbone == "ca")  # + .scores/.probs.npz
                summary.outputs.append(path.name)
            summary.designed += 1
            summary.designs += len(designs)
            advance(record.name)
    if to_jsonl:
        out.write_text("".join(line + "\n" for line in lines))
        summary.outputs.append(out.name)
    for s in summary.skipped:
        log.warning("skipped %s (%s): %s", s.name, s.reason, s.message)
    summary.seconds = round(time.monotonic() - start, 3)
    summary.path = str(summary_path(cfg.out))
    Path(summary.path).write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    return summary


def score_designs(backend, record: ChainRecord, designs: list[Design], orders: int, seed: int) -> dict[int, float]:
    """sample index -> mean NLL of the design over `orders` random decoding orders (every chain
    scored; `invfold score`'s computation, order k drawn from seed + k)."""
    import torch

    scfg = ScoreConfig(model="", structure=record.name, out="", num_orders=orders, seed=seed)
    everything = torch.ones(len(record), dtype=torch.bool)
    n = orders if backend.cfg.autoregressive else 1
    return {
        d.index: round(float(score_sequence(backend, record, d.sequence, everything, n, scfg)[1].mean()), 5)
        for d in designs
    }


def design_row(d: Design, model: str, score_nll: float | None = None, output_name: str | None = None) -> dict:
    """One jsonl line; `id` is the record's output name in the batch (its name, or `name-2`, ...
    where records share a name: output_names), which tells apart designs of same-named records."""
    extra = {} if score_nll is None else {"score_nll": score_nll}
    if d.chain_lengths is not None:
        extra["chain_lengths"] = list(d.chain_lengths)
        extra["designed_chains"] = list(d.designed_chains)
        extra["fixed_chains"] = list(d.fixed_chains)
    return {
        "name": d.name,
        **({} if output_name is None else {"id": output_name}),
        "sample": d.index,
        "temperature": d.temperature,
        "seed": d.seed,
        "sequence": d.sequence,
        "mean_nll": round(d.mean_nll, 5),
        "recovery": round(d.recovery, 5),
        "model": model,
        **extra,
    }


def summary_path(out: str) -> Path:
    p = Path(out)
    return (
        p.with_name(p.name[: -len(".jsonl")] + ".summary.json")
        if out.lower().endswith(".jsonl")
        else p / "summary.json"
    )


class _progress:
    """A rich progress bar over records on stderr (a TTY only, unless forced; INVFOLD_NO_PROGRESS=1
    turns it off); `advance(name)` moves it on. Without a bar, a log line every 10 records."""

    def __init__(self, total: int, enabled: bool | None):
        if enabled is None:
            enabled = sys.stderr.isatty() and os.environ.get("INVFOLD_NO_PROGRESS") != "1"
        self.total, self.enabled, self.done = total, enabled, 0

    def __enter__(self):
        if self.enabled:
            self.bar = Progress(
                TextColumn("design"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=self.total)
        return self.advance

    def advance(self, name: str) -> None:
        self.done += 1
        if self.enabled:
            self.bar.update(self.task, advance=1, description=name)
        elif self.done % 10 == 0 or self.done == self.total:
            log.info("designed %d/%d records", self.done, self.total)

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.stop()
        return False
