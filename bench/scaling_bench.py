"""Weak scaling on CPU: N processes x T threads against 1 process x T threads and against N
independent 1-process jobs at once (the machine's ceiling), the same per-process batch (residue
budget), for each strategy and preset.

    python bench/scaling_bench.py --data PREPARED --preset small --ceiling      # ddp, horovod, ZeRO-2
    python bench/scaling_bench.py --data PREPARED --preset default,proteinmpnn --steps 20 --skip 3 --ceiling
    python bench/scaling_bench.py --data PREPARED --loss-curve --steps 200      # learning per step

Each job runs through the same launcher as `invfold train` (torchrun / horovodrun). Throughput
is observed residues per second over all ranks, from the per-step records in metrics.jsonl,
skipping the first --skip steps (allocator and gloo warm-up). Efficiency = throughput(N) /
(N x throughput(1)); ceiling-corrected efficiency = throughput(N) / throughput(N independent
1-process jobs running at the same time), i.e. against what N busy processes get from this
machine with no communication at all. Jobs alternate (ceiling, then each strategy's N-process
and 1-process job; the order turns round on every repeat), so a change in the machine's load
hits both sides of a ratio. The per-rank phase times (data, compute, sync) come from the
trainer's own `time` records.

--loss-curve trains the N-process job for --steps steps with the earlier balancing (`pairs`:
batches paired by padded size) and the interleaved one, for each of --seeds, and compares the loss curves:
the difference between the two must stay within the difference between seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

import conditions
import numpy as np

TARGETS = {"ddp": 0.90, "horovod": 0.85, "deepspeed": 0.85}  # of the ceiling-corrected ideal
STRATEGIES = {"ddp": {}, "horovod": {}, "deepspeed": {"zero_stage": 2}}
LABELS = {"ddp": "ddp", "horovod": "horovod (gloo)", "deepspeed": "deepspeed ZeRO-2"}


def prepare_sample(root: Path) -> str:
    from invfold.components.prep.config import PrepConfig
    from invfold.components.prep.run import run_prep
    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    out = root / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), out=str(out)))
    return str(out)


def read_records(out: Path, split: str, skip: int) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["split"] == split and r["step"] > skip]


def throughput(out: Path, skip: int) -> tuple[float, float]:
    """(residues, seconds) over all ranks, steps after `skip` (each record is one step)."""
    train = read_records(out, "train", skip)
    return sum(r["residues"] for r in train), sum(r["residues"] / r["residues_per_s"] for r in train)


def phase_times(out: Path, skip: int) -> dict | None:
    """Mean per-step phase times from the trainer's `time` records (None: trainer without them)."""
    records = read_records(out, "time", skip)
    if not records:
        return None
    keys = [k for k in records[0] if k.endswith("_s") or k in ("compute_imbalance", "sync_fraction")]
    return {k: float(np.mean([r[k] for r in records])) for k in keys if all(k in r for r in records)}


def run_job(strategy: str, nproc: int, preset: str, args, data: str, out: Path, **overrides) -> Path:
    from invfold.components.launch.processes import launch_local
    from invfold.components.train.config import TrainConfig

    options = dict(
        data=data,
        out=str(out),
        strategy=strategy,
        preset=preset,
        tokens_per_batch=args.tokens_per_batch,
        max_steps=args.steps,
        threads=args.threads,
        validate_every=0,
        validation_dataset=None,  # throughput only: no validation pass at the end
        checkpoint_every=0,
        log_every=1,
        resume=False,
        **STRATEGIES[strategy],
    )
    options.update(args.train_options)
    options.update(overrides)
    code = launch_local(TrainConfig(**options), nproc, extra_env=args.env)
    if code != 0:
        raise RuntimeError(f"{strategy} with {nproc} process(es) exited with {code}")
    return out


def independent(preset: str, args, data: str, root: Path, tag: str) -> tuple[float, float]:
    """nproc single-process jobs at once, no communication between them: their summed throughput
    is what the machine allows N busy processes (memory bandwidth, shared caches, other load)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(args.nproc) as pool:
        futures = [
            pool.submit(run_job, "ddp", 1, preset, args, data, root / f"{tag}-independent-{i}")
            for i in range(args.nproc)
        ]
        results = [throughput(f.result(), args.skip) for f in futures]
    return sum(r / s for r, s in results), 1.0  # a rate: sum of the jobs' rates


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def scaling(args, data: str, root: Path) -> dict:
    strategies = args.strategies.split(",")
    results = []
    for preset in args.preset.split(","):
        pooled = {s: {"single": [0.0, 0.0], "multi": [0.0, 0.0], "ceiling": [], "ratios": []} for s in strategies}
        timings = {s: [] for s in strategies}
        for repeat in range(args.repeats):
            order = strategies if repeat % 2 == 0 else strategies[::-1]
            for strategy in order:
                tag = f"{preset}-{strategy}-r{repeat}"
                ceiling = independent(preset, args, data, root, tag)[0] if args.ceiling else None
                jobs = [("multi", args.nproc), ("single", 1)]
                for kind, nproc in jobs if repeat % 2 == 0 else jobs[::-1]:
                    out = run_job(strategy, nproc, preset, args, data, root / f"{tag}-{kind}")
                    residues, seconds = throughput(out, args.skip)
                    pooled[strategy][kind][0] += residues
                    pooled[strategy][kind][1] += seconds
                    if kind == "multi":
                        multi_rate = residues / seconds
                        times = phase_times(out, args.skip)
                        if times:
                            timings[strategy].append(times)
                if ceiling:
                    pooled[strategy]["ceiling"].append(ceiling)
                    pooled[strategy]["ratios"].append(multi_rate / ceiling)
                log(
                    f"{preset} {strategy} repeat {repeat}: {args.nproc} procs {multi_rate:.0f} res/s"
                    + (f", ceiling {ceiling:.0f} res/s, ratio {multi_rate / ceiling:.3f}" if ceiling else "")
                )
        for strategy in strategies:
            p = pooled[strategy]
            single, multi = p["single"][0] / p["single"][1], p["multi"][0] / p["multi"][1]
            row = {
                "preset": preset,
                "strategy": strategy,
                "single_res_per_s": single,
                "multi_res_per_s": multi,
                "efficiency": multi / (args.nproc * single),
            }
            if p["ceiling"]:
                ceiling = float(np.mean(p["ceiling"]))
                row.update(
                    ceiling_res_per_s=ceiling,
                    ceiling_of_ideal=ceiling / (args.nproc * single),
                    efficiency_vs_ceiling=float(np.mean(p["ratios"])),
                    ratios=p["ratios"],
                    target=TARGETS[strategy],
                )
            if timings[strategy]:
                keys = timings[strategy][0].keys()
                row["times"] = {k: float(np.mean([t[k] for t in timings[strategy]])) for k in keys}
            results.append(row)
    return {"results": results}


def print_scaling(report: dict, args) -> None:
    n = args.nproc
    print(
        f"\n| preset | strategy | 1 process (res/s) | {n} processes (res/s) | efficiency | "
        f"{n} independent jobs (res/s) | **{n} processes / {n} independent jobs** (target) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in report["results"]:
        ceiling = (
            f"{r['ceiling_res_per_s']:.0f} ({r['ceiling_of_ideal']:.2f} of ideal) | "
            f"**{r['efficiency_vs_ceiling']:.2f}** (>= {r['target']:.2f}) |"
            if "ceiling_res_per_s" in r
            else "| |"
        )
        print(
            f"| {r['preset']} | {LABELS[r['strategy']]} | {r['single_res_per_s']:.0f} | "
            f"{r['multi_res_per_s']:.0f} | {r['efficiency']:.2f} | {ceiling}"
        )
    timed = [r for r in report["results"] if "times" in r]
    if not timed:
        return
    ranks = range(n)
    print(
        f"\nPer step, mean over the {n}-process job's steps (seconds; sync = blocked in collectives):\n\n"
        "| preset | strategy | data | compute | sync | other | "
        + " | ".join(f"rank {i} compute / sync" for i in ranks)
        + " | slowest rank's extra compute |"
    )
    print("|---|---|---:|---:|---:|---:|" + "---:|" * n + "---:|")
    for r in timed:
        t = r["times"]
        per_rank = " | ".join(
            f"{t.get(f'rank{i}/compute_s', float('nan')):.3f} / {t.get(f'rank{i}/sync_s', float('nan')):.3f}"
            for i in ranks
        )
        print(
            f"| {r['preset']} | {LABELS[r['strategy']]} | {t['data_s']:.3f} | {t['compute_s']:.3f} | "
            f"{t['sync_s']:.3f} | {t['other_s']:.3f} | {per_rank} | {100 * t['compute_imbalance']:.1f}% |"
        )


def loss_curves(args, data: str, root: Path) -> dict:
    """Balancer off vs on, per seed: mean train loss over the last half, and the largest gap
    between smoothed curves; the seed-to-seed gap with the balancer off is the noise."""
    strategy = args.strategies.split(",")[0]
    curves = {}
    for seed in args.seeds:
        for balance in ("pairs", "interleaved"):
            out = run_job(
                strategy,
                args.nproc,
                args.preset.split(",")[0],
                args,
                data,
                root / f"loss-{balance}-{seed}",
                seed=seed,
                balance=balance,
            )
            curves[(balance, seed)] = np.array([r["loss"] for r in read_records(out, "train", 0)])
            last_half = curves[(balance, seed)][-args.steps // 2 :].mean()
            log(f"loss curve: balance {balance}, seed {seed}: last-half mean {last_half:.4f}")

    def smooth(x: np.ndarray) -> np.ndarray:
        width = max(1, args.steps // 20)
        return np.convolve(x, np.ones(width) / width, mode="valid")

    def gap(a, b) -> float:
        return float(np.abs(smooth(curves[a]) - smooth(curves[b])).mean())

    seeds = args.seeds
    rows = {
        "balance_effect": [gap(("pairs", s), ("interleaved", s)) for s in seeds],
        "seed_noise": [gap(("pairs", seeds[0]), ("pairs", s)) for s in seeds[1:]]
        + [gap(("interleaved", seeds[0]), ("interleaved", s)) for s in seeds[1:]],
        "last_half_mean": {f"{b}-{s}": float(curves[(b, s)][-args.steps // 2 :].mean()) for b, s in curves},
    }
    rows["within_noise"] = max(rows["balance_effect"]) <= max(rows["seed_noise"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="prepared folder (default: prep the bundled sample)")
    parser.add_argument("--strategies", default="ddp,horovod,deepspeed")
    parser.add_argument("--preset", default="default", help="one preset or a comma-separated list")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens-per-batch", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=5, help="warm-up steps left out of the timing")
    parser.add_argument("--repeats", type=int, default=1, help="alternations of every job")
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also run nproc independent 1-process jobs at once (the machine's ceiling) beside each strategy",
    )
    parser.add_argument("--loss-curve", action="store_true", help="compare loss curves, step balancer off and on")
    parser.add_argument("--seeds", default="0,1", help="--loss-curve: seeds (the spread between them is the noise)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment for the ranks"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="TrainConfig field for every job (JSON value)"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    args.env = dict(item.split("=", 1) for item in args.env)
    args.train_options = {}
    for item in args.set:
        field, value = item.split("=", 1)
        try:
            args.train_options[field] = json.loads(value)
        except json.JSONDecodeError:
            args.train_options[field] = value
    args.seeds = [int(s) for s in args.seeds.split(",")]
    watch = conditions.start(threads=args.threads)
    watch.track()  # every rank of every job

    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        root = Path(tmp)
        data = args.data or prepare_sample(root)
        if args.loss_curve:
            report = loss_curves(args, data, root)
            print(json.dumps(report, indent=2))
        else:
            report = scaling(args, data, root)
            print_scaling(report, args)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    log(f"largest peak RSS of any process of the bench: {peak:.1f} GB")
    report["conditions"] = watch.finish()
    conditions.print_report(report["conditions"])
    if args.json:
        report["args"] = {k: v for k, v in vars(args).items()}
        report["largest_process_peak_rss_gb"] = peak
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
