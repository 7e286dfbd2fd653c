"""Environment variables set for the length of a block (the local pipeline runner, a command that
owns a training time budget): one place that puts back what the caller had."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def restored_environ(*names: str) -> Iterator[None]:
    """On exit, each of `names` is set again to its value on entry, or unset if it was unset,
    whatever the block did to it; other variables are left as the block left them."""
    saved = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
