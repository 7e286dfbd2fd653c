"""The allocator of every process that runs the network: jemalloc when the machine has it.

Eager PyTorch on CPU allocates and frees large, differently sized buffers at every layer. glibc's
malloc hands blocks above its mmap threshold back to the kernel when they are freed, so every
large tensor is faulted in (and zeroed by the kernel) again: evaluating the published weights
on the real test set spent as much system time as compute in 37 M page faults. jemalloc with
decay off keeps freed pages for reuse (bench/README.md: `invfold evaluate`, training memory).
Training ranks get it from the launcher's environment; `invfold evaluate`, `score` and `export`
re-run themselves under it (reexec_under_jemalloc) and `invfold run` gives it to every step.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

JEMALLOC = "jemalloc"
# keep freed pages for reuse instead of purging them on a timer (jemalloc's default decay purges a
# share of them every step: 0.43x the speed), and let the thread cache hold freed blocks up to
# 8 MiB (default 32 KiB); figures in bench/README.md
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1,tcache_max:8388608"
# set by reexec_under_jemalloc in the process it starts: never re-run twice
REEXEC_MARK = "INVFOLD_ALLOCATOR_SET"


def allocator_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes a new process use jemalloc: LD_PRELOAD of the machine's
    libjemalloc (apt libjemalloc2), unless the user already chose an allocator (LD_PRELOAD,
    GLIBC_TUNABLES or MALLOC_CONF set) or the library is absent (then glibc's defaults: slower,
    same memory)."""
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_CONF")):
        return {}
    library = ctypes.util.find_library(JEMALLOC)
    return {"LD_PRELOAD": library, "MALLOC_CONF": JEMALLOC_CONF} if library else {}


def is_invfold_command(argv0: str | None = None) -> bool:
    """Whether this process is the `invfold` command itself (the console script, or `python -m
    invfold...`), the only process a handler may replace."""
    path = os.path.normpath(argv0 if argv0 is not None else (sys.argv[0] if sys.argv else ""))
    name, parent = os.path.basename(path), os.path.basename(os.path.dirname(path))
    return name == "invfold" or parent == "invfold"


def reexec_under_jemalloc() -> None:
    """Replace this command's process by the same command under jemalloc (allocator_env), once;
    returns without doing anything when the allocator is already chosen or jemalloc is absent.
    Call it first thing in a CLI handler, before any work (the process starts over)."""
    extra = allocator_env()
    if not extra or os.environ.get(REEXEC_MARK) or not getattr(sys, "orig_argv", None):
        return
    if not is_invfold_command():  # called in-process (a test, a notebook): never replace the caller
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(sys.orig_argv), {**os.environ, **extra, REEXEC_MARK: "1"})
