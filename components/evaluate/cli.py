"""`invfold evaluate MODEL --data PREPARED --out DIR`."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="perplexity, recovery, confusion matrix and a report for a trained model",
        description="Score a model on the prepared test set and its subsets (short chains, "
        "single-chain, any subset datasets): perplexity, median recovery of designed sequences, "
        "confusion matrix, recovery by length, burial and secondary structure, recall per residue, "
        "diversity among sampled designs, the best constant predictor; writes metrics.json, "
        "confusion.json, PNG plots, report.md and report.html.",
    )
    p.add_argument("model", help="model file (model.pt; path or URI) or published weights (e.g. proteinmpnn:v_48_020)")
    p.add_argument("--data", required=True, help="prepared folder (path or URI)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--dataset",
        action="append",
        default=None,
        help="dataset to score (repeatable; default: test, validation and every subset dataset)",
    )
    p.add_argument(
        "--designs-per-protein",
        type=int,
        default=2,
        help="sequences sampled per test protein for the diversity figure (0: none)",
    )
    p.add_argument("--diversity-temperature", type=float, default=0.1, help="sampling temperature for diversity")
    p.add_argument("--seed", type=int, default=0, help="seed of autoregressive decoding orders")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .evaluate import EvaluateConfig, evaluate

    cfg = EvaluateConfig(
        model_path=args.model,
        data=args.data,
        out=args.out,
        datasets=args.dataset,
        seed=args.seed,
        threads=args.threads,
        designs_per_protein=args.designs_per_protein,
        diversity_temperature=args.diversity_temperature,
    )
    metrics = evaluate(cfg)
    print(
        json.dumps(
            {
                name: {k: v for k, v in m.items() if k in ("perplexity", "recovery", "proteins")}
                for name, m in metrics["datasets"].items()
            },
            indent=2,
        )
    )
    print(f"wrote {args.out} (report.html)")
    return 0
