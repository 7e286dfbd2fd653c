"""Peak memory and throughput of one training process under each allocator, per model preset.

    python bench/memory_bench.py --data prepared/ --json memory_bench.json

For each preset, one training process (1 thread, TrainConfig's default token budget, `--steps`
optimizer steps on the train split, no validation or checkpoints) runs under each allocator in
turn, the order alternating over `--repeats` rounds so machine load falls on all alike:

- `glibc`: glibc's malloc with its defaults: the memory baseline;
- `keep`: glibc told never to trim or mmap (the launcher's former setting): the speed baseline;
- `jemalloc`: what the launcher gives its ranks now (`memory.allocator_env`);
- `tcmalloc` (only with `--settings ...,tcmalloc`): gperftools' tcmalloc, for comparison.

Peak RSS is the process's own ru_maxrss (os.wait4); throughput is observed residues per second of
training-loop time from metrics.jsonl, leaving out the first `--warmup-steps` steps. Targets:
jemalloc peak <= 1.25 x glibc, jemalloc residues/s >= keep; the pre-start estimate
(`memory.estimated_peak_gb`) is at least the measured jemalloc peak. A run whose RSS passes
`--rss-limit-gb` is stopped and reported as over the limit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import conditions
import psutil

from invfold.components.launch.processes import ENTRYPOINT
from invfold.components.model.config import ModelConfig
from invfold.components.train.config import TrainConfig
from invfold.components.train.memory import allocator_env, estimated_peak_gb

ALLOCATOR_VARIABLES = ("GLIBC_TUNABLES", "LD_PRELOAD", "MALLOC_CONF")
SETTINGS = {
    "glibc": {},
    "keep": {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=17179869184"},
    "jemalloc": allocator_env({}),
    "tcmalloc": {"LD_PRELOAD": "libtcmalloc_minimal.so.4"},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_once(data: str, preset: str, allocator: dict, args: argparse.Namespace, workdir: Path) -> dict:
    """One training process: its peak RSS (GiB) and residues/s after warm-up."""
    out = Path(tempfile.mkdtemp(dir=workdir))
    cfg = TrainConfig(
        data=data,
        out=str(out),
        preset=preset,
        max_steps=args.steps,
        validation_dataset=None,
        validate_every=0,
        checkpoint_every=0,
        log_every=1,
        threads=1,
        resume=False,
    )
    cfg.to_json(str(out / "config.json"))
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_VARIABLES}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    env.update(allocator)
    proc = subprocess.Popen(
        [sys.executable, "-m", ENTRYPOINT, "--config", str(out / "config.json")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    over_limit = False
    while True:  # poll, so that a setting that grows past --rss-limit-gb is stopped before it hurts
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        with contextlib.suppress(psutil.Error):
            if psutil.Process(proc.pid).memory_info().rss > args.rss_limit_gb * 2**30:
                over_limit = True
                proc.kill()
        time.sleep(0.2)
    stderr = proc.stderr.read().decode(errors="replace")
    peak = round(usage.ru_maxrss / 2**20, 2)
    if over_limit:
        return {"peak_rss_gb": peak, "residues_per_s": None, "over_limit": True}
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"training failed ({status}):\n{stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if r["split"] == "train" and r["step"] > args.warmup_steps]
    seconds = sum(r["residues"] / r["residues_per_s"] for r in timed)
    return {"peak_rss_gb": peak, "residues_per_s": round(sum(r["residues"] for r in timed) / seconds, 1)}


def summarize(preset: str, runs: dict[str, list[dict]]) -> dict:
    summary: dict = {}
    for name, results in runs.items():
        over = any(r.get("over_limit") for r in results)
        summary[name] = {
            "peak_rss_gb": max(r["peak_rss_gb"] for r in results),
            "residues_per_s": None if over else round(sum(r["residues_per_s"] for r in results) / len(results), 1),
            "over_limit": over,
        }
    estimate = estimated_peak_gb(ModelConfig.preset(preset), TrainConfig.tokens_per_batch, 1)
    summary["estimated_peak_gb"] = round(estimate, 2)
    if "jemalloc" in summary:
        jemalloc = summary["jemalloc"]
        summary["estimate_covers_jemalloc_peak"] = estimate >= jemalloc["peak_rss_gb"]
        if "glibc" in summary:
            summary["jemalloc_rss_vs_glibc"] = round(jemalloc["peak_rss_gb"] / summary["glibc"]["peak_rss_gb"], 2)
        keep = summary.get("keep", {}).get("residues_per_s")
        if keep and jemalloc["residues_per_s"]:
            summary["jemalloc_speed_vs_keep"] = round(jemalloc["residues_per_s"] / keep, 2)
        if "glibc" in summary and summary["glibc"]["residues_per_s"] and jemalloc["residues_per_s"]:
            summary["jemalloc_speed_vs_glibc"] = round(
                jemalloc["residues_per_s"] / summary["glibc"]["residues_per_s"], 2
            )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="prepared folder (invfold prep of the real shared set)")
    parser.add_argument("--preset", action="append", help="repeatable; default: default, proteinmpnn, small")
    parser.add_argument("--settings", default="glibc,keep,jemalloc", help=f"comma-separated of {list(SETTINGS)}")
    parser.add_argument(
        "--malloc-conf",
        action="append",
        default=[],
        metavar="NAME=CONF",
        help="another setting: jemalloc with MALLOC_CONF=CONF (repeatable)",
    )
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rss-limit-gb", type=float, default=12.0, help="stop a run whose RSS passes this")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    for candidate in args.malloc_conf:
        name, _, conf = candidate.partition("=")
        SETTINGS[name] = {"LD_PRELOAD": SETTINGS["jemalloc"]["LD_PRELOAD"], "MALLOC_CONF": conf}
    settings = args.settings.split(",") + [c.partition("=")[0] for c in args.malloc_conf]
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"--settings: unknown {unknown}; expected some of {list(SETTINGS)}")
    if "jemalloc" in settings and not SETTINGS["jemalloc"]:
        parser.error("jemalloc is not installed (apt install libjemalloc2)")
    results = {}
    watch = conditions.start(threads=1)
    watch.track()  # each setting's training process: the allocator it actually loaded
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.preset or ["default", "proteinmpnn", "small"]:
            runs: dict[str, list[dict]] = {s: [] for s in settings}
            for round_ in range(args.repeats):
                for name in settings if round_ % 2 == 0 else settings[::-1]:
                    runs[name].append(run_once(args.data, preset, SETTINGS[name], args, Path(tmp)))
                    print(preset, name, runs[name][-1], flush=True)
            results[preset] = summarize(preset, runs)
            print(json.dumps({preset: results[preset]}), flush=True)
    report = watch.finish()
    conditions.print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps({**results, "conditions": report}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
