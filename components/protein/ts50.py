"""Reader for TS50-style JSON lists: `[{"name", "seq", "coords": L x 4 x 3 (N, CA, C, O)}, ...]`.

Entries are parsed like chain-set lines (the CATH atom-dict form of `coords` is accepted too;
NaN tokens and nulls mark missing atoms).

Policy (see errors.py): a missing, empty, non-JSON or non-list file raises InputError (a split
file given here says so); a bad entry is a Skip with the jsonl reasons, or an InputError with
strict=True. Locations read "record 3" (0-based position in the list).

Memory: the list is decoded one entry at a time from the (decompressed) stream, so a reader
holds one entry and a bounded buffer, never the whole list: decoded whole, JSON numbers and
lists take 10-20 times their text (a 250 MiB list of coordinates asked for gigabytes). An entry is
bounded like a chain-set line (`limits.max_line_bytes`) and the file like any file read
(`limits.max_file_bytes`, decompressed); past either, a one-line InputError (`too_large`).
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator
from typing import BinaryIO

from invfold import storage
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.jsonl import parse_object
from invfold.components.protein.limits import DEFAULT_LIMITS, ReadLimits
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.splits import SPLIT_NAMES

CHUNK_CHARS = 1 << 20
WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def read_ts50(
    path: str | os.PathLike, strict: bool = False, limits: ReadLimits = DEFAULT_LIMITS
) -> Iterator[ChainRecord | Skip]:
    with storage.open_binary(path) as stream:
        entries = _ListStream(stream, path, limits)
        if entries.is_list():
            yield from _records(entries, path, strict)
            return
    _refuse_whole(path, limits)


def _records(entries: _ListStream, path, strict: bool) -> Iterator[ChainRecord | Skip]:
    count = 0
    for i, entry in enumerate(entries):
        count += 1
        try:
            try:
                record = parse_object(entry, path, f"record {i}", source=f"{path}#{i}")
            except MemoryError:
                raise storage.out_of_memory(path, f"record {i}") from None
        except InputError as err:
            if strict:
                raise
            yield Skip.from_error(err)
            continue
        yield record
    if not count:
        raise InputError(path, None, None, "at least one record", "an empty list", reason="empty_file")


def _refuse_whole(path, limits: ReadLimits) -> None:
    """A file that does not start with `[`: read whole (bounded) to say what it is instead."""
    entries = storage.load_json(path, limits.max_file_bytes)
    if isinstance(entries, dict) and set(entries) & (set(SPLIT_NAMES) | {"cath_nodes"}):
        raise InputError(
            path,
            None,
            None,
            "a JSON list of protein records",
            "a split file (train/validation/test lists); pass it as the split file",
            reason="not_a_protein_set",
        )
    raise InputError(
        path, None, None, "a JSON list of protein records", type(entries).__name__, reason="not_a_protein_set"
    )


class _ListStream:
    """The values of a top-level JSON list, decoded one at a time from a binary stream (UTF-8,
    BOM tolerated). The buffer holds the current entry and at most one chunk beyond it; an entry
    that does not end within `max_line_bytes` characters, or a stream longer than
    `max_file_bytes`, is refused before it grows further."""

    def __init__(self, stream: BinaryIO, path, limits: ReadLimits):
        self.stream, self.path, self.limits = stream, path, limits
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()
        self.buf, self.pos, self.read_bytes, self.lines, self.eof = "", 0, 0, 0, False

    def _fill(self, at_least: int = CHUNK_CHARS) -> None:
        self.lines += self.buf.count("\n", 0, self.pos)
        self.buf, self.pos = self.buf[self.pos :], 0
        want = len(self.buf) + at_least
        while not self.eof and len(self.buf) < want:
            try:
                raw = self.stream.read(CHUNK_CHARS)
            except storage.GZIP_ERRORS as err:
                raise storage.gzip_error(self.path, err) from None
            self.read_bytes += len(raw)
            if self.read_bytes > self.limits.max_file_bytes:
                raise storage.too_large(self.path, None, self.limits.max_file_bytes, "max_file_bytes", "a file")
            try:
                self.buf += self.decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as err:
                raise self._invalid(f"not UTF-8 ({err.reason})") from None
            self.eof = not raw

    def _skip_space(self) -> str:
        """The next character after whitespace ("" at the end of the stream)."""
        while True:
            self.pos = WHITESPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]
            self._fill()

    def _invalid(self, detail: str, at: int | None = None) -> InputError:
        line = None if at is None else self.lines + self.buf.count("\n", 0, at) + 1
        return InputError(self.path, line, None, "valid JSON", f"invalid JSON ({detail})", reason="invalid_json")

    def is_list(self) -> bool:
        if self._skip_space() != "[":
            return False
        self.pos += 1
        return True

    def _value(self, index: int):
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
                if end - self.pos > self.limits.max_line_bytes:  # within one chunk, yet over the bound
                    raise self._too_large(index)
                if end < len(self.buf) or self.eof:  # else a number may go on in the next chunk
                    self.pos = end
                    return value
            except json.JSONDecodeError as err:
                if self.eof:
                    raise self._invalid(err.msg, err.pos) from None
            except ValueError as err:  # not a syntax error: a number too long to convert
                raise self._invalid(str(err)[:200]) from None
            except RecursionError:
                raise storage.too_deep(self.path, None) from None
            except MemoryError:
                raise storage.out_of_memory(self.path, f"record {index}") from None
            held = len(self.buf) - self.pos
            if held > self.limits.max_line_bytes:
                raise self._too_large(index)
            self._fill(at_least=max(CHUNK_CHARS, held))  # doubling: each entry is parsed O(log) times

    def _too_large(self, index: int) -> InputError:
        limit = self.limits.max_line_bytes
        return storage.too_large(self.path, None, limit, "max_line_bytes", f"record {index}: an entry")

    def __iter__(self):
        if self._skip_space() == "]":
            self.pos += 1
        else:
            index = 0
            while True:
                yield self._value(index)
                index += 1
                c = self._skip_space()
                self.pos += 1
                if c == "]":
                    break
                if c != ",":
                    raise self._invalid("expecting ',' delimiter" if c else "unterminated list", self.pos - 1)
                if self._skip_space() == "]":
                    raise self._invalid("trailing comma", self.pos)
        if self._skip_space():
            raise self._invalid("extra data after the list", self.pos)
