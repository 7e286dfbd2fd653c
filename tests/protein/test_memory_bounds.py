"""The readers' bounds (protein/limits.py, issue 23 item 4), in process and at small sizes: a line,
a file or a numbering span over its bound is a counted skip or a one-line InputError naming the
bound, and a MemoryError while reading one record or one file is that record's or file's counted
`out_of_memory` skip. The full-size inputs run under an address-space limit in tests/prep,
tests/model and tests/design (test_memory_bounds.py)."""

from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pytest

from invfold import storage
from invfold.components.protein import jsonl, structure
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.limits import ReadLimits
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.splits import read_split_file
from invfold.components.protein.structure import increasing_numbering, read_structures
from invfold.errors import ConfigError
from tests.support.builders import chain_dict, jsonl_line
from tests.support.fuzz import memory_limit
from tests.support.memory_bombs import huge_numbering_cif


def _set(tmp_path, *lines: str, gz: bool = False):
    data = "".join(line + "\n" for line in lines).encode()
    path = tmp_path / ("set.jsonl.gz" if gz else "set.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_a_line_over_max_line_bytes_is_skipped_without_losing_the_next(tmp_path, gz):
    short, long = jsonl_line(chain_dict("a.A", "ACD")), jsonl_line(chain_dict("b.A", "ACDEFGHIK" * 20))
    path = _set(tmp_path, short, long, short.replace("a.A", "c.A"), gz=gz)
    limits = ReadLimits(max_line_bytes=len(short) + 10)
    out = list(read_chain_set(path, limits=limits))
    assert [type(o) for o in out] == [ChainRecord, Skip, ChainRecord] and out[2].name == "c.A"
    assert out[1].reason == "line_too_long" and "set.jsonl" in out[1].message and ":2:" in out[1].message
    assert "max_line_bytes" in out[1].message
    with pytest.raises(InputError, match=r":2: expected a line of at most .* bytes \(limit max_line_bytes"):
        list(read_chain_set(path, strict=True, limits=limits))


def test_read_lines_reads_a_long_line_in_bounded_pieces():
    class Recording(io.BytesIO):
        sizes: list[int] = []

        def readline(self, size=-1):
            self.sizes.append(size)
            return super().readline(size)

    stream = Recording(b"ab\n" + b"x" * 100 + b"\ncd")
    assert list(storage.read_lines(stream, 8)) == [b"ab\n", None, b"cd"]
    assert set(Recording.sizes) == {9}


def test_a_line_of_exactly_the_limit_is_kept():
    assert list(storage.read_lines(io.BytesIO(b"1234567\n89"), 8)) == [b"1234567\n", b"89"]


def test_a_file_over_max_file_bytes_is_refused_naming_the_bound(tmp_path):
    split = tmp_path / "splits.json"
    split.write_text(json.dumps({"train": ["a"] * 100, "test": ["b"]}))
    with pytest.raises(InputError, match=r"splits\.json: expected a file of at most 50 bytes \(limit max_file_bytes"):
        read_split_file(split, ReadLimits(max_file_bytes=50))
    assert read_split_file(split).splits["train"] == ["a"]


def test_a_chain_numbered_past_max_numbering_span_is_a_counted_skip_in_a_folder(tmp_path):
    folder = tmp_path / "structures"
    folder.mkdir()
    huge_numbering_cif(folder / "bomb.cif")
    huge_numbering_cif(folder / "fine.cif", last_number=5)
    # the one gap as wide as the span: the span bound alone stands between it and the allocation
    limits = ReadLimits(max_numbering_gap=2 * 10**9)
    with memory_limit():  # without the bound this read asks for 48 GB: fail here, not on the machine
        out = list(read_structures(folder, limits=limits))
    skipped = [o for o in out if isinstance(o, Skip)]
    assert [o.name for o in out if isinstance(o, ChainRecord)] == ["fine.A"]
    assert len(skipped) == 1 and skipped[0].reason == "no_protein_chain"
    assert "numbering_span" in skipped[0].message and "max_numbering_span" in skipped[0].message


def test_the_span_bound_is_the_limit_given(tmp_path):
    path = huge_numbering_cif(tmp_path / "gap.cif", last_number=50)
    (record,) = read_protein_set(path, limits=ReadLimits(max_numbering_span=50))
    assert len(record) == 50 and record.extra["gap_filled"] == 45
    with pytest.raises(
        InputError, match=r"chain 'A': field 'residue numbers': expected a numbering span of at most 49"
    ):
        list(read_protein_set(path, strict=True, limits=ReadLimits(max_numbering_span=49)))


def test_numbering_at_the_ends_of_int32_does_not_overflow():
    numbers = [2**31 - 2, -(2**31), 2**31 - 1]
    index = increasing_numbering(numbers)
    assert (np.diff(index) > 0).all() and index[0] == 2**31 - 2


def test_a_memory_error_on_one_line_is_a_counted_out_of_memory_skip(tmp_path, monkeypatch):
    """A stand-in for the allocation failure (a real one needs a record larger than memory, which
    the bounds now refuse first): parse_line raising MemoryError on line 2."""
    real = jsonl.parse_line

    def parse(raw, path, lineno):
        if lineno == 2:
            raise MemoryError
        return real(raw, path, lineno)

    monkeypatch.setattr(jsonl, "parse_line", parse)
    lines = [jsonl_line(chain_dict(f"{c}.A", "ACD")) for c in "abc"]
    out = list(read_chain_set(_set(tmp_path, *lines)))
    assert [o.reason for o in out if isinstance(o, Skip)] == ["out_of_memory"]
    assert [o.name for o in out if isinstance(o, ChainRecord)] == ["a.A", "c.A"]


def test_a_memory_error_on_one_structure_file_is_a_counted_skip(tmp_path, monkeypatch):
    """Stand-in as above: gemmi's parse of one file raising MemoryError."""
    folder = tmp_path / "s"
    folder.mkdir()
    huge_numbering_cif(folder / "a.cif", last_number=5)
    huge_numbering_cif(folder / "b.cif", last_number=5)
    real = structure._parse

    def parse(path, limits):
        if "a.cif" in str(path):
            raise MemoryError
        return real(path, limits)

    monkeypatch.setattr(structure, "_parse", parse)
    out = list(read_structures(folder))
    assert [(type(o).__name__, getattr(o, "reason", None)) for o in out] == [
        ("Skip", "out_of_memory"),
        ("ChainRecord", None),
    ]


def test_limits_are_positive_integers():
    for field in ("max_line_bytes", "max_file_bytes", "max_numbering_span"):
        with pytest.raises(ConfigError, match=field):
            ReadLimits(**{field: 0})
