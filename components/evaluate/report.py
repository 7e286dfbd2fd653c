"""The evaluation report as a biologist reads it: report.md, and report.html rendered from it with
markdown-it-py (plots embedded, so the page stands alone in the Kubeflow UI and in MLflow; wide
tables scroll inside the page instead of overflowing it); the per-protein table (per_protein.csv
and a section of the report) and the plots: confusion, recovery by length, and the distribution of
per-protein recovery against the constant predictor.
"""

from __future__ import annotations

import base64
import csv
import html
import math
import os
from dataclasses import asdict, dataclass

import numpy as np

from invfold.components.protein.alphabet import ALPHABET, NUM_AA

# what a person opens first: on the pipeline's MLflow run too
REPORT_FILES = ("report.html", "per_protein.csv")
PLOTS = {
    "confusion": "confusion.png",
    "recovery_by_length": "recovery_by_length.png",
    "recovery_distribution": "recovery_distribution.png",
}
STYLE = (
    "body{font-family:sans-serif;max-width:64em;margin:1em auto;padding:0 1em;line-height:1.4}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right;"
    "white-space:nowrap}td:first-child,th:first-child{text-align:left}"
    ".table-scroll{overflow-x:auto;max-width:100%;margin:.5em 0}"
    ".table-scroll.tall{max-height:32em;overflow-y:auto}"
    ".table-scroll.tall thead th{position:sticky;top:0;background:#f6f6f6}"
    "img{max-width:100%;height:auto}"
)
TALL_TABLE_ROWS = 25  # longer tables scroll inside a box of their own


@dataclass(frozen=True)
class ProteinRow:
    """One test protein: its scored residues (observed backbone, standard letter), the median's
    ingredients (recovery of the designed sequence) and its teacher-forced perplexity."""

    protein: str
    length: int
    chains: int
    scored_residues: int
    recovery: float | None
    perplexity: float | None


def per_protein_rows(records, nll: np.ndarray, count: np.ndarray, correct: np.ndarray) -> list[ProteinRow]:
    rows = []
    for i, record in enumerate(records):
        n = float(count[i])
        rows.append(
            ProteinRow(
                protein=record.name,
                length=len(record),
                chains=int(record.num_chains),
                scored_residues=int(n),
                recovery=float(correct[i] / n) if n else None,
                perplexity=float(math.exp(min(nll[i] / n, 700.0))) if n else None,
            )
        )
    return rows


def write_per_protein_csv(path: str, rows: list[ProteinRow]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(ProteinRow.__dataclass_fields__))
        for row in rows:
            writer.writerow(
                ["" if v is None else round(v, 6) if isinstance(v, float) else v for v in asdict(row).values()]
            )


def write_plots(
    out: str, confusion: np.ndarray, length_rows: list[dict], rows: list[ProteinRow], constant: float | None
) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {key: os.path.join(out, name) for key, name in PLOTS.items()}
    totals = confusion.sum(1, keepdims=True)
    normalized = np.divide(confusion, totals, out=np.zeros(confusion.shape), where=totals > 0)
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

    recoveries = [r.recovery for r in rows if r.recovery is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(recoveries, bins=np.linspace(0, 1, 41), color="tab:blue", alpha=0.8)
    if recoveries:
        median = float(np.median(recoveries))
        ax.axvline(median, color="black", linestyle="-", label=f"median {median:.3f}")
    if constant is not None and constant == constant:
        ax.axvline(constant, color="tab:red", linestyle="--", label=f"constant predictor {constant:.3f}")
    ax.set_xlim(0, 1)
    ax.set_xlabel("recovery of the designed sequence (per protein)")
    ax.set_ylabel("proteins")
    ax.set_title(f"Per-protein recovery, test set (n={len(recoveries)})")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(paths["recovery_distribution"], dpi=100)
    plt.close(fig)
    return paths


def _fmt(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-" if value is None else str(value)


def _table(head: list[str], rows: list[list]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows),
    ]


def _without_empty_columns(head: list[str], rows: list[list]) -> tuple[list[str], list[list]]:
    """The columns with a value in some row: a one-shot model has no 'across orders' column, a run
    without sampling no 'sampled recovery' (a column of dashes only widens the table)."""
    keep = [j for j in range(len(head)) if any(row[j] is not None for row in rows)]
    return [head[j] for j in keep], [[row[j] for j in keep] for row in rows]


def _interval(figures: dict) -> str | None:
    if "recovery_ci_low" not in figures:
        return None
    return f"{figures['recovery_ci_low']:.3f} - {figures['recovery_ci_high']:.3f}"


def _across_orders(figures: dict) -> str | None:
    if "recovery_orders_mean" not in figures:
        return None
    return f"{figures['recovery_orders_mean']:.3f} +- {figures['recovery_orders_sd']:.3f}"


def _statistics_note(metrics: dict) -> str:
    """How the figures' noise was measured: orders and their seeds (none for a one-shot model,
    whose argmax no order changes), the bootstrap, the sampling."""
    orders = metrics.get("orders") or {"count": 1, "seeds": [metrics["seed"]]}
    boot = metrics.get("bootstrap") or {"resamples": 0}
    sampled = metrics.get("sampled")
    if metrics["model_config"].get("decoding") == "one_shot":
        designs = "One-shot argmax: one design per protein, independent of any decoding order. "
    elif orders["count"] == 1:
        designs = f"Greedy recovery per protein from one decoding order (seed {orders['seeds'][0]}). "
    else:
        designs = (
            f"Greedy recovery per protein is the mean over {orders['count']} decoding orders (seeds "
            f"{', '.join(map(str, orders['seeds']))}); 'across orders' is the mean and sd of each order's median. "
        )
    return (
        designs
        + (
            f"95% interval: percentile bootstrap of the median over proteins ({boot['resamples']} resamples, "
            f"seed {boot['seed']}). "
            if boot["resamples"]
            else "No bootstrap interval (0 resamples). "
        )
        + (
            f"Sampled recovery: median over proteins of {sampled['designs_per_protein']} designs sampled at "
            f"T = {sampled['temperature']} (test and its subsets)."
            if sampled
            else "No sampled designs."
        )
    )


def report_markdown(metrics: dict, rows: list[ProteinRow]) -> str:
    baseline = metrics["baseline"] or {"letter": None, "recovery": {}}
    constant = (
        f"Constant predictor: the train split's most frequent residue `{baseline['letter']}` everywhere."
        if baseline["letter"]
        else f"Constant predictor: unavailable ({baseline.get('unavailable', 'no train split')})."
    )
    written = ", ".join(
        part
        for part in (
            metrics.get("written") and f"written {metrics['written']}",
            metrics.get("invfold_version") and f"invfold {metrics['invfold_version']}",
            metrics.get("command") and f"by `{metrics['command']}`",
        )
        if part
    )
    lines = [
        "# Evaluation report",
        "",
        *([f"{written[:1].upper()}{written[1:]}.", ""] if written else []),
        f"Model `{metrics.get('model_label') or os.path.basename(metrics['model'])}` "
        f"({metrics['model_config']['decoding']}), "
        f"data digest `{metrics['data_digest']}`; designs: {metrics['decoding']}; seed {metrics['seed']}. "
        "Recovery: the fraction of a protein's residues whose designed letter is the native one, "
        "median over proteins; perplexity: teacher-forced, pooled over residues.",
        "",
        constant,
        "",
        _statistics_note(metrics),
        "",
    ]
    lines += _table(
        *_without_empty_columns(
            [
                "dataset",
                "proteins",
                "residues",
                "perplexity",
                "median recovery",
                "95% interval",
                "across orders (mean +- sd)",
                "sampled recovery",
                "constant predictor",
            ],
            [
                [name, m.get("proteins", 0), m.get("residues", 0), m.get("perplexity"), m.get("recovery")]
                + [_interval(m), _across_orders(m), m.get("sampled_recovery"), baseline["recovery"].get(name)]
                for name, m in metrics["datasets"].items()
            ],
        )
    )
    lines += ["", "![per-protein recovery](recovery_distribution.png)", ""]
    lines += ["## Recovery by length (test)", ""]
    lines += _table(
        ["length", "proteins", "median recovery"],
        [[r["bin"], r["proteins"], r["recovery"]] for r in metrics["recovery_by_length"]],
    )
    lines += ["", "![recovery by length](recovery_by_length.png)"]
    for title, key, label in (
        ("Recovery by burial (test, pooled; CB neighbours within 10 A)", "recovery_by_burial", "burial"),
        (
            "Recovery by secondary structure (test, pooled; from backbone dihedrals)",
            "recovery_by_secondary_structure",
            "secondary structure",
        ),
    ):
        lines += ["", f"## {title}", ""]
        lines += _table(
            [label, "residues", "recovery"], [[n, r["residues"], r["recovery"]] for n, r in metrics[key].items()]
        )
    recall = metrics["recall_by_residue"]
    lines += ["", "## Recall by native residue (test, pooled)", ""]
    lines += _table(["residue", *recall], [["recall", *(r["recall"] for r in recall.values())]])
    lines += ["", "![confusion](confusion.png)"]
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
    ordered = sorted(rows, key=lambda r: (r.recovery is None, -(r.recovery or 0.0), r.protein))
    lines += [
        "",
        "## Per protein (test)",
        "",
        f"{len(rows)} proteins, best recovered first; the same table is `per_protein.csv`.",
        "",
    ]
    lines += _table(
        list(ProteinRow.__dataclass_fields__),
        [[r.protein, r.length, r.chains, r.scored_residues, r.recovery, r.perplexity] for r in ordered],
    )
    return "\n".join(lines) + "\n"


def render_html(markdown: str, out: str, title: str = "invfold evaluation") -> str:
    """report.md as one self-contained page: images inlined from `out`, every table in a box that
    scrolls sideways (and, when long, down with its header kept in view)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    default_image = md.renderer.rules["image"]

    def table_open(renderer, tokens, idx, options, env):
        rows = 0
        for token in tokens[idx:]:
            if token.type == "table_close":
                break
            rows += token.type == "tr_open"
        tall = " tall" if rows > TALL_TABLE_ROWS else ""
        return f'<div class="table-scroll{tall}"><table>\n'

    def image(renderer, tokens, idx, options, env):
        token = tokens[idx]
        path = os.path.join(out, os.path.basename(str(token.attrGet("src") or "")))
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                token.attrSet("src", "data:image/png;base64," + base64.b64encode(fh.read()).decode())
        return default_image(tokens, idx, options, env)

    md.add_render_rule("table_open", table_open)
    md.add_render_rule("table_close", lambda renderer, *args: "</table></div>\n")
    md.add_render_rule("image", image)
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{STYLE}</style></head><body>\n" + md.render(markdown) + "</body></html>\n"
    )


def write_reports(out: str, metrics: dict, rows: list[ProteinRow]) -> None:
    markdown = report_markdown(metrics, rows)
    with open(os.path.join(out, "report.md"), "w") as fh:
        fh.write(markdown)
    with open(os.path.join(out, "report.html"), "w") as fh:
        fh.write(render_html(markdown, out))
