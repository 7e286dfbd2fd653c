"""Input problems: an error that stops a read (`InputError`, in invfold.errors), or a counted skip
that lets it go on.

Policy shared by every reader:
- file-level problems (missing file, empty file, corrupt gzip, not a structure file, a structure
  file with no protein chain, an unreadable split file) always raise `InputError`;
- record-level problems (one bad line or record) become a `Skip` with a short stable `reason` in
  the default mode, and raise `InputError` (carrying the same reason) with `strict=True`.
"""

from __future__ import annotations

from dataclasses import dataclass

from invfold.errors import InputError


@dataclass
class Skip:
    """One record a reader passed over; `reason` is a short stable key prep counts by."""

    reason: str
    message: str
    name: str | None = None

    @classmethod
    def from_error(cls, err: InputError) -> Skip:
        return cls(err.reason, str(err), err.name)
