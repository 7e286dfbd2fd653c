"""How long `invfold` takes, and how much memory, to print help or reject a mistake.

Each command runs as a fresh process (the way a user types it), alternating with two baselines
in the same run: the bare interpreter (`python -c pass`: the floor no CLI can go under) and
`python -c "import torch"` (what every `--help` paid while building the parser imported torch).
Wall time and peak RSS (ru_maxrss of the child) per command; the best of the repeats is the
headline (the machine is shared; the minimum is the least disturbed run), medians beside it.

    python bench/cli_startup.py --repeats 5 [--compare OTHER_VENV/bin/python]

The error lines use files made in a temp folder (a missing model, a file that is not a model, a
config file with a misspelt key). `--compare` also runs `invfold --help` and `invfold train
--help` with another interpreter (another checkout's venv: the code before a change) in the same
alternation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import conditions


def measure(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compare", metavar="PYTHON", help="another venv's python: its invfold beside this one")
    args = parser.parse_args()
    watch = conditions.start()
    watch.track(every_s=0.25)  # the commands it times, while they run
    tmp = tempfile.mkdtemp(prefix="cli-startup-")
    garbage = os.path.join(tmp, "model.pt")
    with open(garbage, "wb") as fh:
        fh.write(b"not a model")
    typo = os.path.join(tmp, "train.yaml")
    with open(typo, "w") as fh:
        fh.write(f"data: {tmp}\nout: {tmp}/t\nmax_step: 3\n")
    cli = [sys.executable, "-m", "invfold"]
    commands = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "python -c 'import torch' (old --help)": [sys.executable, "-c", "import torch"],
        "invfold --help": [*cli, "--help"],
        "invfold train --help": [*cli, "train", "--help"],
        "invfold design --help": [*cli, "design", "--help"],
        "invfold run --help": [*cli, "run", "--help"],
        "invfold design: missing model": [*cli, "design", f"{tmp}/missing.pt", f"{tmp}/x.pdb", "--out", f"{tmp}/d.fa"],
        "invfold evaluate: not a model": [*cli, "evaluate", garbage, "--data", tmp, "--out", f"{tmp}/e"],
        "invfold train: no budget": [*cli, "train", "--data", tmp, "--out", f"{tmp}/t", "--recipe", "full"],
        "invfold run: bad choice": [*cli, "run", "--preset", "nope"],
        "invfold train --print-config": [*cli, "train", "--print-config"],
        "invfold train: config key misspelt": [*cli, "train", "--config", typo],
        "invfold completion bash": [*cli, "completion", "bash"],
    }
    if args.compare:
        commands["(compare) invfold --help"] = [args.compare, "-m", "invfold", "--help"]
        commands["(compare) invfold train --help"] = [args.compare, "-m", "invfold", "train", "--help"]
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeats):  # alternate: every command sees the same machine load
        for name, argv in commands.items():
            seen[name].append(measure(argv))
    floor = min(s for s, _ in seen["python -c pass (floor)"])
    torch_s = min(s for s, _ in seen["python -c 'import torch' (old --help)"])
    print(f"{'command':42} {'best s':>7} {'median s':>9} {'peak MB':>8} {'x floor':>8} {'x torch':>8}")
    for name, runs in seen.items():
        best, median = min(s for s, _ in runs), statistics.median(s for s, _ in runs)
        peak = max(m for _, m in runs)
        print(f"{name:42} {best:7.3f} {median:9.3f} {peak:8.1f} {best / floor:8.2f} {best / torch_s:8.2f}")
    print(f"repeats {args.repeats}")
    conditions.print_report(watch.finish())  # torch imported here, after every timing
    return 0


if __name__ == "__main__":
    sys.exit(main())
