"""Tiny inputs that asked prep for unbounded memory (issue 23, item 4), each run as `invfold prep`
under an address-space limit of 1 GiB (tests/support/memory_bombs.py: prep's imports need under
512 MiB): before the bounds, the 2 KB mmCIF whose last residue is numbered 10^9 asked numpy for
3.7 GiB and the 0.25 MB gzip holding one 256 MB line ended in a MemoryError, both with a
traceback and exit 1. Now: a one-line error with exit 2, or a counted skip."""

from __future__ import annotations

import json

from invfold.components.prep.config import PrepConfig
from tests.support.corpus import good_entries, write_splits
from tests.support.memory_bombs import (
    PREP_LIMIT,
    gzip_long_line,
    gzip_ts50_list,
    huge_numbering_cif,
    one_line_error,
    run_limited,
    run_measured,
)


def test_a_residue_numbered_one_billion_is_a_one_line_error_naming_the_limit(tmp_path):
    cif = huge_numbering_cif(tmp_path / "bomb.cif")
    assert cif.stat().st_size < 2500
    # the one gap as wide as the span (--max-numbering-gap would close it): the span bound holds alone
    args = ["prep", str(cif), "--out", str(tmp_path / "out"), "--max-numbering-gap", str(2 * 10**9)]
    line = one_line_error(run_limited(args, PREP_LIMIT))
    assert "bomb.cif" in line and "numbering_span" in line and "max_numbering_span" in line
    assert "100,000" in line


def test_a_gzip_holding_one_256_mb_line_is_a_counted_skip_and_the_rest_is_prepared(tmp_path):
    entries = good_entries(12, seed=3)
    before = "".join(json.dumps(e) + "\n" for e in entries).encode()
    data = gzip_long_line(tmp_path / "set.jsonl.gz", before=before)
    assert data.stat().st_size < 2**20
    names = [e["name"] for e in entries]
    splits = write_splits(tmp_path / "splits.json", train=names[:8], validation=names[8:10], test=names[10:])
    out = tmp_path / "out"
    result = run_limited(["prep", str(data), "--split-file", str(splits), "--out", str(out)], PREP_LIMIT)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    card = json.loads((out / "card.json").read_text())
    assert card["dropped"] == {"line_too_long": 1}
    assert card["counts"]["read"] == 13 and card["counts"]["kept"] == 12


def test_the_line_alone_is_a_one_line_error_with_the_skip_counted(tmp_path):
    data = gzip_long_line(tmp_path / "bomb.jsonl.gz")
    result = run_limited(["prep", str(data), "--out", str(tmp_path / "out")], PREP_LIMIT)
    assert "line_too_long" in one_line_error(result)


def test_a_file_read_whole_past_max_file_bytes_is_a_one_line_error(tmp_path):
    """A TS50 list (read whole) that gzip expands past the bound: refused after reading the bound."""
    ts50 = tmp_path / "list.json.gz"
    gzip_long_line(ts50, line_bytes=300 * 2**20)
    result = run_limited(["prep", str(ts50), "--out", str(tmp_path / "out")], PREP_LIMIT)
    line = one_line_error(result)
    assert "list.json.gz" in line and "268,435,456 bytes" in line and "--max-file-bytes" in line


def test_each_bound_is_a_prep_option_judged_at_construction():
    cfg = PrepConfig(input="x.jsonl", out="o", max_line_bytes=10, max_file_bytes=20, max_numbering_span=30)
    limits = cfg.read_limits()
    assert (limits.max_line_bytes, limits.max_file_bytes, limits.max_numbering_span) == (10, 20, 30)
    for field in ("max_line_bytes", "max_file_bytes", "max_numbering_span"):
        try:
            PrepConfig(input="x.jsonl", out="o", **{field: 0})
        except ValueError as err:
            assert field in str(err)
        else:
            raise AssertionError(f"{field}=0 accepted")


# What a TS50 list may cost in resident memory, measured beside RLIMIT_AS: a pod's memory limit
# (a cgroup) kills the process rather than raising MemoryError. The reader holds one entry and a
# 1 MiB buffer; the whole command peaked at 97,920 KiB on such a list (`/usr/bin/time -v`).
PEAK_RSS_BOUND = 384 * 2**20


def test_a_ts50_list_is_decoded_one_entry_at_a_time_under_a_resident_memory_bound(tmp_path):
    """64 MiB of nested coordinate lists (a 0.2 MB gzip): decoded whole, prep peaked at 1,167,268
    KiB resident (a 250 MiB list: 4,291,972 KiB) before counting the entries; entry by entry,
    98,224 KiB (`/usr/bin/time -v`)."""
    ts50 = gzip_ts50_list(tmp_path / "list.json.gz", list_bytes=64 * 2**20)
    assert ts50.stat().st_size < 2**20
    result, peak = run_measured(["prep", str(ts50), "--out", str(tmp_path / "out")], PREP_LIMIT)
    assert 0 < peak < PEAK_RSS_BOUND, f"peak resident memory {peak / 2**20:.0f} MiB"
    line = one_line_error(result)  # every entry is a counted skip: nothing to prepare
    assert "none of 986 records ({'length_mismatch': 986})" in line


def test_a_ts50_entry_past_max_line_bytes_is_a_one_line_error(tmp_path):
    ts50 = gzip_ts50_list(tmp_path / "list.json.gz", list_bytes=2**20, residues=2000)  # 68 KB entries
    result = run_limited(["prep", str(ts50), "--out", str(tmp_path / "out"), "--max-line-bytes", "50000"], PREP_LIMIT)
    line = one_line_error(result)
    assert "list.json.gz: expected record 0: an entry of at most 50,000 bytes" in line and "--max-line-bytes" in line
