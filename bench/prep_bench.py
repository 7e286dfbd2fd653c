"""Prep benchmark: wall time and peak memory of `run_prep` against a baseline that only reads the
jsonl and parses each line with the standard json module, on a generated CATH-sized set.

    python bench/prep_bench.py                  # ~18,000 chains (~500 MB), split file given
    python bench/prep_bench.py --no-split-file  # prep splits by CATH topology itself (two passes)
    python bench/prep_bench.py --no-split-file --no-labels  # ... by MMseqs2 clustering

Each measurement runs in its own subprocess (peak RSS from os.wait4 for that child only);
baseline and prep alternate, best of --repeats each. Targets: prep <= 2x the baseline's
time, peak memory < 1.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import conditions

TIME_TARGET = 2.0
MEMORY_TARGET_GB = 1.5


def baseline(path: str) -> None:
    """What any loader must at least do: read every line and json.loads it."""
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            json.loads(line)
            n += 1
    print(f"baseline parsed {n} lines", file=sys.stderr)


def prep(path: str, split_file: str | None, out: str) -> None:
    from invfold.components.prep.config import PrepConfig
    from invfold.components.prep.run import run_prep

    result = run_prep(PrepConfig(input=path, out=out, split_file=split_file))
    print(
        json.dumps(
            {
                "counts": result.counts,
                "datasets": result.datasets,
                "split": result.card["split"].get("method"),
                "identity": result.card["split"].get("highest_train_test_identity"),
            }
        )
    )


def measure(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in GB, stdout) of this script run as a child with `args`."""
    env = {**os.environ, "INVFOLD_NO_PROGRESS": "1"}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, env=env)
    out = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"child {args[0]} failed with exit code {child.returncode}")
    return wall, usage.ru_maxrss / 2**20, out  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=18000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-split-file", action="store_true", help="let prep make the split (clustering path)")
    parser.add_argument(
        "--no-labels",
        action="store_true",
        help="generate chains without CATH labels, so --no-split-file clusters by sequence",
    )
    parser.add_argument("--workdir", help="where to generate (default: a temporary folder, removed after)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "baseline":
            baseline(rest[0])
        else:
            prep(rest[0], None if rest[1] == "-" else rest[1], rest[2])
        return

    watch = conditions.start()
    watch.track()  # the baseline and prep children
    with tempfile.TemporaryDirectory(prefix="invfold-prep-bench-", dir=args.workdir) as tmp:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/support
        from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set

        tmp = Path(tmp)
        start = time.perf_counter()
        data = write_synthetic_set(
            tmp / "data", SyntheticConfig(num_chains=args.chains, seed=args.seed, with_cath=not args.no_labels)
        )
        size_mb = data.chain_set.stat().st_size / 1e6
        print(f"generated {args.chains} chains, {size_mb:.0f} MB of jsonl in {time.perf_counter() - start:.0f} s")
        split = "-" if args.no_split_file else str(data.splits)
        runs = {"baseline": [], "prep": []}
        summary = ""
        for repeat in range(args.repeats):
            for kind in ("baseline", "prep"):
                child = (
                    ["baseline", str(data.chain_set)]
                    if kind == "baseline"
                    else ["prep", str(data.chain_set), split, str(tmp / f"out{repeat}")]
                )
                wall, peak, out = measure(["--child", *child])
                runs[kind].append((wall, peak))
                summary = out.strip() or summary
                print(f"  {kind:8s} run {repeat + 1}: {wall:6.1f} s, peak RSS {peak:.2f} GB")
        base_t = min(w for w, _ in runs["baseline"])
        prep_t = min(w for w, _ in runs["prep"])
        base_m = max(m for _, m in runs["baseline"])
        prep_m = max(m for _, m in runs["prep"])
        ratio = prep_t / base_t
        print(f"prep result: {summary}")
        print(f"baseline (read + json.loads): best {base_t:.1f} s, peak {base_m:.2f} GB")
        print(
            f"prep ({'own split' if args.no_split_file else 'split file'}): best {prep_t:.1f} s, peak {prep_m:.2f} GB"
        )
        print(
            f"time ratio prep/baseline: {ratio:.2f} (target <= {TIME_TARGET}) "
            f"{'OK' if ratio <= TIME_TARGET else 'MISSED'}; "
            f"peak memory {prep_m:.2f} GB (target < {MEMORY_TARGET_GB}) "
            f"{'OK' if prep_m < MEMORY_TARGET_GB else 'MISSED'}"
        )
    conditions.print_report(watch.finish())


if __name__ == "__main__":
    main()
