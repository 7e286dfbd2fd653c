"""Stopping a server the tests started in a session of its own (`start_new_session=True`)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the process's group, SIGKILL if it has not exited after `timeout` seconds;
    nothing when it has exited already (its group may be gone)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
