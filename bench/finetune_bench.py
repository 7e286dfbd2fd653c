"""Fine-tuning from published ProteinMPNN weights vs the weights as they are vs training from scratch.

Three sides on one prepared real split, scored on its validation and test splits by the same code
as `invfold evaluate` (metrics.score_dataset: teacher-forced perplexity, median recovery of
greedy designs in a seeded random order):

1. published: `--weights` (default proteinmpnn:v_48_020) imported, not trained;
2. fine-tuned: the real trainer (`launch_local`, 1 process x `--threads`) from those weights with
   the fine-tuning recipe (lr 3e-4, 20 warm-up steps, backbone noise = the weights' own training
   noise, `--freeze-encoder` optional) for `--cpu-minutes` of CPU time;
3. scratch: the `proteinmpnn` preset from random weights with the default recipe (lr 2e-3,
   50 warm-up steps, noise 0.1 A), same CPU-time budget.

Budgets are CPU time of the training process (all its threads), so a loaded machine slows the
run but does not change what it trains. The pipeline registers a fine-tuned model only when its
validation recovery beats the starting weights' on the same data; the last column says whether
this one would be.

    python bench/finetune_bench.py --chain-set ../shared/data/real_chain_set.jsonl.gz \\
        --split-file ../shared/data/real_chain_set_splits.json --cpu-minutes 15 --json finetune.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import conditions
import torch

from invfold.components.evaluate.metrics import score_dataset
from invfold.components.launch.processes import launch_local
from invfold.components.model.io import load_model
from invfold.components.model.published import load_published
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import open_prepared
from invfold.components.train import recipes
from invfold.components.train.config import TrainConfig


def score(model, prepared: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    data = open_prepared(prepared)
    out = {}
    for split in ("validation", "test"):
        dataset = data.open(split)
        summary = score_dataset(model, dataset, list(range(len(dataset))), 6000, seed=0).summary()
        out[split] = {k: round(v, 4) for k, v in summary.items() if k in ("perplexity", "recovery")}
    return out


def train_side(name: str, prepared: str, work: str, args, **options) -> dict:
    out = os.path.join(work, name)
    cfg = TrainConfig(
        data=prepared,
        out=out,
        cpu_time_budget_s=args.cpu_minutes * 60,
        validate_every=0,
        checkpoint_every=0,
        log_every=10,
        threads=args.threads,
        seed=args.seed,
        tokens_per_batch=args.tokens_per_batch,
        resume=False,
        **options,
    )
    started = time.monotonic()
    code = launch_local(cfg, 1)
    if code != 0:
        raise SystemExit(f"{name}: training exited with status {code}")
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    result = score(load_model(os.path.join(out, "model.pt")), prepared, args.threads)
    result.update(
        steps=summary["step"], cpu_s=summary.get("process_cpu_s"), wall_s=round(time.monotonic() - started, 1)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="a prepared folder (else --chain-set and --split-file are prepared)")
    parser.add_argument("--chain-set", default="../shared/data/real_chain_set.jsonl.gz")
    parser.add_argument("--split-file", default="../shared/data/real_chain_set_splits.json")
    parser.add_argument("--weights", default="proteinmpnn:v_48_020")
    parser.add_argument("--cpu-minutes", type=float, default=15.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--tokens-per-batch",
        type=int,
        default=1500,
        help="residues per training batch, both trained sides (the pipeline's default; the trainer's 3000 "
        "took the proteinmpnn network past 10 GB resident)",
    )
    parser.add_argument("--freeze-encoder", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sides",
        default="published,fine_tuned,scratch",
        help="comma-separated; run sides in separate processes to overlap them",
    )
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    args.sides = args.sides.split(",")
    watch = conditions.start(threads=args.threads)
    watch.track()  # the training processes, as they run

    work = tempfile.mkdtemp(prefix="finetune-bench-")
    prepared = args.data
    if prepared is None:
        prepared = os.path.join(work, "prepared")
        run_prep(PrepConfig(input=args.chain_set, split_file=args.split_file, out=prepared))
    published, provenance = load_published(args.weights)
    results = {}
    if "published" in args.sides:
        results["published"] = score(published, prepared, args.threads)
        print("published", results["published"], flush=True)
    if "fine_tuned" in args.sides:
        results["fine_tuned"] = train_side(
            "fine_tuned",
            prepared,
            work,
            args,
            init_from=args.weights,
            freeze_encoder=args.freeze_encoder,
            **recipes.FINE_TUNE,
            backbone_noise=provenance["training_noise_A"],
        )
        print("fine_tuned", results["fine_tuned"], flush=True)
    if "scratch" in args.sides:
        results["scratch"] = train_side("scratch", prepared, work, args, preset="proteinmpnn")
        print("scratch", results["scratch"], flush=True)
    if "published" in results and "fine_tuned" in results:
        results["fine_tuned"]["beats_published_on_validation"] = (
            results["fine_tuned"]["validation"]["recovery"] > results["published"]["validation"]["recovery"]
        )
    report = {
        "weights": args.weights,
        "cpu_minutes": args.cpu_minutes,
        "threads": args.threads,
        "tokens_per_batch": args.tokens_per_batch,
        **results,
        "conditions": watch.finish(),
    }
    print(json.dumps(report, indent=2))
    conditions.print_report(report["conditions"])
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")


if __name__ == "__main__":
    main()
