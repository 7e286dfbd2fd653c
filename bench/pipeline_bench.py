"""Local pipeline overhead: wall time of `invfold run` with its defaults against the sum of the
steps' own compute time in the same run (target <= 1.3x).

    python bench/pipeline_bench.py [--runs-dir DIR] [-- extra `invfold run` flags]

Runs `python -m invfold run` as a child process into a fresh runs folder (no cache, a fresh
SQLite MLflow store: what a first run on a fresh clone does) and times it. Each step records
its own compute seconds (the plain function's work: fingerprinting, run_prep, the training
job, evaluate, the comparison, export + registration) in the run's timings file; imports,
process start-up and KFP's orchestration count as overhead. Per-step wall time comes from the
local runner's log ("Executing task" .. "finished with status"), so the report shows where the
rest goes: per step (step wall - step compute) and outside the steps (start-up, the pipeline's
compilation by the local runner, the summary read back from MLflow).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import conditions

TARGET = 1.3
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def task_walls(log: str) -> dict[str, float]:
    """Seconds from 'Executing task X' to 'Task X finished with status', per task."""
    started, walls = {}, {}
    for raw in log.splitlines():
        line = ANSI.sub("", raw)
        m = re.match(r"^(\d\d:\d\d:\d\d\.\d{3}) - INFO - Executing task '([\w-]+)'", line)
        if m:
            started[m.group(2)] = datetime.strptime(m.group(1), "%H:%M:%S.%f")
            continue
        m = re.match(r"^(\d\d:\d\d:\d\d\.\d{3}) - (?:INFO|ERROR) - Task '([\w-]+)' finished with status", line)
        if m and m.group(2) in started:
            end = datetime.strptime(m.group(1), "%H:%M:%S.%f")
            walls[m.group(2)] = (end - started[m.group(2)]).total_seconds() % 86400
    return walls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", help="default: a fresh temporary folder")
    parser.add_argument("--out", default="bench/results/pipeline.json")
    parser.add_argument("extra", nargs="*", help="extra `invfold run` flags (after --)")
    args = parser.parse_args(argv)
    runs = Path(args.runs_dir or tempfile.mkdtemp(prefix="invfold-bench-")) / "runs"
    command = [sys.executable, "-m", "invfold", "run", "--runs-dir", str(runs), "--no-cache", *args.extra]
    watch = conditions.start()
    watch.track()  # every step's process
    start = time.perf_counter()
    proc = subprocess.run(command, check=False, capture_output=True, text=True, env={**os.environ})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stdout[-5000:], proc.stderr[-5000:], sep="\n")
        raise SystemExit(f"invfold run failed with status {proc.returncode}")
    timings_files = sorted((runs / "tmp").glob("timings-*.jsonl"))
    timings = [json.loads(line) for line in timings_files[-1].read_text().splitlines()]
    compute = {t["step"]: t["compute_s"] for t in timings}
    # the runner's own log (task banners) goes to the run's log file; the terminal shows a summary
    walls = task_walls("".join(log.read_text() for log in sorted((runs / "logs").glob("run-*.log"))))
    task_of = {
        "fingerprint": "fingerprint-op",
        "prep": "prep-op",
        "train": "train-op",
        "evaluate": "evaluate-op",
        "compare": "compare-op",
        "register": "register-op",
    }
    total_compute = sum(compute.values())
    in_tasks = sum(walls.values())
    rows = []
    for step, task in task_of.items():
        rows.append(
            {
                "step": step,
                "task_wall_s": round(walls.get(task, 0.0), 1),
                "compute_s": round(compute.get(step, 0.0), 1),
                "overhead_s": round(walls.get(task, 0.0) - compute.get(step, 0.0), 1),
            }
        )
    rows.append(
        {
            "step": "finish-tracking (exit handler)",
            "task_wall_s": round(walls.get("finish-tracking-op", 0), 1),
            "compute_s": 0.0,
            "overhead_s": round(walls.get("finish-tracking-op", 0), 1),
        }
    )
    report = {
        "command": " ".join(["invfold", "run", "--runs-dir", "<tmp>", "--no-cache", *args.extra]),
        "wall_s": round(wall, 1),
        "compute_s": round(total_compute, 1),
        "ratio": round(wall / total_compute, 3),
        "target": TARGET,
        "outside_tasks_s": round(wall - in_tasks, 1),
        "steps": rows,
        "summary": proc.stdout.strip().splitlines()[-14:],
        "conditions": watch.finish(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print("| step | task wall (s) | own compute (s) | overhead (s) |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['step']} | {r['task_wall_s']} | {r['compute_s']} | {r['overhead_s']} |")
    print(
        f"| outside the tasks (start-up, local runner set-up, summary) | {report['outside_tasks_s']} | 0 | "
        f"{report['outside_tasks_s']} |"
    )
    print(
        f"\nwall {wall:.1f} s, steps' own compute {total_compute:.1f} s: ratio {wall / total_compute:.2f} "
        f"(target <= {TARGET})"
    )
    print("\n".join(report["summary"]))
    conditions.print_report(report["conditions"])
    return 0 if wall / total_compute <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
