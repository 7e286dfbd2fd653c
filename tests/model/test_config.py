import pytest

from invfold.components.model import InverseFoldingModel, ModelConfig


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"hidden": 0}, "hidden"),
        ({"k_neighbors": -1}, "k_neighbors"),
        ({"decoding": "beam"}, "decoding"),
        ({"dropout": 1.0}, "dropout"),
        ({"decoder_layers": -1}, "decoder_layers"),
        ({"decoding": "autoregressive", "decoder_layers": 0}, "decoder_layers"),
        ({"encoder_layers": True}, "encoder_layers"),
    ],
)
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        ModelConfig.preset("tiny", **overrides)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="proteinmpnn"):
        ModelConfig.preset("huge")


def test_from_dict_rejects_unknown_fields():
    data = ModelConfig.preset("tiny").to_dict() | {"hiden": 3}
    with pytest.raises(ValueError, match="hiden"):
        ModelConfig.from_dict(data)
    assert ModelConfig.from_dict(ModelConfig.preset("tiny").to_dict()) == ModelConfig.preset("tiny")


@pytest.mark.parametrize(
    "preset, decoding, low, high",
    [
        ("proteinmpnn", "autoregressive", 1.5e6, 1.75e6),  # ProteinMPNN's published ~1.7M
        ("default", "one_shot", 2.0e6, 3.0e6),
        ("tiny", "one_shot", 1e3, 1e5),
    ],
)
def test_preset_parameter_counts(preset, decoding, low, high):
    cfg = ModelConfig.preset(preset)
    assert cfg.decoding == decoding
    assert low <= InverseFoldingModel(cfg).num_parameters() <= high


def test_proteinmpnn_preset_matches_its_published_shape():
    cfg = ModelConfig.preset("proteinmpnn")
    assert (cfg.hidden, cfg.encoder_layers, cfg.decoder_layers, cfg.k_neighbors) == (128, 3, 3, 48)
