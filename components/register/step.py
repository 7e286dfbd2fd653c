"""The compare and register steps in the pipeline: gather the facts (the candidate's evaluation,
the champion's and, for a fine-tuned candidate, the starting weights' validation recovery on the
candidate's validation data, the tracking server's state), let `decide` (decision.py) choose, and on
`register` export ONNX with its parity gate and register it as the champion. Test figures are
recorded for reporting only.

Kept apart from the `@dsl.component` definition (component.py): inside a running step KFP loads a
reduced `kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time

from invfold.components.evaluate.evaluate import score_split
from invfold.components.evaluate.step import headline
from invfold.components.export.onnx_export import ExportConfig, export_onnx
from invfold.components.export.runtime import feeds
from invfold.components.prep.shards import open_prepared
from invfold.components.protein.batch import collate
from invfold.components.register.decision import (
    Champion,
    Comparison,
    Evaluation,
    StartingPoint,
    decide,
    finite_chains,
)
from invfold.components.tracking import RunContext, Tracker
from invfold.components.train.record import MODEL_PT_ARTIFACT
from invfold.errors import InputError
from invfold.runtime import record_timing

TAG_RECOVERY = "invfold.validation_recovery"  # what champions are compared on
TAG_TEST_RECOVERY = "invfold.test_recovery"  # for reporting only
TAG_DIGEST = "invfold.data_digest"
MODEL_PT_PATH = MODEL_PT_ARTIFACT  # in the version's source run: the train run logs it


def read_evaluation(evaluation_path: str) -> Evaluation:
    path = os.path.join(evaluation_path, "metrics.json")
    with open(path) as fh:
        return Evaluation.from_metrics(json.load(fh), source=path)


def validation_scores(model: str, prepared_path: str) -> tuple[float, dict[str, float]]:
    """A model's (file, URI or published name) validation recovery on the prepared data, scored as
    evaluate() scored the candidate's, and its per-chain recoveries (for the paired test)."""

    scored = score_split(model, prepared_path, "validation", threads=os.cpu_count())
    recovery = scored["recovery"]
    if recovery != recovery:
        raise InputError(
            prepared_path, None, "validation", f"a finite validation recovery of {model}", recovery, reason="not_finite"
        )
    return float(recovery), finite_chains(scored["chains"], prepared_path)


def score_champion(tracker, found: dict, candidate: Evaluation, prepared_path: str) -> Champion:
    """The champion's validation recovery on the candidate's validation data: the figure recorded on
    its version when the data digests match, else the champion's model.pt evaluated again here
    (also for champions registered before they were chosen on validation data)."""
    tags = found["tags"]
    if tags.get(TAG_DIGEST) == candidate.data_digest and TAG_RECOVERY in tags:
        return Champion(found["version"], float(tags[TAG_RECOVERY]), "recorded on the same data")
    with tempfile.TemporaryDirectory() as tmp:
        path = tracker.download_artifact(found["run_id"], f"{MODEL_PT_PATH}/model.pt", tmp)
        if not path:
            return Champion(found["version"], None, "no model.pt to evaluate")
        recovery, chains = validation_scores(path, prepared_path)
    return Champion(found["version"], recovery, "re-evaluated on this run's validation data", chains)


def compare_step(
    *,
    prepared_path: str,
    evaluation_path: str,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    model_name: str,
    threshold: float,
    init_from: str = "",
) -> Comparison:
    """`init_from`: the weights the candidate was fine-tuned from ('' = trained from scratch); they
    are scored on the same validation data and must be beaten."""

    candidate = read_evaluation(evaluation_path)
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    with Tracker(ctx, "compare") as tracker:
        start = time.perf_counter()
        found = tracker.champion(model_name) if tracker.available else None
        champion = score_champion(tracker, found, candidate, prepared_path) if found else None
        starting = StartingPoint(init_from, *validation_scores(init_from, prepared_path)) if init_from else None
        down = "" if tracker.available else tracker.reason
        result = decide(candidate, threshold, champion, tracking_down=down, starting_point=starting)
        record_timing("compare", time.perf_counter() - start, register=result.register, decision=result.decision)
        # the candidate's figure is the evaluate run's validation/recovery: not again under another name
        figures = {
            "validation/champion_recovery": result.champion,
            "validation/starting_recovery": result.starting_point,
        }
        tracker.log_metrics({k: v for k, v in figures.items() if v is not None})
        tracker.set_tags({"invfold.decision": result.decision})
    print(f"compare: {result.decision}")
    return result


RECHECKS = 3  # how often register decides again when the champion keeps moving under it


def confirm_decision(tracker, model_name: str, comparison: Comparison, prepared_path: str) -> Comparison:
    """The decision against the champion as the registry holds it now. Two pipeline runs may
    compare against the same champion and both decide to register; the one that registers later
    would take `champion` even when it is worse than the one before it. So register reads the
    alias again: when it still names the version compare saw (or still none), compare's decision
    stands; when it moved, the new champion is scored on this run's validation data and `decide`
    runs again. MLflow has no compare-and-set for aliases: what remains is the time between this
    read and the alias write that follows it (two REST calls), instead of the whole export."""
    for _ in range(RECHECKS):
        found = tracker.champion(model_name)
        if not tracker.available:
            return dataclasses.replace(
                comparison, register=False, decision=f"not moving the champion: {tracker.reason}"
            )
        now = found["version"] if found else None
        if now == comparison.champion_version:
            return comparison
        candidate = Evaluation(
            comparison.candidate, comparison.data_digest, comparison.metrics, comparison.candidate_chains
        )
        champion = score_champion(tracker, found, candidate, prepared_path) if found else None
        starting = (
            StartingPoint(comparison.init_from, comparison.starting_point, comparison.starting_chains)
            if comparison.init_from
            else None
        )
        was = f"v{comparison.champion_version}" if comparison.champion_version else "none"
        again = decide(candidate, comparison.threshold, champion, starting_point=starting)
        comparison = dataclasses.replace(
            again, decision=f"the champion moved since compare ({was} -> v{now or 'none'}): {again.decision}"
        )
        if not comparison.register:
            return comparison
    return dataclasses.replace(
        comparison, register=False, decision=f"the champion kept moving ({RECHECKS} reads); keeping it"
    )


def input_example(prepared_path: str) -> dict:
    """The model's ONNX inputs for the shortest test chain (a real protein)."""
    import torch

    test = open_prepared(prepared_path).open("test")
    record = test[int(min(range(len(test)), key=lambda i: test.lengths[i]))]
    batch = collate([record])
    order = torch.rand(batch.S.shape, generator=torch.Generator().manual_seed(0))
    return feeds(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, order)


def model_description(model_name: str, comparison: Comparison) -> str:
    """The registered model's description (markdown): what it is, its data, how to use it."""
    test = comparison.metrics.get("test/recovery")
    perplexity = comparison.metrics.get("test/perplexity")
    return (
        "invfold protein inverse-folding model (backbone coordinates in, per-residue amino-acid "
        "logits out) as ONNX, exported and checked for parity with the PyTorch model.\n\n"
        f"- data digest: `{comparison.data_digest}`\n"
        f"- validation median recovery (chosen on): {comparison.candidate:.4f}\n"
        + (f"- test median recovery (reported only): {test:.4f}" if test is not None else "")
        + (f", test perplexity: {perplexity:.3f}" if perplexity is not None else "")
        + "\n"
        + (f"- fine-tuned from: {comparison.init_from}\n" if comparison.init_from else "")
        + f"- decision: {comparison.decision}\n\n"
        "Use: `mlflow.onnx.load_model(f'models:/" + model_name + "@champion')` or onnxruntime on "
        "the version's `model/model.onnx`; inputs and outputs are in the model's signature. "
        "`invfold design` designs sequences with the PyTorch checkpoint in the version's source run "
        "(the training run, `model_pt/model.pt`)."
    )


def summary_markdown(model_name: str, version: str | None, champion: bool, decision: str, run_page: str | None) -> str:
    """What the Kubeflow UI shows for the register step: the outcome, and the link to the
    pipeline's MLflow run (the way from a KFP run to its record)."""
    if version and champion:
        outcome = f"Registered `{model_name}` version {version}, now its `champion`."
    elif version:
        outcome = f"Registered `{model_name}` version {version}; another run's version holds `champion`."
    else:
        outcome = f"Nothing registered in `{model_name}`."
    record = f"[MLflow run]({run_page})" if run_page else "MLflow run: not recorded on a tracking server with a UI"
    return f"### Registration\n\n{outcome}\n\nDecision: {decision}\n\n{record}\n"


def register_step(
    *,
    prepared_path: str,
    model_path: str,
    onnx_dir: str,
    comparison: Comparison,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    model_name: str,
) -> dict:

    os.makedirs(onnx_dir, exist_ok=True)
    onnx_path = os.path.join(onnx_dir, "model.onnx")
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    with Tracker(ctx, "register") as tracker:
        start = time.perf_counter()
        # another run may have registered since compare: decide again before registering anything
        comparison = confirm_decision(tracker, model_name, comparison, prepared_path)
        exported = export_onnx(
            ExportConfig(model_path=os.path.join(model_path, "model.pt"), out=onnx_path, parity_data=prepared_path)
        )
        export_metrics = {
            "parity_max_abs_diff": exported.max_abs_diff,
            "parity_tolerance": exported.tolerance,
            "onnx_size_bytes": exported.size_bytes,
            "num_parameters": exported.num_parameters,
        }
        tracker.log_metrics(export_metrics)
        train_run = tracker.step_run_id("train")  # the version's source run, holding model_pt/model.pt
        if train_run is None:  # not found: the checkpoint goes with this run
            tracker.log_artifact(os.path.join(model_path, "model.pt"), MODEL_PT_PATH)
        tracker.log_artifact(os.path.join(onnx_dir, "model.parity.json"), "export")
        tags = {
            TAG_RECOVERY: comparison.candidate,
            TAG_TEST_RECOVERY: comparison.metrics.get("test/recovery", "none"),
            TAG_DIGEST: comparison.data_digest,
            "invfold.candidate_recovery": comparison.candidate,
            "invfold.champion_recovery": comparison.champion if comparison.champion is not None else "none",
            "invfold.champion_version": comparison.champion_version or "none",
            "invfold.champion_basis": comparison.basis,
            "invfold.init_from": comparison.init_from or "none",
            "invfold.starting_recovery": comparison.starting_point if comparison.starting_point is not None else "none",
            "invfold.decision": comparison.decision,
            "kfp.pipeline_run_id": pipeline_run_id,
        }
        version = None
        if comparison.register:
            version = tracker.log_onnx_model(
                onnx_path,
                model_name,
                input_example(prepared_path),
                tags,
                metrics={**headline(comparison.metrics), **export_metrics},
                description=model_description(model_name, comparison),
                source_run_id=train_run,
            )
        champion = False
        if version:
            # once more, right before the write: registering took a while
            comparison = confirm_decision(tracker, model_name, comparison, prepared_path)
            if comparison.register:
                tracker.set_champion(model_name, version)
                champion = True
            else:  # registered, but another run's better version holds the alias
                tracker.set_version_tags(model_name, version, {"invfold.decision": comparison.decision})
        seconds = time.perf_counter() - start
        record_timing("register", seconds, version=version or "not recorded")
        tracker.set_tags(
            {"invfold.registered_version": version or "not recorded", "invfold.decision": comparison.decision},
            parent=True,
        )
        tracker.set_tags({"invfold.decision": comparison.decision})
    print(f"register: {comparison.decision}" + (f" (champion: v{version})" if champion else ""))
    return {
        "summary": summary_markdown(model_name, version, champion, comparison.decision, tracker.pipeline_run_page()),
        "metrics": export_metrics,
        "metadata": {
            "compute_s": round(seconds, 3),
            "registered_model": model_name,
            "version": version or "",
            "champion": champion,
            "decision": comparison.decision,
            "sha256": exported.sha256,
            "mlflow_run_id": tracker.run_id or "",
        },
    }
