"""Weak scaling on CPU: N processes x T threads against 1 process x T threads, the same
per-process batch (residue budget), for each strategy.

    python bench/scaling_bench.py                       # ddp, horovod, deepspeed (ZeRO-2), 2 procs
    python bench/scaling_bench.py --strategies ddp --steps 40 --data PREPARED

Each job runs through the same launcher as `invfold train` (torchrun / horovodrun). Throughput
is observed residues per second over all ranks, from the per-step records in metrics.jsonl,
skipping the first --skip steps (allocator and gloo warm-up). Weak-scaling efficiency =
throughput(N) / (N x throughput(1)); target >= 0.85 for DDP at N = 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

TARGET = 0.85
STRATEGIES = {"ddp": {}, "horovod": {}, "deepspeed": {"zero_stage": 2}}


def prepare_sample(root: Path) -> str:
    from invfold.components.prep.config import PrepConfig
    from invfold.components.prep.run import run_prep

    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    out = root / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), output=str(out)))
    return str(out)


def throughput(out: Path, skip: int) -> float:
    """Residues per second over all ranks, steps after `skip` (each record is one step)."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train" and r["step"] > skip]
    seconds = sum(r["residues"] / r["residues_per_s"] for r in train)
    return sum(r["residues"] for r in train) / seconds


def run(strategy: str, nproc: int, args, data: str, root: Path, name: str | None = None) -> float:
    from invfold.components.train.config import TrainConfig
    from invfold.components.train.launch import launch_local

    out = root / (name or f"{strategy}-{nproc}")
    cfg = TrainConfig(
        data=data,
        out=str(out),
        strategy=strategy,
        preset=args.preset,
        tokens_per_batch=args.tokens_per_batch,
        max_steps=args.steps,
        threads=args.threads,
        validate_every=0,
        checkpoint_every=0,
        log_every=1,
        resume=False,
        **STRATEGIES[strategy],
    )
    code = launch_local(cfg, nproc)
    if code != 0:
        raise RuntimeError(f"{strategy} with {nproc} process(es) exited with {code}")
    return throughput(out, args.skip)


def independent(args, data: str, root: Path) -> float:
    """nproc single-process DDP jobs at once, no communication between them: their summed
    throughput is what the machine allows N processes (memory bandwidth, shared caches)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(args.nproc) as pool:
        futures = [pool.submit(run, "ddp", 1, args, data, root, f"independent-{i}") for i in range(args.nproc)]
        return sum(f.result() for f in futures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="prepared folder (default: prep the bundled sample)")
    parser.add_argument("--strategies", default="ddp,horovod,deepspeed")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--tokens-per-batch", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=5, help="warm-up steps left out of the timing")
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also run nproc independent 1-process jobs at once (the machine's ceiling)",
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        root = Path(tmp)
        data = args.data or prepare_sample(root)
        results = []
        for strategy in args.strategies.split(","):
            single = run(strategy, 1, args, data, root)
            multi = run(strategy, args.nproc, args, data, root)
            efficiency = multi / (args.nproc * single)
            results.append(
                {
                    "strategy": strategy + (" ZeRO-2" if strategy == "deepspeed" else ""),
                    "single_res_per_s": single,
                    "multi_res_per_s": multi,
                    "efficiency": efficiency,
                }
            )
            print(
                f"{strategy}: 1 x {args.threads} thread(s) {single:.0f} res/s, {args.nproc} x "
                f"{args.threads} {multi:.0f} res/s, efficiency {efficiency:.2f}",
                file=sys.stderr,
                flush=True,
            )
        ceiling = independent(args, data, root) if args.ceiling else None
    if ceiling:
        single = results[0]["single_res_per_s"]
        print(
            f"ceiling: {args.nproc} independent 1-process jobs {ceiling:.0f} res/s "
            f"({ceiling / (args.nproc * single):.2f} of {args.nproc} x 1 process)",
            file=sys.stderr,
        )
        for r in results:
            r["efficiency_vs_ceiling"] = r["multi_res_per_s"] / ceiling
    print(f"\n| strategy | 1 process (res/s) | {args.nproc} processes (res/s) | efficiency |")
    print("|---|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['strategy']} | {r['single_res_per_s']:.0f} | {r['multi_res_per_s']:.0f} | "
            f"**{r['efficiency']:.2f}** (target >= {TARGET}) |"
        )
    if ceiling:
        print(
            f"| {args.nproc} independent 1-process jobs (no communication) | | {ceiling:.0f} | "
            f"{ceiling / (args.nproc * results[0]['single_res_per_s']):.2f} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "results": results, "ceiling_res_per_s": ceiling}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
