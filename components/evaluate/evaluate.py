"""`evaluate(EvaluateConfig) -> metrics`: how well a trained model designs sequences.

Scores the test set once (perplexity teacher-forced; recovery of designed sequences, see
metrics.py) and derives every subset from those per-protein scores: the automatic ones (short
chains L <= 100, single-chain) and each subset dataset of the prepared data whose chains are in
the test set (others are scored on their own); validation is scored on its own too (the pipeline
chooses its champion on it). On the test set also: recall per native residue, recovery by burial
and by secondary structure (structure_classes.py), diversity among designs sampled at a low
temperature. A prepared set without train chains (an external benchmark list) evaluates with the
constant predictor reported as unavailable. Writes metrics.json, confusion.json, PNG plots,
report.md and report.html (plots embedded, so the file stands alone in the Kubeflow UI).
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from invfold.components.evaluate.metrics import DatasetScores, score_dataset
from invfold.components.evaluate.structure_classes import BURIAL, SECONDARY, burial_classes, secondary_structure
from invfold.components.model.io import load_model_or_published
from invfold.components.prep.shards import open_prepared
from invfold.components.protein.alphabet import AA_TO_INDEX, ALPHABET, NUM_AA
from invfold.errors import ConfigError, InputError
from invfold.options import option

log = logging.getLogger(__name__)

TABLE_HEADS = ("| length |", "| burial |", "| secondary structure |", "| residue |")
LENGTH_BINS = (0, 100, 200, 300, 400, 10**9)


@dataclass
class EvaluateConfig:
    """model_path: model.pt from training. data: prepared folder. out: local output folder.
    datasets: what to report besides the automatic test subsets (default: test plus every subset
    dataset in the prepared data). seed: autoregressive decoding orders. short_max_length: the
    "short" subset's bound (CATH's test_split_L100 uses 100). designs_per_protein: sequences sampled
    per test protein at `diversity_temperature` for the diversity figure (0: no diversity figure)."""

    model_path: str = option(
        positional=True,
        metavar="MODEL",
        help="model file (model.pt; path or URI) or published weights (e.g. proteinmpnn:v_48_020)",
    )
    data: str = option(help="prepared folder (path or URI)")
    out: str = option(help="output folder")
    datasets: list[str] | None = option(
        None,
        "dataset to score (repeatable; default: test, validation and every subset dataset)",
        aliases=("--dataset",),
        metavar="DATASET",
    )
    seed: int = option(0, "seed of autoregressive decoding orders")
    tokens_per_batch: int = option(6000, "residue budget of one scoring batch")
    short_max_length: int = option(100, "longest chain of the 'short' subset")
    threads: int | None = option(None, "torch threads (default: torch's)")
    designs_per_protein: int = option(2, "sequences sampled per test protein for the diversity figure (0: none)")
    diversity_temperature: float = option(0.1, "sampling temperature for diversity")

    def __post_init__(self) -> None:
        self.model_path, self.data, self.out = str(self.model_path), str(self.data), str(self.out)
        if not self.model_path or not self.data or not self.out:
            raise ConfigError("EvaluateConfig: model_path, data and out must be given")
        if self.tokens_per_batch < 1 or self.short_max_length < 1:
            raise ConfigError("EvaluateConfig: tokens_per_batch and short_max_length must be positive")
        if self.designs_per_protein < 0 or self.designs_per_protein == 1:
            raise ConfigError(
                f"EvaluateConfig.designs_per_protein: expected 0 or at least 2, got {self.designs_per_protein}"
            )
        if not 0 < self.diversity_temperature <= 10:
            raise ConfigError(
                f"EvaluateConfig.diversity_temperature: expected in (0, 10], got {self.diversity_temperature}"
            )
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"EvaluateConfig.threads: expected a positive int, got {self.threads!r}")


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
        np.where(keep, scores.nll, 0), np.where(keep, scores.count, 0), np.where(keep, scores.correct, 0)
    )


def score_split(model_path: str, data: str, split: str, threads: int | None = None) -> dict:
    """One split's figures (perplexity, recovery, ...) scored exactly as evaluate() scores that
    split (same seed and batch budget), without the test-set report: the compare step scores the
    champion and a fine-tuned model's starting weights on validation with it."""
    defaults = EvaluateConfig(model_path=model_path, data=data, out="-", threads=threads)
    if threads:
        torch.set_num_threads(threads)
    prepared = open_prepared(data)
    if split not in prepared.datasets or not len(prepared.open(split)):
        raise ConfigError(f"{data}: no {split!r} chains to score (has {prepared.datasets})")
    dataset = prepared.open(split)
    model = load_model_or_published(model_path)
    rows = list(range(len(dataset)))
    return score_dataset(
        model, dataset, rows, defaults.tokens_per_batch, defaults.seed, label=f"score {split}"
    ).summary()


def evaluate(cfg: EvaluateConfig) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    os.makedirs(cfg.out, exist_ok=True)
    model = load_model_or_published(cfg.model_path)
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
            own = score_dataset(model, dataset, rows, cfg.tokens_per_batch, cfg.seed, label=f"evaluate {name}")
            subsets[name] = (dataset, rows, own)

    results, baseline = {}, {}
    for name, (dataset, rows, own) in subsets.items():
        if own is None and sorted(rows) == test_rows:  # a subset equal to the test set: its figures
            results[name] = dict(results["test"])
        else:
            results[name] = (own if own is not None else _subset(scores, rows)).summary()
        if letter is not None:
            baseline[name] = constant_recovery(dataset, rows, letter)

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
        "model": cfg.model_path,
        "model_config": model.cfg.to_dict(),
        "data": cfg.data,
        "data_digest": data.digest,
        "seed": cfg.seed,
        "decoding": "greedy autoregressive, seeded random order" if model.cfg.autoregressive else "one-shot argmax",
        "datasets": results,
        "baseline": {"letter": letter, "recovery": baseline}
        if letter
        else {"letter": None, "recovery": {}, "unavailable": "the prepared data has no train chains"},
        "recovery_by_length": length_rows,
        "recall_by_residue": _recall_by_residue(confusion),
        "recovery_by_burial": _class_table(BURIAL, by_burial),
        "recovery_by_secondary_structure": _class_table(SECONDARY, by_secondary),
        "diversity": diversity,
    }
    confusion_doc = {"labels": list(ALPHABET), "rows": "native", "columns": "designed", "matrix": confusion.tolist()}
    with open(os.path.join(cfg.out, "metrics.json"), "w") as fh:
        json.dump(metrics, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(cfg.out, "confusion.json"), "w") as fh:
        json.dump(confusion_doc, fh)
        fh.write("\n")
    plots = _plots(cfg.out, confusion, length_rows)
    _reports(cfg.out, metrics, plots)
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


def _plots(out: str, confusion: np.ndarray, length_rows: list[dict]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {
        "confusion": os.path.join(out, "confusion.png"),
        "recovery_by_length": os.path.join(out, "recovery_by_length.png"),
    }
    rows = confusion.sum(1, keepdims=True)
    normalized = np.divide(confusion, rows, out=np.zeros(confusion.shape), where=rows > 0)
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    image = ax.imshow(normalized, cmap="viridis", vmin=0, vmax=max(normalized.max(), 1e-9))
    ax.set_xticks(range(NUM_AA), list(ALPHABET))
    ax.set_yticks(range(NUM_AA), list(ALPHABET))
    ax.set_xlabel("designed")
    ax.set_ylabel("native")
    ax.set_title("Confusion (row-normalised), test set")
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(paths["confusion"], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [r["bin"] for r in length_rows]
    ax.bar(range(len(labels)), [r["recovery"] for r in length_rows], color="tab:blue")
    ax.set_xticks(
        range(len(labels)), [f"{lab}\n(n={r['proteins']})" for lab, r in zip(labels, length_rows, strict=True)]
    )
    ax.set_xlabel("chain length")
    ax.set_ylabel("median recovery")
    ax.set_ylim(0, 1)
    ax.set_title("Recovery by length, test set")
    fig.tight_layout()
    fig.savefig(paths["recovery_by_length"], dpi=100)
    plt.close(fig)
    return paths


def _fmt(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _reports(out: str, metrics: dict, plots: dict[str, str]) -> None:
    baseline = metrics["baseline"] or {"letter": None, "recovery": {}}
    constant = (
        f"Constant predictor: the train split's most frequent residue `{baseline['letter']}` everywhere."
        if baseline["letter"]
        else f"Constant predictor: unavailable ({baseline.get('unavailable', 'no train split')})."
    )
    header = "| dataset | proteins | residues | perplexity | median recovery | constant predictor |"
    lines = [
        "# Evaluation report",
        "",
        f"Model `{os.path.basename(metrics['model'])}` ({metrics['model_config']['decoding']}), "
        f"data digest `{metrics['data_digest']}`; designs: {metrics['decoding']}; seed {metrics['seed']}.",
        constant,
        "",
        header,
        "|---|---|---|---|---|---|",
    ]
    for name, m in metrics["datasets"].items():
        lines.append(
            f"| {name} | {m.get('proteins', 0)} | {m.get('residues', 0)} | "
            f"{_fmt(m.get('perplexity', '-'))} | {_fmt(m.get('recovery', '-'))} | "
            f"{_fmt(baseline['recovery'].get(name, '-'))} |"
        )
    lines += ["", "## Recovery by length (test)", "", "| length | proteins | median recovery |", "|---|---|---|"]
    lines += [f"| {r['bin']} | {r['proteins']} | {r['recovery']:.3f} |" for r in metrics["recovery_by_length"]]
    for title, key, label in (
        ("Recovery by burial (test, pooled; CB neighbours within 10 A)", "recovery_by_burial", "burial"),
        (
            "Recovery by secondary structure (test, pooled; from backbone dihedrals)",
            "recovery_by_secondary_structure",
            "secondary structure",
        ),
    ):
        lines += ["", f"## {title}", "", f"| {label} | residues | recovery |", "|---|---|---|"]
        lines += [f"| {name} | {r['residues']} | {_fmt(r['recovery'])} |" for name, r in metrics[key].items()]
    recall = metrics["recall_by_residue"]
    lines += [
        "",
        "## Recall by native residue (test, pooled)",
        "",
        "| residue | " + " | ".join(recall) + " |",
        "|---|" + "---|" * len(recall),
        "| recall | "
        + " | ".join(_fmt(r["recall"]) if r["recall"] is not None else "-" for r in recall.values())
        + " |",
    ]
    diversity = metrics["diversity"]
    if diversity and diversity["pairwise_difference"] is not None:
        lines += [
            "",
            (
                f"Diversity: {diversity['designs_per_protein']} designs per protein at T={diversity['temperature']:g} "
                f"differ at {diversity['pairwise_difference']:.3f} of positions (median over {diversity['proteins']} "
                f"proteins of the mean pairwise difference); their median recovery {diversity['sample_recovery']:.3f}."
            ),
        ]
    lines += ["", "![confusion](confusion.png)", "", "![recovery by length](recovery_by_length.png)", ""]
    markdown = "\n".join(lines)
    with open(os.path.join(out, "report.md"), "w") as fh:
        fh.write(markdown)

    body = []
    for line in lines:
        if line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("|---"):
            continue
        elif line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            tag = "th" if line == header or line.startswith(TABLE_HEADS) else "td"
            body.append("<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>")
        elif line.startswith("![") and "(" in line:
            name = line[line.index("(") + 1 : -1]
            key = "confusion" if name.startswith("confusion") else "recovery_by_length"
            with open(plots[key], "rb") as fh:
                encoded = base64.b64encode(fh.read()).decode()
            body.append(f'<img alt="{key}" src="data:image/png;base64,{encoded}"/>')
        elif line:
            body.append(f"<p>{html.escape(line)}</p>")
    # group consecutive table rows into tables
    rendered, in_table = [], False
    for item in body:
        if item.startswith("<tr>") and not in_table:
            rendered.append("<table>")
            in_table = True
        elif not item.startswith("<tr>") and in_table:
            rendered.append("</table>")
            in_table = False
        rendered.append(item)
    if in_table:
        rendered.append("</table>")
    page = (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>invfold evaluation</title>'
        "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em}</style>"
        "</head><body>" + "\n".join(rendered) + "</body></html>\n"
    )
    with open(os.path.join(out, "report.html"), "w") as fh:
        fh.write(page)
