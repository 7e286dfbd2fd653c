"""The design pipeline's steps as plain functions (the KFP wrappers are in component.py):
fetch a registered model, plan the shards of a structure set, design (and score) one shard,
gather the shards into designs + summary + a Markdown report and record them in MLflow.

Kept apart from the `@dsl.component` definitions: inside a running step KFP loads a reduced
`kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import statistics
import time
from collections import Counter

from invfold import storage
from invfold.components.design.batch import design_batch, read_structures
from invfold.components.design.design import DesignConfig
from invfold.components.tracking import RunContext, Tracker, fetch_registered_file
from invfold.errors import ConfigError
from invfold.runtime import record_timing

MODEL_PT = "model_pt/model.pt"  # where the version's source run holds the checkpoint (train/record.py)
MODEL_JSON = "model.json"  # beside the fetched model.pt: the reference it was fetched by and its version


def fetch_model_step(*, model_name: str, model_version: str, tracking_uri: str, out_dir: str) -> dict:
    """model.pt of a registered version (number) or alias (e.g. "champion") into out_dir, and
    beside it model.json: the reference (models:/NAME@ALIAS or /VERSION) and the version it
    resolved to, which the designs' headers name (a kept FASTA says which model wrote it)."""

    os.makedirs(out_dir, exist_ok=True)
    version = model_version or "champion"
    found = fetch_registered_file(tracking_uri, model_name, version, MODEL_PT, out_dir)
    if os.path.abspath(found["path"]) != os.path.abspath(os.path.join(out_dir, "model.pt")):
        shutil.move(found["path"], os.path.join(out_dir, "model.pt"))
        shutil.rmtree(os.path.join(out_dir, os.path.dirname(MODEL_PT)), ignore_errors=True)
    reference = f"models:/{model_name}{'/' if version.isdigit() else '@'}{version}"
    with open(os.path.join(out_dir, MODEL_JSON), "w") as fh:
        json.dump({"reference": reference, "version": found["version"]}, fh)
    return {"registered_model": model_name, "version": found["version"], "run_id": found["run_id"]}


def fetched_model(model_path: str) -> dict:
    """{"reference", "version"} that fetch_model_step wrote beside model_path ({} when absent)."""
    path = os.path.join(os.path.dirname(model_path), MODEL_JSON)
    if not os.path.isfile(path):
        return {}
    with open(path) as fh:
        return json.load(fh)


def plan_shards(structures: str, shards: int, design_chains: str = "") -> list[str]:
    """["0/n", ..., "n-1/n"]: n = min(shards, items in the set) (at least 1); an item is a record
    or a skip, so every shard has something to do or report. design_chains: the set is read as
    complexes (one item per structure), as the design steps read it."""

    if shards < 1:
        raise ConfigError(f"design pipeline: shards: expected >= 1, got {shards}")
    count = sum(1 for _ in read_structures(structures, complexes=bool(design_chains)))
    n = max(1, min(shards, count))
    return [f"{k}/{n}" for k in range(n)]


def design_shard_step(
    *,
    model_path: str,
    structures: str,
    shard: str,
    temperatures: str,
    num_sequences: int,
    seed: int,
    score_orders: int,
    threads: int,
    out_dir: str,
    design_chains: str = "",
) -> dict:
    """Design (and score) the records of shard "k/n" of `structures` into out_dir/designs.jsonl
    (+ designs.summary.json); returns the summary. design_chains ("A,B"; "" = every chain of each
    record): structures are read as complexes, the other chains kept as fixed context."""

    k, _, n = shard.partition("/")
    fetched = fetched_model(model_path)
    cfg = DesignConfig(
        model=model_path,
        structure=structures,
        out=os.path.join(out_dir, "designs.jsonl"),
        num_sequences=num_sequences,
        temperature=temperatures,
        seed=seed,
        threads=threads or None,
        design_chains=design_chains,
        model_reference=fetched.get("reference"),
        model_version=fetched.get("version"),
        overwrite=True,  # the step's own output folder: a retried step writes it again
    )
    summary = design_batch(cfg, progress=False, shard=(int(k), int(n)), score_orders=score_orders)
    record_timing("design", summary.seconds, shard=shard, designs=summary.designs, skipped=len(summary.skipped))
    return summary.to_json()


def gather_step(
    *,
    shard_dirs: list[str],
    out_dir: str,
    report_path: str,
    model: dict,
    params: dict,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
) -> dict:
    """Every shard's designs into out_dir/designs.jsonl, their summaries into summary.json, a
    Markdown report at report_path, all logged to the pipeline's MLflow run (step "design")."""

    start = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    rows: list[dict] = []
    summaries: list[dict] = []
    for folder in shard_dirs:
        with open(os.path.join(folder, "designs.jsonl")) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
        with open(os.path.join(folder, "designs.summary.json")) as fh:
            summaries.append(json.load(fh))
    skipped = [s for summary in summaries for s in summary["skipped"]]
    summary = {
        "model": model,
        "params": params,
        "shards": len(summaries),
        "structures_designed": sum(s["designed"] for s in summaries),
        "designs": len(rows),
        "skipped": skipped,
        "skip_counts": dict(Counter(s["reason"] for s in skipped)),
        "renamed": {name: record for s in summaries for name, record in s.get("renamed", {}).items()},
        "design_seconds": round(sum(s["seconds"] for s in summaries), 3),
    }
    with open(os.path.join(out_dir, "designs.jsonl"), "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    metrics = {"designs": len(rows), "structures_designed": summary["structures_designed"], "skipped": len(skipped)}
    if rows:
        metrics["mean_recovery"] = statistics.fmean(r["recovery"] for r in rows)
        metrics["mean_design_nll"] = statistics.fmean(r["mean_nll"] for r in rows)
    scored = [r["score_nll"] for r in rows if r.get("score_nll") is not None]
    if scored:
        metrics["mean_score_nll"] = statistics.fmean(scored)
    report = markdown_report(rows, summary, metrics)
    os.makedirs(os.path.dirname(report_path) or ".", exist_ok=True)
    with open(report_path, "w") as fh:
        fh.write(report)
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    with Tracker(ctx, "design", params={**params, **{f"model_{k}": v for k, v in model.items()}}) as tracker:
        tracker.log_metrics(metrics)
        tracker.log_artifacts(out_dir, "designs")
        tracker.log_artifact(report_path, "report")
    seconds = time.perf_counter() - start
    record_timing("gather-designs", seconds, designs=len(rows), skipped=len(skipped))
    return {"metrics": metrics, "summary": summary, "mlflow_run_id": tracker.run_id or ""}


def _cell(text: object) -> str:
    """Text from the input (record names, messages) as one Markdown table cell: URIs' credentials
    hidden, HTML and Markdown's own characters escaped, line breaks flattened, so a name can
    neither end the row nor inject a tag or a link when the report is rendered."""
    out = re.sub(r"([\\`*_\[\]()#!|~])", r"\\\1", storage.redact(str(text)))
    out = html.escape(out, quote=False)
    return re.sub(r"[\r\n\t\x00-\x1f\x7f]+", " ", out)


def markdown_report(rows: list[dict], summary: dict, metrics: dict, best: int = 20) -> str:
    """Totals, skips by reason, and each structure's best design (lowest score, else design NLL)."""
    model = summary["model"]
    lines = [
        "# Designs",
        "",
        f"Model: {model.get('registered_model', '?')} version {model.get('version', '?')} "
        f"(MLflow run {model.get('run_id', '?')}).",
        f"{summary['designs']} designs of {summary['structures_designed']} structures in {summary['shards']} shards; "
        f"{len(summary['skipped'])} skipped.",
        "",
        "| metric | value |",
        "|---|---:|",
        *(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in metrics.items()),
        "",
    ]
    if summary["skipped"]:
        lines += ["## Skipped", "", "| record | reason | message |", "|---|---|---|"]
        lines += [
            f"| {_cell(s['name'])} | {_cell(s['reason'])} | {_cell(s['message'][:160])} |" for s in summary["skipped"]
        ]
        lines.append("")
    key = "score_nll" if any("score_nll" in r for r in rows) else "mean_nll"
    by_name: dict[str, dict] = {}
    for r in rows:
        if r["name"] not in by_name or r[key] < by_name[r["name"]][key]:
            by_name[r["name"]] = r
    if by_name:
        lines += [
            f"## Best design per structure (lowest {key}; first {best})",
            "",
            f"| structure | sample | T | {key} | recovery | sequence |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name, r in list(sorted(by_name.items()))[:best]:
            seq = r["sequence"] if len(r["sequence"]) <= 60 else r["sequence"][:57] + "..."
            lines.append(
                f"| {_cell(name)} | {r['sample']} | {r['temperature']:g} | {r[key]:.3f} | {r['recovery']:.3f} "
                f"| `{seq}` |"
            )
    return "\n".join(lines) + "\n"
