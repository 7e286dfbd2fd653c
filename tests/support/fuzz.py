"""Property-based fuzzing of the readers: real records, mutated the
ways files break or are crafted (truncation, byte flips, deep nesting, huge numbers, spliced or
replaced values), and the one rule every reader keeps: each outcome is a record, a counted skip,
or a one-line InputError.

FUZZ is the fixed profile every fuzz test runs under: derandomized (the same examples on every
run, so CI is reproducible and a failure reruns as is), no example database, no deadline (the
machine is shared), and a bounded number of examples per test (each test passes its own). Each
example runs under an address-space limit of the process's current size plus HEADROOM, so a
reader that asks for unbounded memory fails as it would in a small pod; a MemoryError-derived
`out_of_memory` skip counts as a failure here (no mutation of a few-KB real record should need a
GiB).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import resource

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.record import ChainRecord
from tests.support.paths import REPO, SHARED_DATA

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("INVFOLD_FUZZ_EXAMPLES", "300")),
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
settings.register_profile("invfold-fuzz", FUZZ)

HEADROOM = 2**30
SAMPLE = REPO / "src" / "invfold" / "data" / "sample_chain_set.jsonl.gz"
SHARED = SHARED_DATA / "real_chain_set.jsonl.gz"

# What a crafted number can be: past float64 (inf on parsing), past int64 and int32, past Python's
# 4,300-digit int limit, tiny, signed zero, and the non-JSON tokens Python's json accepts.
HUGE_NUMBERS = [
    "1e309",
    "-1e400",
    "1e-400",
    "1" + "0" * 400,
    "9" * 5000,
    "2147483648",
    "-2147483649",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1000000000",
    "-0",
    "NaN",
    "Infinity",
    "-Infinity",
]
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def real_lines(count: int = 2) -> list[bytes]:
    """The `count` shortest chain-set lines of the bundled sample (one with a NaN token among
    them), plus the shortest of the project's real shared set when it is there."""
    lines = gzip.open(SAMPLE, "rb").read().splitlines(keepends=True)
    lines.sort(key=len)
    picked = lines[:count]
    with_nan = next(line for line in lines if b"NaN" in line)
    if with_nan not in picked:
        picked.append(with_nan)
    if SHARED.exists():
        picked.append(min(gzip.open(SHARED, "rb").read().splitlines(keepends=True), key=len))
    return picked


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """One to three byte-level mutations of `data`."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "nest", "number", "splice", "insert"]))
        if not out:
            break
        at = draw(st.integers(0, len(out) - 1))
        if kind == "truncate":
            del out[at:]
        elif kind == "flip":
            out[at] ^= draw(st.integers(1, 255))
        elif kind == "nest":
            depth = draw(st.sampled_from([2, 1025, 5000]))
            end = draw(st.integers(at, len(out)))
            out[at:end] = b"[" * depth + out[at:end] + b"]" * draw(st.sampled_from([0, depth]))
        elif kind == "number":
            matches = list(NUMBER.finditer(bytes(out)))
            if matches:
                m = matches[draw(st.integers(0, len(matches) - 1))]
                out[m.start() : m.end()] = draw(st.sampled_from(HUGE_NUMBERS)).encode()
        elif kind == "splice":
            end = draw(st.integers(at, min(len(out), at + 400)))
            where = draw(st.integers(0, len(out)))
            out[where:where] = out[at:end]
        else:
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(out)


JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "\n", "A" * 600, "null", "NaN", "../../x", "\x00"]),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated_json(draw, obj):
    """`obj` with one value replaced by any JSON value, one key renamed or dropped."""
    obj = json.loads(json.dumps(obj))
    paths = list(_paths(obj))
    path = draw(st.sampled_from(paths)) if paths else ()
    if not path:
        return draw(JSON_VALUES)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    kind = draw(st.sampled_from(["replace", "rename", "drop"] if isinstance(parent, dict) else ["replace"]))
    key = path[-1]
    if kind == "replace":
        parent[key] = draw(JSON_VALUES)
    elif kind == "rename":
        parent[draw(st.text(max_size=10))] = parent.pop(key)
    else:
        del parent[key]
    return obj


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        # a few positions of a long list are enough (coordinates are thousands of numbers)
        for i in sorted({0, len(value) // 2, len(value) - 1}) if value else ():
            yield from _paths(value[i], (*prefix, i))


@contextlib.contextmanager
def memory_limit(headroom: int = HEADROOM):
    """Cap this process's address space at its current size + `headroom` for the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        size = int(fh.read().split()[0]) * resource.getpagesize()
    cap = size + headroom if hard == resource.RLIM_INFINITY else min(size + headroom, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def check_outcomes(read) -> list:
    """Run `read()` (a reader call that returns records/skips) under the memory limit and assert
    the rule: records that keep the record contract, skips with a reason, or one InputError, each
    message on one line. Returns the items (an InputError: [])."""
    try:
        with memory_limit():
            items = list(read())
    except InputError as err:
        assert "\n" not in str(err) and "\r" not in str(err), str(err)
        assert err.reason and err.reason != "out_of_memory", str(err)
        return []
    for item in items:
        if isinstance(item, Skip):
            assert item.reason and item.reason != "out_of_memory", item.message
            assert "\n" not in item.message and "\r" not in item.message, item.message
        else:
            check_record(item)
    return items


def check_record(record) -> None:
    assert isinstance(record, ChainRecord), type(record)
    length = len(record.seq)
    assert isinstance(record.name, str) and record.name and length >= 1
    assert record.coords.shape == (length, 4, 3) and record.coords.dtype == np.float32
    assert record.mask.shape == (length,) and record.mask.dtype == bool
    assert record.residue_index.shape == (length,) and np.issubdtype(record.residue_index.dtype, np.integer)
