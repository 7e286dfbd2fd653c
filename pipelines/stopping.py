"""SIGTERM or SIGINT to `invfold run`: the processes it started stop with it.

KFP's local runner starts each step as a subprocess of this Python (ParallelFor's shards from
worker threads), and the train step starts the training ranks under it. Python's default
SIGTERM ends this process alone and leaves all of them running. `stop_on_signal` instead, on
the first SIGTERM/SIGINT: sends SIGTERM to every descendant (the ranks checkpoint, as they do
when a pod is stopped), SIGKILL to those still there after `grace_s`, keeps doing so for any
process a runner thread starts meanwhile, and raises `Signalled` in the main thread, a
BaseException so that the runner's `except Exception` does not take it for a failed task.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

import psutil

STOP_GRACE_S = 30.0  # a rank's checkpoint after SIGTERM; then SIGKILL
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Signalled(BaseException):
    """The run was asked to stop; `signum` says by which signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class ChildReaper:
    """Stops every descendant of this process, those it knew before they were orphaned too
    (a step killed first leaves its own children to init), until `close()`."""

    def __init__(self, grace_s: float = STOP_GRACE_S):
        self.grace_s = grace_s
        self.me = psutil.Process()
        self.known: dict[int, psutil.Process] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="invfold-child-reaper", daemon=True)

    def start(self) -> ChildReaper:
        self._sweep()  # the tree as it is now, before anything in it can be orphaned
        self.thread.start()
        return self

    def close(self) -> list[int]:
        """Stop sweeping after a last sweep; returns the pids it stopped."""
        self.done.set()
        self.thread.join()
        self._sweep()
        return sorted(self.known)

    def _descendants(self) -> list:
        try:
            found = self.me.children(recursive=True)
        except psutil.Error:
            found = []
        for proc in found:
            self.known.setdefault(proc.pid, proc)
        return list(self.known.values())

    def _sweep(self) -> None:
        procs = [p for p in self._descendants() if _alive(p)]
        for proc in procs:
            _send(proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while procs and time.monotonic() < deadline:
            time.sleep(0.1)
            procs = [p for p in procs if _alive(p)]
        for proc in procs:
            _send(proc, signal.SIGKILL)

    def _run(self) -> None:
        while not self.done.wait(0.2):
            self._sweep()


def _alive(proc) -> bool:
    """Running (a zombie has exited: its parent reaps it, not us, so its exit status is kept)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _send(proc, sig: int) -> None:
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)


@contextlib.contextmanager
def stop_on_signal(grace_s: float = STOP_GRACE_S) -> Iterator[None]:
    """Within: SIGTERM/SIGINT stop every descendant (see the module docstring) and raise
    `Signalled` here, once they are gone. Outside the main thread signals cannot be handled:
    then nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reaper: ChildReaper | None = None

    def handler(signum, frame):
        nonlocal reaper
        if reaper is not None:  # a second signal while stopping: already on it
            return
        reaper = ChildReaper(grace_s).start()
        raise Signalled(signum)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if reaper is not None:
            reaper.close()
