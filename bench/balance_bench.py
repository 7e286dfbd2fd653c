"""What per-step balancing is worth on many GPUs, computed from a prepared set's chain lengths.

    python bench/balance_bench.py --data PREPARED                 # worlds 2, 8, 16, 64; budgets 1500, 10000
    python bench/balance_bench.py --data PREPARED --resample 18000 --worlds 8 --budgets 10000

Every step waits for the rank with the most work, so a step's efficiency is mean / max of the
ranks' work, and an epoch's is sum of means / sum of maxima. Work per batch = padded residues
(rows x longest chain): the first-order cost of every layer of the model (measured on CPU:
padded residues predict a batch's forward + backward time within 5%, bench/README.md). Three
ways of giving the ranks their batches, all from the same sampler code as training:

- random: batches packed alone, shuffled, dealt to ranks in turn (no balancing);
- pairs: the earlier sampler (packed alone, paired by padded size within 16 steps);
- interleaved: the current sampler (each step dealt from one length-sorted run, then re-paired).

--resample N draws N lengths (with replacement, fixed seed) from the set's own length
distribution, for a CATH 4.2-sized training set (about 18,000 chains) from a smaller real set.
"""

from __future__ import annotations

import argparse
import json
import sys

import conditions
import numpy as np


def efficiency(lengths: np.ndarray, world: int, budget: int, balance: str, epochs: int) -> float:
    from invfold.components.protein.sampler import TokenBudgetSampler

    means, maxima = 0.0, 0.0
    for epoch in range(epochs):
        if balance == "random":
            packed, _ = TokenBudgetSampler(lengths, budget, seed=0, balance="pairs")._packed(epoch)
            packed = packed[: len(packed) - len(packed) % world]
            steps = [packed[i : i + world] for i in range(0, len(packed), world)]
        else:
            samplers = [
                TokenBudgetSampler(lengths, budget, rank=r, world_size=world, seed=0, balance=balance)
                for r in range(world)
            ]
            steps = list(zip(*(s.rank_batches(epoch) for s in samplers), strict=True))
        for step in steps:
            work = np.array([len(b) * lengths[b].max() for b in step], dtype=float)
            means += work.mean()
            maxima += work.max()
    return means / maxima


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="prepared folder")
    parser.add_argument("--dataset", default="train")
    parser.add_argument("--resample", type=int, default=18000, help="chains drawn from the set's lengths (0: as is)")
    parser.add_argument("--worlds", default="2,8,16,64")
    parser.add_argument("--budgets", default="1500,10000", help="padded residues per batch and rank")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    watch = conditions.start()

    from invfold.components.prep.shards import open_prepared

    lengths = np.asarray(open_prepared(args.data).open(args.dataset).lengths, dtype=np.int64)
    span = f"lengths {lengths.min()}-{lengths.max()}, median {np.median(lengths):.0f}"
    source = f"{len(lengths)} chains of '{args.dataset}' ({span})"
    if args.resample:
        lengths = np.random.default_rng(0).choice(lengths, size=args.resample)
        source += f", resampled to {args.resample}"
    print(f"lengths: {source}\n", file=sys.stderr)
    rows = []
    print("| ranks | budget (padded residues) | random | pairs (earlier) | interleaved (now) |")
    print("|---:|---:|---:|---:|---:|")
    for world in map(int, args.worlds.split(",")):
        for budget in map(int, args.budgets.split(",")):
            row = {"world": world, "budget": budget}
            for balance in ("random", "pairs", "interleaved"):
                row[balance] = efficiency(lengths, world, budget, balance, args.epochs)
            rows.append(row)
            print(
                f"| {world} | {budget} | {row['random']:.3f} | {row['pairs']:.3f} | **{row['interleaved']:.3f}** |",
                flush=True,
            )
    report = watch.finish(torch_info=False)  # the sampler's arithmetic: no torch
    conditions.print_report(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"source": source, "rows": rows, "conditions": report}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
