"""`evaluate(EvaluateConfig) -> metrics`: how well a trained model designs sequences.

Scores the test set once (perplexity teacher-forced; recovery of designed sequences, see
metrics.py) and derives every subset from those per-protein scores: the automatic ones (short
chains L <= 100, single-chain) and each subset dataset of the prepared data whose chains are in
the test set (others are scored on their own); validation is scored on its own too (the pipeline
chooses its champion on it). On the test set also: recall per native residue, recovery by burial
and by secondary structure (structure_classes.py), diversity among designs sampled at a low
temperature. A prepared set without train chains (an external benchmark list) evaluates with the
constant predictor reported as unavailable. Writes metrics.json, confusion.json, per_protein.csv, PNG
plots, report.md and report.html (report.py: plots embedded, so the file stands alone in the
Kubeflow UI and MLflow).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections import Counter

import numpy as np
import torch

from invfold import __version__
from invfold.components.evaluate.config import EvaluateConfig
from invfold.components.evaluate.metrics import DatasetScores, order_seed, score_dataset
from invfold.components.evaluate.report import (
    per_protein_rows,
    write_per_protein_csv,
    write_plots,
    write_reports,
)
from invfold.components.evaluate.structure_classes import BURIAL, SECONDARY, burial_classes, secondary_structure
from invfold.components.model.io import load_model_or_published
from invfold.components.prep.shards import open_prepared
from invfold.components.protein.alphabet import AA_TO_INDEX, ALPHABET, NUM_AA
from invfold.errors import ConfigError, InputError

log = logging.getLogger(__name__)

LENGTH_BINS = (0, 100, 200, 300, 400, 10**9)


def most_frequent_letter(dataset) -> str | None:
    """The dataset's most frequent standard letter; None for a dataset without any (e.g. the empty
    train split of an external benchmark list)."""
    counts: Counter = Counter()
    for i in range(len(dataset)):
        counts.update(dataset[i].seq)
    counts = Counter({k: v for k, v in counts.items() if k in AA_TO_INDEX})
    return counts.most_common(1)[0][0] if counts else None


def constant_recovery(dataset, rows: list[int], letter: str) -> float:
    """Median per-protein recovery of designing `letter` everywhere (observed residues only)."""
    values = []
    for i in rows:
        record = dataset[i]
        mask = np.asarray(record.mask, dtype=bool)
        if mask.any():
            values.append(float((np.frombuffer(record.seq.encode(), "S1")[mask] == letter.encode()).mean()))
    return float(np.median(values)) if values else float("nan")


def _subset(scores: DatasetScores, rows: list[int]) -> DatasetScores:
    keep = np.zeros(len(scores.nll), dtype=bool)
    keep[rows] = True
    return DatasetScores(
        np.where(keep, scores.nll, 0),
        np.where(keep, scores.count, 0),
        np.where(keep, scores.correct, 0),
        correct_by_order=None
        if scores.correct_by_order is None
        else np.where(keep[:, None], scores.correct_by_order, 0),
        sampled_correct=None if scores.sampled_correct is None else np.where(keep, scores.sampled_correct, 0),
    )


def chain_recoveries(scores: DatasetScores, dataset, rows: list[int]) -> dict[str, float]:
    """Chain name -> recovery (mean over decoding orders) of the scored rows."""
    return {dataset[i].name: float(scores.correct[i] / scores.count[i]) for i in rows if scores.count[i] > 0}


def score_split(model_path: str, data: str, split: str, threads: int | None = None) -> dict:
    """One split's figures (perplexity, recovery, ...) scored exactly as evaluate() scores that
    split (same seed, orders and batch budget), without the test-set report, plus `chains` (chain
    name -> recovery, for the paired test): the compare step scores the champion and a fine-tuned
    model's starting weights on validation with it."""
    defaults = EvaluateConfig(model_path=model_path, data=data, out="-", threads=threads)
    if threads:
        torch.set_num_threads(threads)
    prepared = open_prepared(data)
    if split not in prepared.datasets or not len(prepared.open(split)):
        raise ConfigError(f"{data}: no {split!r} chains to score (has {prepared.datasets})")
    dataset = prepared.open(split)
    model = load_model_or_published(model_path)
    rows = list(range(len(dataset)))
    scores = score_dataset(
        model, dataset, rows, defaults.tokens_per_batch, defaults.seed, label=f"score {split}", orders=defaults.orders
    )
    return {
        **scores.summary(defaults.bootstrap_resamples, defaults.seed),
        "chains": chain_recoveries(scores, dataset, rows),
    }


def evaluate(cfg: EvaluateConfig) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    os.makedirs(cfg.out, exist_ok=True)
    model = load_model_or_published(cfg.model_path)
    # a one-shot model's argmax does not depend on a decoding order: one design, not cfg.orders copies
    orders = cfg.orders if model.cfg.autoregressive else 1
    data = open_prepared(cfg.data)
    if "test" not in data.datasets:
        raise InputError(cfg.data, None, None, "a 'test' dataset", f"datasets {data.datasets}", reason="no_test_set")
    # validation is scored too when present: the pipeline picks its champion on it, never on test
    requested = cfg.datasets or ["test"] + [
        d for d in data.datasets if d not in ("train", "test") and (d != "validation" or len(data.open(d)))
    ]
    missing = [d for d in requested if d not in data.datasets]
    if missing:
        raise ConfigError(f"{cfg.data}: no dataset(s) {missing} (has {data.datasets})")

    test = data.open("test")
    test_rows = list(range(len(test)))
    scores = score_dataset(
        model,
        test,
        test_rows,
        cfg.tokens_per_batch,
        cfg.seed,
        keep_designed=True,
        designs=cfg.designs_per_protein,
        temperature=cfg.diversity_temperature,
        label="evaluate test",
        orders=orders,
    )
    records = [test[i] for i in test_rows]
    name_to_row = {r.name: i for i, r in enumerate(records)}
    letter = most_frequent_letter(data.open("train")) if "train" in data.datasets else None

    subsets: dict[str, tuple[object, list[int], DatasetScores]] = {
        "test": (test, test_rows, scores),
        f"test_short_L{cfg.short_max_length}": (
            test,
            [i for i, r in enumerate(records) if len(r) <= cfg.short_max_length],
            None,
        ),
        "test_single_chain": (test, [i for i, r in enumerate(records) if r.num_chains == 1], None),
    }
    for name in requested:
        if name == "test":
            continue
        dataset = data.open(name)
        names = [dataset[i].name for i in range(len(dataset))]
        if all(n in name_to_row for n in names):
            subsets[name] = (test, [name_to_row[n] for n in names], None)
        else:
            rows = list(range(len(dataset)))
            own = score_dataset(
                model, dataset, rows, cfg.tokens_per_batch, cfg.seed, label=f"evaluate {name}", orders=orders
            )
            subsets[name] = (dataset, rows, own)

    results, baseline = {}, {}
    for name, (dataset, rows, own) in subsets.items():
        if own is None and sorted(rows) == test_rows:  # a subset equal to the test set: its figures
            results[name] = dict(results["test"])
        else:
            summary = (own if own is not None else _subset(scores, rows)).summary(cfg.bootstrap_resamples, cfg.seed)
            results[name] = summary
        if letter is not None:
            baseline[name] = constant_recovery(dataset, rows, letter)

    per_chain = {}  # validation chain -> recovery: the registration gate's paired test reads them
    if "validation" in subsets:
        dataset, rows, own = subsets["validation"]
        per_chain["validation"] = chain_recoveries(own if own is not None else scores, dataset, rows)

    confusion = np.zeros((NUM_AA, NUM_AA), dtype=np.int64)
    by_length: dict[int, list[float]] = {}
    by_burial = np.zeros((len(BURIAL), 2), dtype=np.int64)  # [class, (residues, correct)]
    by_secondary = np.zeros((len(SECONDARY), 2), dtype=np.int64)
    for i, record in enumerate(records):
        designed = scores.designed[i]
        mask = np.asarray(record.mask, dtype=bool) & np.array([c in AA_TO_INDEX for c in record.seq])
        native = np.array([AA_TO_INDEX.get(c, 0) for c in record.seq])
        np.add.at(confusion, (native[mask], designed[mask]), 1)
        correct = (native == designed) & mask
        for table, classes in (
            (by_burial, burial_classes(record.coords, record.mask)),
            (by_secondary, secondary_structure(record.coords, record.residue_index, record.mask)),
        ):
            keep = mask & (classes >= 0)
            np.add.at(table, (classes[keep], 0), 1)
            np.add.at(table, (classes[keep], 1), correct[keep].astype(np.int64))
        if scores.count[i] > 0:
            bin_index = int(np.searchsorted(LENGTH_BINS, len(record), side="right") - 1)
            by_length.setdefault(bin_index, []).append(scores.correct[i] / scores.count[i])
    length_rows = [
        {"bin": _bin_label(b), "proteins": len(v), "recovery": float(np.median(v))}
        for b, v in sorted(by_length.items())
    ]

    diversity = _diversity(scores.samples, test, test_rows, cfg) if cfg.designs_per_protein else None

    metrics = {
        "written": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "invfold_version": __version__,
        "command": cfg.command,
        "model": cfg.model_path,
        "model_label": cfg.model_label or os.path.basename(cfg.model_path),
        "model_config": model.cfg.to_dict(),
        "data": cfg.data,
        "data_digest": data.digest,
        "seed": cfg.seed,
        "decoding": f"greedy autoregressive, {cfg.orders} seeded random orders (per-chain mean)"
        if model.cfg.autoregressive
        else "one-shot argmax",
        "orders": {"count": orders, "seeds": [order_seed(cfg.seed, k) for k in range(orders)]},
        "bootstrap": {"resamples": cfg.bootstrap_resamples, "seed": cfg.seed, "interval": "95% percentile, median"},
        "sampled": {"temperature": cfg.diversity_temperature, "designs_per_protein": cfg.designs_per_protein}
        if cfg.designs_per_protein
        else None,
        "datasets": results,
        "baseline": {"letter": letter, "recovery": baseline}
        if letter
        else {"letter": None, "recovery": {}, "unavailable": "the prepared data has no train chains"},
        "recovery_by_length": length_rows,
        "recall_by_residue": _recall_by_residue(confusion),
        "recovery_by_burial": _class_table(BURIAL, by_burial),
        "recovery_by_secondary_structure": _class_table(SECONDARY, by_secondary),
        "diversity": diversity,
        "per_chain": per_chain,
    }
    confusion_doc = {"labels": list(ALPHABET), "rows": "native", "columns": "designed", "matrix": confusion.tolist()}
    with open(os.path.join(cfg.out, "metrics.json"), "w") as fh:
        json.dump(metrics, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(cfg.out, "confusion.json"), "w") as fh:
        json.dump(confusion_doc, fh)
        fh.write("\n")
    rows = per_protein_rows(records, scores.nll, scores.count, scores.correct)
    write_per_protein_csv(os.path.join(cfg.out, "per_protein.csv"), rows)
    write_plots(cfg.out, confusion, length_rows, rows, baseline.get("test"))
    write_reports(cfg.out, metrics, rows)
    log.info(
        "test: perplexity %.3f, median recovery %.3f (constant '%s': %s)",
        results["test"].get("perplexity", float("nan")),
        results["test"].get("recovery", float("nan")),
        letter,
        baseline.get("test"),
    )
    return metrics


def _recall_by_residue(confusion: np.ndarray) -> dict[str, dict]:
    """Native letter -> residues and recall (designed == native) over the test set, pooled."""
    natives = confusion.sum(1)
    return {
        letter: {"residues": int(natives[i]), "recall": float(confusion[i, i] / natives[i]) if natives[i] else None}
        for i, letter in enumerate(ALPHABET)
    }


def _class_table(names: tuple[str, ...], table: np.ndarray) -> dict[str, dict]:
    """Class -> residues and pooled recovery (None for a class without residues)."""
    return {
        name: {"residues": int(n), "recovery": float(c / n) if n else None}
        for name, (n, c) in zip(names, table.tolist(), strict=True)
    }


def _diversity(samples: dict[int, np.ndarray], dataset, rows: list[int], cfg: EvaluateConfig) -> dict:
    """Mean pairwise difference among `designs_per_protein` sequences sampled per protein at
    `diversity_temperature` (fraction of observed positions where two designs differ); the median
    over proteins, and the samples' median recovery next to it (diversity is cheap at low recovery).
    samples: row -> [designs, L], decoded by score_dataset with the greedy designs."""
    differences, recoveries = [], []
    for row in rows:
        record = dataset[row]
        mask = np.asarray(record.mask, dtype=bool) & np.array([c in AA_TO_INDEX for c in record.seq])
        if not mask.any():
            continue
        designs = samples[row][:, mask]  # [designs, observed]
        native = np.array([AA_TO_INDEX[c] for c, m in zip(record.seq, mask, strict=True) if m])
        k = len(designs)
        pairs = [(designs[a] != designs[b]).mean() for a in range(k) for b in range(a + 1, k)]
        differences.append(float(np.mean(pairs)))
        recoveries.append(float((designs == native).mean()))
    return {
        "designs_per_protein": cfg.designs_per_protein,
        "temperature": cfg.diversity_temperature,
        "proteins": len(differences),
        "pairwise_difference": float(np.median(differences)) if differences else None,
        "sample_recovery": float(np.median(recoveries)) if recoveries else None,
    }


def _bin_label(index: int) -> str:
    low, high = LENGTH_BINS[index], LENGTH_BINS[index + 1]
    return f"{low}-{high - 1}" if high < 10**9 else f">={low}"
