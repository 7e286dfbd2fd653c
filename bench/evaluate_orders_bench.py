"""Evaluate's cost of several decoding orders: `invfold evaluate` with orders=1 (one greedy design
per chain, the old path) vs orders=K (K greedy designs decoded in the same loop as the diversity
samples), same model, data, threads and process, so the ratio holds under the machine's load.

The model is a `--preset` autoregressive network with random weights (speed does not depend on
the weights; a one-shot model's argmax has no order, so it costs nothing extra). Data: the bundled
sample prepared with its splits, or `--prepared`.

    python bench/evaluate_orders_bench.py --preset proteinmpnn --orders 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import conditions
import torch

from invfold.components.evaluate.config import EvaluateConfig
from invfold.components.evaluate.evaluate import evaluate
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="proteinmpnn")
    parser.add_argument("--orders", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prepared", default=None, help="prepared folder (default: the bundled sample)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    watch = conditions.start(threads=args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        prepared = args.prepared or f"{tmp}/prepared"
        if not args.prepared:
            run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), out=prepared))
        model = f"{tmp}/model.pt"
        save_model(model, InverseFoldingModel(ModelConfig.preset(args.preset, decoding="autoregressive")))
        result = {"preset": args.preset, "threads": args.threads}
        for orders in (1, args.orders):
            start = time.perf_counter()
            metrics = evaluate(
                EvaluateConfig(
                    model_path=model, data=prepared, out=f"{tmp}/o{orders}", threads=args.threads, orders=orders
                )
            )
            result[f"orders_{orders}_s"] = round(time.perf_counter() - start, 2)
            result[f"orders_{orders}_test_chains"] = metrics["datasets"]["test"]["proteins"]
        result["ratio"] = round(result[f"orders_{args.orders}_s"] / result["orders_1_s"], 3)
    print(json.dumps(result))
    result["conditions"] = watch.finish()
    conditions.print_report(result["conditions"])
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
