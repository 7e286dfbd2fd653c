"""Score sequences on a structure: mean and per-residue negative log-likelihood, averaged over
random decoding orders as ProteinMPNN's `--score_only 1` does (protein_mpnn_run.py: for each of
`--num_seq_per_target` copies a fresh random order, decoded context first, `_scores` = mean NLL
over the scored positions; the reported score is the mean over the copies).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from invfold.components.design.config import ScoreConfig
from invfold.components.design.design import OnnxBackend, TorchBackend, check_length, memory_guard, select_record
from invfold.components.design.fasta import FastaEntry, read_fasta
from invfold.components.design.positions import chain_of, chain_positions, selected_chains
from invfold.components.model.network import random_decoding_order
from invfold.components.protein.alphabet import AA_TO_INDEX, ALPHABET
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord, with_structure_atoms
from invfold.errors import InputError
from invfold.progress import progress


@dataclass
class Score:
    structure: str
    sequence_name: str
    sequence: str
    mean_nll: float  # mean over orders of the mean NLL over scored residues
    std_nll: float  # standard deviation of that mean over orders
    scored: int
    orders: int
    per_residue: list[float | None] = field(repr=False)  # mean NLL over orders; None = not scored

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_nll)


def check_sequence(entry: FastaEntry, record: ChainRecord, fasta: str) -> None:
    """The FASTA sequence must have the record's length (and chain lengths when "/" splits it)."""
    chains = chain_positions(record)
    lengths = tuple(len(index) for index in chains.values())
    if len(entry.sequence) != len(record):
        raise InputError(
            fasta,
            f"line {entry.line}, record '{entry.name}'",
            "sequence",
            f"{len(record)} residues, the length of {record.name} as read (chains {', '.join(chains)}: "
            f"{'+'.join(map(str, lengths))}; missing residues included)",
            f"{len(entry.sequence)} residues",
            name=entry.name,
        )
    if entry.chain_lengths is not None and entry.chain_lengths != lengths:
        raise InputError(
            fasta,
            f"line {entry.line}, record '{entry.name}'",
            "sequence",
            f"chains of {'/'.join(map(str, lengths))} residues between '/' ({', '.join(chains)})",
            "/".join(map(str, entry.chain_lengths)),
            name=entry.name,
        )


def score(cfg: ScoreConfig) -> list[Score]:
    """Score every sequence (cfg.fasta, or the native) and write cfg.out (CSV) and its JSON."""

    backend = OnnxBackend(cfg.model, cfg.threads) if str(cfg.model).endswith(".onnx") else TorchBackend(cfg.model)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    record = select_record(cfg.structure, cfg.name, cfg.chain, complexes=bool(cfg.score_chains))
    check_length(record, cfg.max_length, "ScoreConfig.max_length")
    record = with_structure_atoms(record, backend.cfg.input_atoms)  # a CA-only model: CA observed
    chains = chain_positions(record)
    scored_chains = selected_chains(chains, cfg.score_chains, "ScoreConfig.score_chains")
    in_scored = torch.from_numpy(np.isin(chain_of(chains, len(record)), scored_chains).astype(bool))
    if cfg.fasta:
        entries = read_fasta(cfg.fasta)
        for entry in entries:
            check_sequence(entry, record, cfg.fasta)
    else:
        entries = [FastaEntry("native", record.seq, 0)]
    orders = cfg.num_orders if backend.cfg.autoregressive else 1
    results = []
    with progress(len(entries), f"score {record.name}", unit="sequences") as advance:
        for entry in entries:
            with memory_guard(record):
                results.append(_score_entry(backend, record, entry, in_scored, orders, cfg))
            advance(1, entry.name)
    write_scores(cfg.out, results)
    if cfg.probs:
        from invfold.components.design.probs import probabilities, probs_path, write_probs

        write_probs(probs_path(cfg.out), probabilities(backend, record, cfg.probs, scored_chains, orders, cfg.seed))
    return results


def _score_entry(backend, record: ChainRecord, entry, in_scored, orders: int, cfg: ScoreConfig) -> Score:
    nll_sum, per_order = score_sequence(backend, record, entry.sequence, in_scored, orders, cfg)
    known = torch.tensor([c in AA_TO_INDEX for c in entry.sequence])
    scored = in_scored & known & torch.from_numpy(np.asarray(record.mask, dtype=bool))
    per_residue = nll_sum / orders
    mean = per_order.mean() if int(scored.sum()) else torch.tensor(float("nan"))
    return Score(
        structure=record.name,
        sequence_name=entry.name,
        sequence=entry.sequence,
        mean_nll=float(mean),
        std_nll=float(per_order.std(unbiased=False)) if orders > 1 else 0.0,
        scored=int(scored.sum()),
        orders=orders,
        per_residue=[round(float(v), 5) if s else None for v, s in zip(per_residue, scored, strict=True)],
    )


def score_sequence(backend, record: ChainRecord, sequence: str, in_scored, orders: int, cfg: ScoreConfig):
    """(summed per-residue NLL over orders [L], per-order mean NLL [orders]) of one sequence.

    Order k: random_decoding_order from a generator seeded cfg.seed + k, with the residues that
    are not scored (context chains, residues without a backbone) first, as ProteinMPNN decodes
    them (`chain_M = chain_M*mask` before its order is drawn: a missing residue's X token and
    state are context for every scored residue), and unknown letters (X) with a backbone last, so
    the decoder never reads a letter it cannot embed; the same orders for a checkpoint and its ONNX.
    """

    letters = "".join(c if c in AA_TO_INDEX else "X" for c in sequence)
    rec = ChainRecord(record.name, letters, record.coords, record.mask, record.residue_index)
    one = collate([rec])
    known = one.mask[0] > 0  # backbone and a known letter
    scored = known & in_scored
    unknown = (one.structure_mask[0] > 0) & ~known
    context = ~scored & ~unknown
    nll_sum = torch.zeros(len(record))
    per_order = []
    per_run = max(1, min(cfg.batch_size, cfg.batch_residues // len(record)))  # memory follows batch_residues
    for start in range(0, orders, per_run):
        count = min(per_run, orders - start)
        b = collate([rec] * count)
        order = None
        if backend.cfg.autoregressive:
            order = torch.cat(
                [
                    random_decoding_order(context[None], torch.Generator().manual_seed(cfg.seed + start + k))
                    for k in range(count)
                ]
            )
            order = order + 2.0 * unknown.to(order.dtype)
        logp = torch.log_softmax(backend.logits(b, b.tokens, order).float(), dim=-1)
        nll = -logp.gather(-1, b.S.unsqueeze(-1)).squeeze(-1) * scored
        nll_sum += nll.sum(0)
        per_order.append(nll.sum(1) / scored.sum().clamp(min=1))
    return nll_sum, torch.cat(per_order)


CSV_FIELDS = ("structure", "sequence_name", "mean_nll", "std_nll", "perplexity", "scored", "orders", "sequence")


def write_scores(path: str | os.PathLike, scores: list[Score]) -> Path:
    """CSV (one row per sequence) at `path` and JSON with per-residue NLL at <stem>.json."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for s in scores:
            row = {k: v for k, v in asdict(s).items() if k in CSV_FIELDS}
            writer.writerow(
                {
                    **row,
                    "mean_nll": f"{s.mean_nll:.5f}",
                    "std_nll": f"{s.std_nll:.5f}",
                    "perplexity": f"{s.perplexity:.4f}",
                }
            )
    json_path = out.with_suffix(".json")
    json_path.write_text(
        json.dumps([{**asdict(s), "perplexity": s.perplexity, "alphabet": ALPHABET} for s in scores], indent=1) + "\n"
    )
    return json_path
