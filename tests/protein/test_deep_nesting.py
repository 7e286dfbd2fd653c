"""Deeply nested JSON: orjson refuses depth > 1024 and the standard parser then recursed into a
RecursionError that escaped the skip handling, so one bad line aborted prep with a traceback. In
chain sets it is a counted `invalid_json` skip; in split and TS50 files an `invalid_json`
InputError naming the file. Prep on such a set finishes and counts it."""

from __future__ import annotations

import json

import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.splits import read_split_file
from invfold.components.protein.ts50 import read_ts50
from tests.support.builders import chain_dict, jsonl_line
from tests.support.corpus import good_entries

DEPTH = 200_000  # far past both parsers' limits, 400 KB


def _deep(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("nested", [_deep(), '{"name": ' + _deep() + "}", '{"a":' * DEPTH + "1" + "}" * DEPTH])
def test_a_deeply_nested_chain_set_line_is_a_counted_invalid_json_skip(tmp_path, nested):
    path = tmp_path / "set.jsonl"
    path.write_text(jsonl_line(chain_dict("good.A", "ACD")) + "\n" + nested + "\n")
    out = list(read_chain_set(path))
    assert isinstance(out[0], ChainRecord)
    assert isinstance(out[1], Skip) and out[1].reason == "invalid_json"
    with pytest.raises(InputError, match=r"set\.jsonl:2: .*nested deeper than the parser's limit"):
        list(read_chain_set(path, strict=True))


@pytest.mark.parametrize(
    "reader, text",
    [
        (read_split_file, '{"train": ' + _deep() + "}"),
        (lambda p: list(read_ts50(p)), "[" + _deep() + "]"),
    ],
    ids=["split-file", "ts50"],
)
def test_a_deeply_nested_split_or_ts50_file_is_an_invalid_json_input_error(tmp_path, reader, text):
    path = tmp_path / "file.json"
    path.write_text(text)
    with pytest.raises(InputError, match=r"file\.json: expected valid JSON, got invalid JSON \(nested") as err:
        reader(path)
    assert err.value.reason == "invalid_json"


def test_prep_counts_the_nested_line_and_keeps_the_rest(tmp_path):
    lines = [json.dumps(e) for e in good_entries(12, seed=4)] + [_deep()]
    (tmp_path / "set.jsonl").write_text("\n".join(lines) + "\n")
    result = run_prep(PrepConfig(input=str(tmp_path / "set.jsonl"), out=str(tmp_path / "out")))
    assert result.counts["read"] == 13 and result.card["dropped"].get("invalid_json") == 1
