"""Polling for a condition a real process brings about, with a message that says what never came."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, what: str):
    """predicate()'s first truthy value, polled every 0.2 s for `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
