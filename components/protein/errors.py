"""Input problems: an error that stops a read, or a counted skip that lets it go on.

Policy shared by every reader:
- file-level problems (missing file, empty file, corrupt gzip, not a structure file, a structure
  file with no protein chain, an unreadable split file) always raise `InputError`;
- record-level problems (one bad line or record) become a `Skip` with a short stable `reason` in
  the default mode, and raise `InputError` (carrying the same reason) with `strict=True`.
"""

from __future__ import annotations

from dataclasses import dataclass


class InputError(ValueError):
    """A problem with one input, naming the file, where in it, the field, and what was expected.

    `location` is a line number (int) or a free phrase such as "record '1abc.A'" or "chain 'B'";
    `field` is a dotted field name ("coords.CA") or None for a problem with the whole file.
    """

    def __init__(
        self,
        path,
        location: int | str | None,
        field: str | None,
        expected: str,
        got: object = None,
        *,
        reason: str = "invalid_input",
        name: str | None = None,
    ):
        self.path = str(path)
        self.location = location
        self.field = field
        self.expected = expected
        self.got = got
        self.reason = reason
        self.name = name
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path
        if isinstance(self.location, int):
            where += f":{self.location}"
        elif self.location:
            where += f": {self.location}"
        what = f"field '{self.field}': expected {self.expected}" if self.field else f"expected {self.expected}"
        if self.got is not None:
            what += f", got {self.got}"
        return f"{where}: {what}"


@dataclass
class Skip:
    """One record a reader passed over; `reason` is a short stable key prep counts by."""

    reason: str
    message: str
    name: str | None = None

    @classmethod
    def from_error(cls, err: InputError) -> Skip:
        return cls(err.reason, str(err), err.name)
