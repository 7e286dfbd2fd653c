"""A model file is loaded with weights_only=True: one whose pickle calls a function (here
Path.touch on a marker) is refused as not a model, and the function never runs."""

from __future__ import annotations

import pathlib

import pytest
import torch

from invfold.components.model.io import load_model
from invfold.errors import InputError


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_a_planted_model_file_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"config": _Planted(marker), "state_dict": {}}, tmp_path / "model.pt")
    with pytest.raises(InputError, match=r"model\.pt: expected an invfold model file, got unreadable"):
        load_model(tmp_path / "model.pt")
    assert not marker.exists()
