"""The inverse-folding model's typed configuration and its named presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from invfold.errors import ConfigError
from invfold.options import config_from_dict

DECODING_MODES = ("one_shot", "autoregressive")
FEATURIZATIONS = ("invfold", "proteinmpnn")
# ModelConfig.backbone -> the backbone atoms (protein.record.BACKBONE_ATOMS names) a residue
# needs to be structure input
BACKBONES = {"full": ("N", "CA", "C", "O"), "ca": ("CA",)}


@dataclass(frozen=True)
class ModelLimits:
    """The largest network a config may describe: a model file carries its config, and a 1.7 KB file
    declaring hidden=65536 would otherwise have the loader allocate 17 GB per weight matrix
    before its weights are looked at. Each bound is far above every preset and every
    published architecture (hidden 128, 10 layers, k 48, 16 RBFs, relative positions 32, 3-linear
    messages); the loader also checks the file's tensors against the config on PyTorch's meta
    device before anything is allocated (components/model/io.py)."""

    max_hidden: int = 2048
    max_layers: int = 64
    max_k_neighbors: int = 256
    max_num_rbf: int = 256
    max_relative_position: int = 1024
    max_message_mlp_layers: int = 16


MODEL_LIMITS = ModelLimits()
# ModelConfig field -> the ModelLimits field that bounds it
_BOUNDED = {
    "hidden": "max_hidden",
    "encoder_layers": "max_layers",
    "decoder_layers": "max_layers",
    "k_neighbors": "max_k_neighbors",
    "num_rbf": "max_num_rbf",
    "max_relative_position": "max_relative_position",
    "message_mlp_layers": "max_message_mlp_layers",
}


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the network; everything needed to rebuild it travels with a saved model.

    decoding: "one_shot" predicts all residues at once from structure alone;
        "autoregressive" decodes in a given random order, each residue seeing the letters of
        neighbours decoded earlier (ProteinMPNN-like).
    decoder_layers: autoregressive: masked message-passing decoder layers; one_shot: hidden
        layers of the per-residue read-out MLP (0 = a single linear layer).
    message_mlp_layers: linear layers in each message/edge-update MLP (ProteinMPNN uses 3).
    geometric_features: add backbone dihedrals (node) and local-frame directions and relative
        orientations (edge) to the RBF distances; ProteinMPNN starts from zero node features.
    edge_projection: a linear layer (with bias) on the normalized edge embedding before the
        encoder, as ProteinMPNN has (its `W_e`); needed to load its published weights.
    activation_checkpointing: recompute encoder/decoder layer activations in backward (training
        only) to trade compute for memory on long chains.
    featurization: how the structure becomes a graph (model/features.py).
        "invfold" (our models): only observed residues are neighbours, a C-N break starts a new
        segment (the "other chain" position bucket), a partly observed residue is left out.
        "proteinmpnn" (ProteinMPNN-compatible; what published weights import with): upstream's
        `tied_featurize` + `ProteinFeatures` exactly: unobserved residues of the record are k-NN
        candidates (at the row's farthest observed distance) and read by the decoder, a break
        stays inside its chain (sequence-position offsets), the observed atoms of a partly
        observed residue stay in the edge features, and the unknown letter X has its own
        embedding (input token 20). Logits match upstream's network on what its parser builds
        from the same file (tests/model/test_upstream_parity.py).
    backbone: the atoms the network reads. "full": N, CA, C, O (and the virtual CB); "ca": CA
        alone, as ProteinMPNN's CA-only weights (`CA_ProteinFeatures`: RBFs of the 9 distances
        between the previous, own and next CA of both residues, and the neighbour's direction and
        orientation in a frame from three consecutive CAs). A residue is structure input when
        its atoms of `input_atoms` are observed, so a CA-only file is input for a "ca" model.
        "ca" needs featurization "proteinmpnn" and no geometric_features (features.ca_edge_features).
    """

    hidden: int = 128
    encoder_layers: int = 3
    decoder_layers: int = 3
    k_neighbors: int = 48
    num_rbf: int = 16
    dropout: float = 0.1
    decoding: str = "autoregressive"
    max_relative_position: int = 32
    message_mlp_layers: int = 3
    geometric_features: bool = False
    edge_projection: bool = False
    activation_checkpointing: bool = False
    featurization: str = "invfold"
    backbone: str = "full"

    def __post_init__(self) -> None:
        positive = {
            "hidden": self.hidden,
            "encoder_layers": self.encoder_layers,
            "k_neighbors": self.k_neighbors,
            "num_rbf": self.num_rbf,
            "max_relative_position": self.max_relative_position,
            "message_mlp_layers": self.message_mlp_layers,
        }
        for name, value in positive.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"ModelConfig.{name}: expected a positive int, got {value!r}")
        if not isinstance(self.decoder_layers, int) or isinstance(self.decoder_layers, bool) or self.decoder_layers < 0:
            raise ConfigError(f"ModelConfig.decoder_layers: expected an int >= 0, got {self.decoder_layers!r}")
        for name, limit_name in _BOUNDED.items():
            limit = getattr(MODEL_LIMITS, limit_name)
            value = getattr(self, name)
            if value > limit:
                raise ConfigError(
                    f"ModelConfig.{name}: expected at most {limit} (ModelLimits.{limit_name}), got {value!r}"
                )
        if self.decoding not in DECODING_MODES:
            raise ConfigError(f"ModelConfig.decoding: expected one of {DECODING_MODES}, got {self.decoding!r}")
        if self.decoding == "autoregressive" and self.decoder_layers < 1:
            raise ConfigError("ModelConfig.decoder_layers: an autoregressive model needs >= 1 decoder layer")
        if self.featurization not in FEATURIZATIONS:
            raise ConfigError(
                f"ModelConfig.featurization: expected one of {FEATURIZATIONS}, got {self.featurization!r}"
            )
        if self.backbone not in BACKBONES:
            raise ConfigError(f"ModelConfig.backbone: expected one of {tuple(BACKBONES)}, got {self.backbone!r}")
        if self.backbone == "ca" and (self.featurization != "proteinmpnn" or self.geometric_features):
            raise ConfigError(
                "ModelConfig.backbone: 'ca' (ProteinMPNN's CA-only features) needs featurization='proteinmpnn' "
                f"and geometric_features=False, got featurization={self.featurization!r}, "
                f"geometric_features={self.geometric_features!r}"
            )
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ConfigError(f"ModelConfig.dropout: expected 0 <= dropout < 1, got {self.dropout!r}")

    @property
    def autoregressive(self) -> bool:
        return self.decoding == "autoregressive"

    @property
    def proteinmpnn_features(self) -> bool:
        return self.featurization == "proteinmpnn"

    @property
    def input_atoms(self) -> tuple[str, ...]:
        """The backbone atoms a residue needs for this network to read its structure."""
        return BACKBONES[self.backbone]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        return config_from_dict(cls, data, "model config")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named starting point ("default", "proteinmpnn", "proteinmpnn-ca", "small", "tiny") with
        fields overridden."""
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
        return config_from_dict(cls, {**dataclasses.asdict(PRESETS[name]), **overrides}, "model config")

    def preset_name(self, ignore: tuple[str, ...] = ()) -> str | None:
        """The preset whose architecture this is (fields in `ignore`, e.g. dropout, and the
        featurization not compared: published ProteinMPNN weights are the `proteinmpnn` preset read
        with upstream's featurization), or None for an architecture of its own."""
        ignore = (*ignore, "featurization")  # how inputs become a graph, not the network's shape
        mine = {k: v for k, v in dataclasses.asdict(self).items() if k not in ignore}
        for name, preset in PRESETS.items():
            if mine == {k: v for k, v in dataclasses.asdict(preset).items() if k not in ignore}:
                return name
        return None


# Exactly ProteinMPNN's network (published weights load: model/published.py): hidden 128,
# 3 + 3 layers, k = 48, random-order autoregressive decoder, the W_e edge projection.
_PROTEINMPNN = ModelConfig(
    hidden=128,
    encoder_layers=3,
    decoder_layers=3,
    k_neighbors=48,
    num_rbf=16,
    dropout=0.1,
    decoding="autoregressive",
    message_mlp_layers=3,
    geometric_features=False,
    edge_projection=True,
)

PRESETS: dict[str, ModelConfig] = {
    # A deeper ProteinMPNN-style encoder with extra geometric features, read out one-shot (not
    # PiFold: no attention, no virtual atoms): 10 layers over 30 neighbours with lighter
    # 2-linear messages (~2.7M parameters, about as fast per residue as "proteinmpnn").
    "default": ModelConfig(
        hidden=128,
        encoder_layers=10,
        decoder_layers=1,
        k_neighbors=30,
        num_rbf=16,
        dropout=0.1,
        decoding="one_shot",
        message_mlp_layers=2,
        geometric_features=True,
    ),
    "proteinmpnn": _PROTEINMPNN,
    # ProteinMPNN's CA-only network (its published ca_model_weights import as this): the same
    # layers over CA-only edge features, with upstream's featurization.
    "proteinmpnn-ca": dataclasses.replace(_PROTEINMPNN, featurization="proteinmpnn", backbone="ca"),
    # The default architecture shrunk (0.29M parameters) so a few CPU minutes on a few hundred
    # chains train well past the constant predictor: `invfold run`'s model and the quality gate's.
    "small": ModelConfig(
        hidden=64,
        encoder_layers=4,
        decoder_layers=1,
        k_neighbors=16,
        num_rbf=16,
        dropout=0.1,
        decoding="one_shot",
        message_mlp_layers=2,
        geometric_features=True,
    ),
    "tiny": ModelConfig(
        hidden=32,
        encoder_layers=1,
        decoder_layers=1,
        k_neighbors=8,
        num_rbf=8,
        dropout=0.0,
        decoding="one_shot",
        max_relative_position=8,
        message_mlp_layers=2,
        geometric_features=True,
    ),
}
