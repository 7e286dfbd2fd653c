"""The Kabat numbering of 7CTH's heavy (I) and lambda light (M) chains as the antibody tests write
them (tests/design/test_residue_ids.py says how it was assigned): heavy 1-112 with 52A, 82A-C and
100A-K; light from Kabat 3 with the lambda skip at L10, 27A-C, 95A and 106A."""

from __future__ import annotations


def _numbers(first: int, last: int) -> list[str]:
    return [str(n) for n in range(first, last + 1)]


HEAVY = [*_numbers(1, 52), "52A", *_numbers(53, 82), "82A", "82B", "82C", *_numbers(83, 100)]
HEAVY += [f"100{c}" for c in "ABCDEFGHIJK"] + _numbers(101, 112)
LIGHT = [*_numbers(3, 9), *_numbers(11, 27), "27A", "27B", "27C", *_numbers(28, 95), "95A", *_numbers(96, 106)]
LIGHT += ["106A", "107"]
