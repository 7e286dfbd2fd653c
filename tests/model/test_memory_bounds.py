"""A 1.7 KB model file declaring hidden=65536 had the loader build a network whose first weight is
17 GB before looking at the file's weights: a RuntimeError traceback, exit 1.
Now the config's fields are bounded (ModelLimits) and the file's tensors are checked against the
config's network on PyTorch's meta device before anything is allocated."""

from __future__ import annotations

import pytest
import torch

from invfold.components.model.config import MODEL_LIMITS, ModelConfig
from invfold.components.model.io import FORMAT, load_model, model_payload
from invfold.components.model.network import InverseFoldingModel
from invfold.errors import ConfigError, InputError
from tests.support.memory_bombs import TORCH_LIMIT, long_chain_jsonl, one_line_error, oversized_model_file, run_limited


def test_a_model_file_declaring_hidden_65536_is_a_one_line_error_under_4_gib(tmp_path):
    model = oversized_model_file(tmp_path / "bomb.pt")
    assert model.stat().st_size < 2500
    structure = long_chain_jsonl(tmp_path / "chain.jsonl", 50)
    result = run_limited(["design", str(model), str(structure), "--out", str(tmp_path / "d.fasta")], TORCH_LIMIT)
    line = one_line_error(result)
    assert "bomb.pt" in line and "ModelLimits.max_hidden" in line and "65536" in line


@pytest.mark.parametrize(
    "field, limit",
    [
        ("hidden", MODEL_LIMITS.max_hidden),
        ("encoder_layers", MODEL_LIMITS.max_layers),
        ("decoder_layers", MODEL_LIMITS.max_layers),
        ("k_neighbors", MODEL_LIMITS.max_k_neighbors),
        ("num_rbf", MODEL_LIMITS.max_num_rbf),
        ("max_relative_position", MODEL_LIMITS.max_relative_position),
        ("message_mlp_layers", MODEL_LIMITS.max_message_mlp_layers),
    ],
)
def test_each_size_field_is_bounded_and_the_bound_itself_is_allowed(field, limit):
    assert getattr(ModelConfig.preset("tiny", **{field: limit}), field) == limit
    with pytest.raises(ConfigError, match=rf"ModelConfig\.{field}: expected at most {limit}"):
        ModelConfig.preset("tiny", **{field: limit + 1})


def test_every_preset_is_within_the_bounds():
    for name in ("default", "proteinmpnn", "small", "tiny"):
        assert ModelConfig.preset(name).hidden <= MODEL_LIMITS.max_hidden


def test_a_config_within_bounds_that_the_file_holds_no_weights_for_is_refused_before_building(tmp_path):
    """hidden=2048 passes the bounds; the file's (empty) state dict does not match its network,
    which is judged on the meta device: nothing of the network's size is allocated."""
    config = ModelConfig.preset("tiny", hidden=MODEL_LIMITS.max_hidden).to_dict()
    path = tmp_path / "empty.pt"
    torch.save({"format": FORMAT, "config": config, "state_dict": {}}, str(path))
    with pytest.raises(InputError, match=r"empty\.pt: field 'state_dict': expected the tensors of the network"):
        load_model(path)


def test_a_weight_of_the_wrong_shape_is_named(tmp_path):
    payload = model_payload(InverseFoldingModel(ModelConfig.preset("tiny")))
    name = next(iter(payload["state_dict"]))
    payload["state_dict"][name] = torch.zeros(3, 3)
    path = tmp_path / "wrong.pt"
    torch.save(payload, str(path))
    with pytest.raises(InputError, match=rf"'{name}' of shape \(3, 3\)"):
        load_model(path)


def test_a_matching_file_still_loads(tmp_path):
    model = InverseFoldingModel(ModelConfig.preset("tiny"))
    path = tmp_path / "ok.pt"
    torch.save(model_payload(model), str(path))
    loaded = load_model(path)
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True)
    )
