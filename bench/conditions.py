"""The conditions a benchmark ran under, printed and written beside its figures.

A figure measured on one machine does not travel without them: the same command gave 1.75x on
one day and 2.98x on another (bench/README.md, "Training against ProteinMPNN"). Each bench calls

    watch = conditions.start(threads=N)       # load average and CPU at the start
    ... measure; watch.sample(pid) while a child it measures runs (or watch.track(pid)) ...
    report = watch.finish()                   # load average at the end, torch's build, processes
    conditions.print_report(report)           # markdown, on stdout
    json_result["conditions"] = report        # and in any JSON it writes

The allocator of each process is the one it actually loaded, read from /proc/<pid>/maps
(libjemalloc, libtcmalloc, else glibc's malloc), not the one its environment asked for: an
LD_PRELOAD that names a missing library, or a process that sets its own, would otherwise be
misreported. `python bench/conditions.py` prints this process's conditions (bench/gpu_smoke.sh).
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

# /proc/<pid>/maps path fragment -> allocator name; glibc's malloc when none is mapped
ALLOCATOR_LIBRARIES = (("libjemalloc", "jemalloc"), ("libtcmalloc", "tcmalloc"))
# the CPU flags that decide which kernels oneDNN/MKL and torch's vectorized code run
FLAG_PATTERN = re.compile(r"^(avx2|avx512\w*|amx\w*|fma)$")
# the environment of a measured process that changes its speed
ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD", "MALLOC_CONF", "GLIBC_TUNABLES")
# a thread that used at least this much CPU computed (the others are idle pool or helper threads)
BUSY_THREAD_S = 1.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def allocator_of(pid: int | str = "self") -> str:
    """The allocator process `pid` has loaded: 'jemalloc', 'tcmalloc' or 'glibc'."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    for fragment, name in ALLOCATOR_LIBRARIES:
        if fragment in maps:
            return name
    return "glibc"


def cpu() -> dict:
    """Model, the vector/matrix flags, and the cores this process may run on."""
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return {
        "model": model,
        "flags": sorted(f for f in flags if FLAG_PATTERN.match(f)),
        "cores": len(os.sched_getaffinity(0)),
    }


def torch_build() -> dict:
    """torch's version and the build facts that decide CPU speed (torch.__config__.show())."""
    import torch  # here, not at the top: a bench that measures the CLI's start-up must not pay it

    shown = torch.__config__.show()

    def setting(name: str) -> str | None:
        found = re.search(rf"\b{name}=([^,\n]+)", shown)
        return found.group(1).strip() if found else None

    capability = re.search(r"CPU capability usage: (\S+)", shown)
    return {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cpu_capability": capability.group(1) if capability else None,
        "mkl": torch.backends.mkl.is_available(),
        "onednn": torch.backends.mkldnn.is_available(),
        "openmp": setting("USE_OPENMP"),
        "blas": setting("BLAS_INFO"),
        "intra_op_threads": torch.get_num_threads(),
    }


def process(pid: int | str = "self") -> dict:
    """What one process ran under: its allocator, threads (all, and those that used >= 1 CPU-s)
    and the environment variables that change its speed."""
    pid = os.getpid() if pid == "self" else int(pid)
    if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
        raise ProcessLookupError(f"process {pid} has ended")  # a zombie maps nothing
    busy = 0
    tasks = Path(f"/proc/{pid}/task")
    for task in tasks.iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        busy += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS >= BUSY_THREAD_S  # utime, stime
    environ = dict(
        entry.split("=", 1) for entry in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in entry
    )
    return {
        "pid": pid,
        "command": command_of(pid),
        "allocator": allocator_of(pid),
        "threads": len(list(tasks.iterdir())),
        "busy_threads": busy,
        "environment": {name: environ[name] for name in ENVIRONMENT if environ.get(name)},
    }


def command_of(pid: int) -> str:
    """The process's command line, each path shortened to its last part (no machine's folders)."""
    args = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    return " ".join(os.path.basename(a) if a.startswith("/") else a for a in args if a)[:160]


def descendants(pid: int) -> list[int]:
    """Every live process under `pid` (children, theirs, ...)."""
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            queue += children
    return found


@dataclass
class Watch:
    """The conditions of one bench run: `start()` makes it, `finish()` reports it."""

    threads: int | None
    load_start: tuple[float, float, float]
    cpu: dict
    measured: dict[int, dict] = field(default_factory=dict)  # pid -> its latest process() reading
    _stop: threading.Event = field(default_factory=threading.Event)
    _samplers: list[threading.Thread] = field(default_factory=list)

    def sample(self, pid: int) -> None:
        """Record `pid` and every process under it as they are now (a process that ends between
        listing and reading is left out)."""
        for each in (pid, *descendants(pid)):
            try:
                reading = process(each)
            except (OSError, ValueError):
                continue
            if "python" in reading["command"] or each == pid:
                self.measured[each] = reading

    def track(self, pid: int | None = None, every_s: float = 2.0) -> None:
        """Sample `pid` (default: this process and its children) every `every_s` in the background
        until finish(): for a bench whose children are started by library code (launch_local)."""
        pid = os.getpid() if pid is None else pid

        def loop() -> None:
            while not self._stop.wait(every_s):
                self.sample(pid)

        sampler = threading.Thread(target=loop, daemon=True)
        sampler.start()
        self._samplers.append(sampler)

    def finish(self, torch_info: bool = True) -> dict:
        self._stop.set()
        for sampler in self._samplers:
            sampler.join()
        self.sample(os.getpid())
        return {
            "cpu": self.cpu,
            "threads_per_side": self.threads,
            "load_average": {"start": list(self.load_start), "end": list(os.getloadavg())},
            "python": platform.python_version(),
            "torch": torch_build() if torch_info else None,
            "processes": sorted(self.measured.values(), key=lambda p: p["pid"]),
        }


def start(threads: int | None = None) -> Watch:
    """Begin a bench run: the load average and CPU now. `threads`: the thread count it gives each
    side (None when it sets none)."""
    return Watch(threads=threads, load_start=os.getloadavg(), cpu=cpu())


def markdown(report: dict) -> str:
    """The report as lines a reader pastes under a result table."""
    cpu_, torch_, load = report["cpu"], report["torch"], report["load_average"]
    lines = [
        f"- CPU: {cpu_['model']}, {cpu_['cores']} cores; flags: {' '.join(cpu_['flags']) or 'none of avx2/avx512/amx'}",
        f"- threads per side: {report['threads_per_side']}",
        "- load average (1, 5, 15 min): start {}, end {}".format(
            ", ".join(f"{x:.2f}" for x in load["start"]), ", ".join(f"{x:.2f}" for x in load["end"])
        ),
        f"- Python {report['python']}",
    ]
    if torch_:
        lines.append(
            f"- torch {torch_['version']} (CUDA build {torch_['cuda_build']}; CPU capability "
            f"{torch_['cpu_capability']}; MKL {torch_['mkl']}, oneDNN {torch_['onednn']}, OpenMP "
            f"{torch_['openmp']}, BLAS {torch_['blas']})"
        )
    alike: dict[tuple, list[dict]] = {}  # the same command under the same settings: one line
    for p in report["processes"]:
        key = (p["command"][:100], p["allocator"], tuple(sorted(p["environment"].items())))
        alike.setdefault(key, []).append(p)
    for (command, allocator, environment), group in alike.items():
        env = ", ".join(f"{k}={v}" for k, v in environment) or "none of " + "/".join(ENVIRONMENT)
        busy = sorted({p["busy_threads"] for p in group})
        count = f"{len(group)} processes" if len(group) > 1 else f"process {group[0]['pid']}"
        lines.append(
            f"- {count} `{command}`: allocator **{allocator}**, "
            f"{'/'.join(map(str, busy))} busy of {max(p['threads'] for p in group)} threads; {env}"
        )
    return "Conditions:\n\n" + "\n".join(lines)


def print_report(report: dict, file=None) -> None:
    print("\n" + markdown(report), file=file or sys.stdout, flush=True)


if __name__ == "__main__":
    report = start().finish(torch_info="--no-torch" not in sys.argv)
    print(json.dumps(report, indent=2) if "--json" in sys.argv else markdown(report))
