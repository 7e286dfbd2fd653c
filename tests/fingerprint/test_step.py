"""The input fingerprint follows the bytes behind a path (so prep's cache misses changed data)."""

from __future__ import annotations

import pytest

from invfold.components.fingerprint.step import fingerprint
from invfold.errors import InputError


def test_fingerprint_changes_with_the_data_not_with_nothing(tmp_path):
    data = tmp_path / "set.jsonl"
    data.write_text('{"name": "a"}\n')
    folder = tmp_path / "pdbs"
    folder.mkdir()
    (folder / "1abc.pdb").write_text("END\n")
    first = fingerprint([str(data), str(folder), ""])
    assert first == fingerprint([str(data), str(folder), ""]) and first.startswith("sha256:")
    data.write_text('{"name": "b"}\n')
    assert fingerprint([str(data), str(folder), ""]) != first
    (folder / "2xyz.pdb").write_text("END\n")
    assert len({first, fingerprint([str(data), str(folder), ""])}) == 2


def test_a_missing_input_is_an_error(tmp_path):
    with pytest.raises(InputError, match="expected an existing file or folder"):
        fingerprint([str(tmp_path / "nope")])
