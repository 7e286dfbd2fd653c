"""Reader for split files: `chain_set_splits.json` (or the `chain_set_split.json` spelling) with
`train` / `validation` / `test` lists of chain names (+ optional `cath_nodes`), and subset files
with only a `test` key (`test_split_L100.json`, `test_split_sc.json`) that become named evaluation
subsets ("L100", "sc": the file stem without its `test_split_` prefix).

Policy: split files are small and all-or-nothing, so every problem raises InputError: missing,
empty or invalid file; a value that is not a list of names; a chain named in two splits (the error
names the chain and both splits). A name repeated inside one split counts once. Keys other than
train / validation / test / cath_nodes are ignored with a warning and listed in `ignored_keys`,
so newer files with extra metadata still load.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

from invfold import storage
from invfold.components.protein.errors import InputError
from invfold.components.protein.limits import DEFAULT_LIMITS, ReadLimits

SPLIT_NAMES = ("train", "validation", "test")
SUBSET_PREFIX = "test_split_"


@dataclass
class SplitFile:
    """splits: the train/validation/test lists a file names (empty for a subset-only file);
    subsets: named evaluation subsets; cath_nodes: passed through as found."""

    splits: dict[str, list[str]] = field(default_factory=dict)
    subsets: dict[str, list[str]] = field(default_factory=dict)
    cath_nodes: object = None
    ignored_keys: tuple[str, ...] = ()


def subset_name(path: str | os.PathLike) -> str:
    stem = storage.strip_gz(storage.basename(path)).rsplit(".", 1)[0]
    return stem[len(SUBSET_PREFIX) :] if stem.startswith(SUBSET_PREFIX) and len(stem) > len(SUBSET_PREFIX) else stem


def read_split_file(path: str | os.PathLike, limits: ReadLimits = DEFAULT_LIMITS) -> SplitFile:
    content = storage.load_json(path, limits.max_file_bytes)
    if not isinstance(content, dict) or not set(content) & set(SPLIT_NAMES):
        got = f"keys {sorted(content)}" if isinstance(content, dict) else type(content).__name__
        raise InputError(
            path, None, None, "a JSON object with train / validation / test lists", got, reason="not_a_split_file"
        )
    lists = {}
    for key in SPLIT_NAMES:
        if key in content:
            names = content[key]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise InputError(path, None, key, "a list of chain names", _describe(names), reason="wrong_type")
            lists[key] = list(dict.fromkeys(names))
    ignored = tuple(sorted(k for k in content if k not in SPLIT_NAMES and k != "cath_nodes"))
    if ignored:
        warnings.warn(
            f"{path}: ignoring keys {list(ignored)} (known: {list(SPLIT_NAMES)} and cath_nodes)", stacklevel=2
        )
    if set(lists) == {"test"}:
        return SplitFile(
            subsets={subset_name(path): lists["test"]}, cath_nodes=content.get("cath_nodes"), ignored_keys=ignored
        )
    _check_disjoint(path, lists)
    splits = {key: lists.get(key, []) for key in SPLIT_NAMES}
    return SplitFile(splits=splits, cath_nodes=content.get("cath_nodes"), ignored_keys=ignored)


def _check_disjoint(path, lists: dict[str, list[str]]) -> None:
    owner: dict[str, str] = {}
    for split, names in lists.items():
        for name in names:
            if name in owner:
                raise InputError(
                    path,
                    f"chain '{name}'",
                    None,
                    "each chain in exactly one split",
                    f"it is in both '{owner[name]}' and '{split}'",
                    reason="overlapping_splits",
                    name=name,
                )
            owner[name] = split


def _describe(value) -> str:
    if isinstance(value, list):
        bad = next(v for v in value if not isinstance(v, str))
        return f"a list holding {type(bad).__name__} {bad!r}"[:80]
    return type(value).__name__
