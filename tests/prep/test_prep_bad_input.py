"""The bad-input corpus through prep, in default and strict mode: each case is a counted
drop with its reason or an InputError naming file, place and field; counts always reconcile."""

from __future__ import annotations

import warnings

import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.protein.errors import InputError
from tests.support.corpus import CASES


def _run(tmp_path, case, strict):
    source, split_file = case.build(tmp_path)
    cfg = PrepConfig(
        input=str(source),
        out=str(tmp_path / "out"),
        split_file=split_file and str(split_file),
        strict=strict,
        min_length=30,
        split_fractions=(0.5, 0.25, 0.25),
        identity_tool="kmer",
        **case.overrides,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_prep(cfg)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(tmp_path, case, strict):
    expected = case.strict if strict else case.default
    if expected.startswith("error:"):
        with pytest.raises(InputError) as info:
            _run(tmp_path, case, strict)
        assert info.value.reason == expected.removeprefix("error:")
        for text in case.message:
            assert text in str(info.value)
        assert not (tmp_path / "out" / "index.json").exists()
        return
    result = _run(tmp_path, case, strict)
    counts = result.counts
    assert counts["read"] == counts["kept"] + counts["skipped"]
    assert result.card["counts"] == counts
    if expected.startswith("absent:"):
        assert sum(result.card["split"]["absent_from_set"].values()) == int(expected.split(":")[1])
        assert result.card["split"]["absent_from_set"]["train"] == 2
    elif expected:
        assert result.card["dropped"] == {expected: case.dropped}
        assert expected in result.card["drop_examples"]
    else:
        assert result.card["dropped"] == {}
    assert counts["skipped"] == case.dropped
    assert sum(result.datasets[s] for s in ("train", "validation", "test")) == counts["kept"]
