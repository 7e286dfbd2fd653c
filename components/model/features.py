"""Backbone featurization as pure tensor ops (exportable with a dynamic length).

Everything here works on [B, L, ...] tensors with a neighbour list E_idx [B, L, K]; no dense
[B, L, L] tensor is built except the one CA distance matrix the k-nearest-neighbour search needs.

residue_index carries three things (protein.record, protein.batch): the position in the record's
sequence, +1 after each C-N break inside a chain, a jump of CHAIN_OFFSET (100) between chains
and of PADDING_OFFSET (1000) where padding starts. Two featurizations read it
(ModelConfig.featurization):

- "invfold" (our own models): a new segment at every jump > 1, a chain break included;
  unobserved residues are never neighbours (segment_ids, knn_graph, relative_position_buckets).
- "proteinmpnn" (ProteinMPNN's published weights; its `tied_featurize` + `ProteinFeatures`):
  chains only at chain jumps, a break stays inside its chain with sequence-position offsets,
  and unobserved residues of the record are k-NN candidates as upstream makes them
  (chain_ids, knn_graph_proteinmpnn, relative_position_buckets_by_chain).

ProteinMPNN's CA-only weights (ModelConfig.backbone "ca") read the CA alone: ca_edge_features
(upstream `CA_ProteinFeatures`) over the "proteinmpnn" neighbour rule.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from invfold.components.protein.record import CHAIN_OFFSET, PADDING_OFFSET

# ProteinMPNN's ideal virtual C-beta from N, CA, C.
CB_A, CB_B, CB_C = -0.58273431, 0.56802827, -0.54067466
RBF_MIN, RBF_MAX = 2.0, 22.0
# Distance given to masked pairs so they sort after every real neighbour (finite: no inf*0).
FAR = 1.0e6


def virtual_cb(X: torch.Tensor) -> torch.Tensor:
    n, ca, c = X[..., 0, :], X[..., 1, :], X[..., 2, :]
    b = ca - n
    cc = c - ca
    return CB_A * torch.cross(b, cc, dim=-1) + CB_B * b + CB_C * cc + ca


def backbone_atoms(X: torch.Tensor) -> torch.Tensor:
    """[B, L, 5, 3]: N, CA, C, O and the virtual CB."""
    return torch.cat([X, virtual_cb(X).unsqueeze(-2)], dim=-2)


def gather_nodes(x: torch.Tensor, E_idx: torch.Tensor) -> torch.Tensor:
    """x [B, L, C] at neighbours E_idx [B, N, K] -> [B, N, K, C].

    One row lookup (index_select, ONNX Gather) into x flattened to [B * L, C]: much faster than
    torch.gather with an index expanded over C, in eager and in onnxruntime alike.
    """
    b, n, k = E_idx.shape
    length, channels = x.shape[1], x.shape[2]
    offsets = torch.arange(b, device=E_idx.device).reshape(b, 1, 1) * length
    rows = (E_idx + offsets).reshape(b * n * k)
    return x.reshape(b * length, channels).index_select(0, rows).reshape(b, n, k, channels)


def segment_ids(residue_index: torch.Tensor) -> torch.Tensor:
    """[B, L] int: increases by one after every chain break (numbering jump > 1)."""
    breaks = torch.abs(residue_index[:, 1:] - residue_index[:, :-1]) > 1
    zero = torch.zeros_like(residue_index[:, :1])
    return torch.cat([zero, torch.cumsum(breaks.to(residue_index.dtype), dim=1)], dim=1)


def chain_ids(residue_index: torch.Tensor) -> torch.Tensor:
    """[B, L] int: increases by one at every chain start (a numbering jump >= CHAIN_OFFSET) and
    where padding starts; a chain break inside a chain (jump 2) does not start a chain."""
    jumps = torch.abs(residue_index[:, 1:] - residue_index[:, :-1]) >= CHAIN_OFFSET
    zero = torch.zeros_like(residue_index[:, :1])
    return torch.cat([zero, torch.cumsum(jumps.to(residue_index.dtype), dim=1)], dim=1)


def record_mask(residue_index: torch.Tensor) -> torch.Tensor:
    """[B, L] bool: True for the record's residues (observed or not), False for padding (which
    starts with a numbering jump >= PADDING_OFFSET, protein.batch.collate)."""
    starts = (residue_index[:, 1:] - residue_index[:, :-1]) >= PADDING_OFFSET
    zero = torch.zeros_like(residue_index[:, :1])
    return torch.cat([zero, torch.cumsum(starts.to(residue_index.dtype), dim=1)], dim=1) == 0


def knn_graph(CA: torch.Tensor, mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k nearest observed residues by CA distance, self included.

    Returns E_idx [B, L, k] (long) and nb_mask [B, L, k] (float, 1 = a real observed neighbour).
    Chains shorter than k get extra masked entries: k far-away dummy columns are appended before
    the top-k, so no Python branch on the length is needed.
    """
    b, length = mask.shape
    diff = CA.unsqueeze(2) - CA.unsqueeze(1)
    D = torch.sqrt((diff * diff).sum(-1) + 1e-6)
    pair = (mask.unsqueeze(2) * mask.unsqueeze(1)) > 0
    D = torch.where(pair, D, torch.full_like(D, FAR))
    D = torch.cat([D, torch.full_like(D[:, :, :1], 2 * FAR).expand(b, length, k)], dim=2)
    _, E_idx = torch.topk(D, k, dim=-1, largest=False, sorted=False)
    real = E_idx < length
    E_idx = torch.where(real, E_idx, torch.zeros_like(E_idx))
    nb_mask = gather_nodes(mask.unsqueeze(-1), E_idx).squeeze(-1) * real.to(mask.dtype)
    nb_mask = nb_mask * mask.unsqueeze(-1)
    return E_idx, nb_mask


def knn_graph_proteinmpnn(
    CA: torch.Tensor, mask: torch.Tensor, residue_index: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ProteinMPNN's neighbour rule (upstream `ProteinFeatures._dist`), for its published weights.

    Every residue of the record is a candidate: an unobserved one (mask 0) gets the distance
    of the row's farthest observed residue, so it fills the list when fewer than k residues are
    observed; the list has min(k, L) entries, sorted by that distance. Computed with upstream's
    own operations in its order, so the same inputs select the same neighbours, ties included.
    Padding (not in the record) is never a candidate before a residue of the record.

    Returns E_idx [B, L, K], encoder_mask [B, L, K] (both ends observed: upstream's encoder
    mask), decoder_mask [B, L, K] (i observed, j in the record: upstream's decoder reads every
    neighbour of an observed residue, an unobserved one through its edge and letter) and
    ca_distance [B, L, K] (the CA-CA distance upstream RBF-encodes: the adjusted one above).
    """
    b, length = mask.shape
    in_record = record_mask(residue_index)
    mask_2D = torch.unsqueeze(mask, 1) * torch.unsqueeze(mask, 2)
    dX = torch.unsqueeze(CA, 1) - torch.unsqueeze(CA, 2)
    D = mask_2D * torch.sqrt(torch.sum(dX**2, 3) + 1e-6)
    D_max, _ = torch.max(D, -1, keepdim=True)
    D_adjust = D + (1.0 - mask_2D) * D_max
    D_adjust = torch.where(in_record.unsqueeze(1), D_adjust, torch.full_like(D_adjust, FAR))
    if torch.compiler.is_exporting():
        # a static k for the graph: k far-away dummy columns (masked below), as knn_graph does;
        # onnxruntime's TopK breaks exact ties by the lower index
        D_adjust = torch.cat([D_adjust, torch.full_like(D_adjust[:, :, :1], 2 * FAR).expand(b, length, k)], dim=2)
        D_neighbors, E_idx = torch.topk(D_adjust, k, dim=-1, largest=False)
    else:
        D_neighbors, E_idx = torch.topk(D_adjust, min(k, length), dim=-1, largest=False)
    real = E_idx < length
    E_idx = torch.where(real, E_idx, torch.zeros_like(E_idx))
    real = real.to(mask.dtype)
    encoder_mask = mask.unsqueeze(-1) * gather_nodes(mask.unsqueeze(-1), E_idx).squeeze(-1) * real
    decoder_mask = mask.unsqueeze(-1) * gather_nodes(in_record.to(mask.dtype).unsqueeze(-1), E_idx).squeeze(-1) * real
    return E_idx, encoder_mask, decoder_mask, D_neighbors


def rbf_features(
    atoms: torch.Tensor, E_idx: torch.Tensor, num_rbf: int, ca_distance: torch.Tensor | None = None
) -> torch.Tensor:
    """RBF-encoded distances of all n x n atom pairs (i atom a, neighbour atom b) at once.

    atoms [B, L, n, 3] (n = 5: backbone_atoms; n = 3: ca_atoms) -> [B, L, K, n * n * num_rbf],
    atom-major. ca_distance [B, L, K]: the CA-CA distance (atom 1 with atom 1 in both layouts) to
    encode instead of the one from the coordinates (ProteinMPNN encodes its k-NN distance).
    """
    b, length, n = atoms.shape[:3]
    nb = gather_nodes(atoms.reshape(b, length, n * 3), E_idx)
    nb = nb.reshape(b, length, E_idx.shape[2], 1, n, 3)
    diff = atoms.reshape(b, length, 1, n, 1, 3) - nb
    d = torch.sqrt((diff * diff).sum(-1) + 1e-6)  # [B, L, K, n, n]
    if ca_distance is not None:
        ca = torch.arange(n, device=d.device) == 1
        d = torch.where(ca[:, None] & ca[None, :], ca_distance[..., None, None], d)
    sigma = (RBF_MAX - RBF_MIN) / num_rbf
    mu = torch.linspace(RBF_MIN / sigma, RBF_MAX / sigma, num_rbf, device=atoms.device, dtype=atoms.dtype)
    z = d.unsqueeze(-1) * (1.0 / sigma) - mu  # (d - mu) / sigma with mu pre-scaled
    # capping z^2 keeps exp() out of denormal floats (~8x slower on CPU); exp(-60) ~ 1e-26
    return torch.exp(-(z * z).clamp(max=60.0)).reshape(b, length, E_idx.shape[2], n * n * num_rbf)


# ProteinMPNN's CA-only model (upstream `CA_ProteinFeatures`): consecutive CAs closer than 3.6 A or
# farther than 4.0 A are not bonded (a chain break, a missing residue, another chain, padding)
CA_BONDED = (3.6, 4.0)
NUM_CA_ORIENTATION = 7  # direction to the neighbour (3) and relative rotation as a quaternion (4)


def ca_atoms(CA: torch.Tensor) -> torch.Tensor:
    """[B, L, 3, 3]: each residue's previous CA, own CA and next CA along the row (zeros past
    its ends: upstream's Ca_0, Ca_1, Ca_2, which do not look at chains or gaps)."""
    zero = torch.zeros_like(CA[:, :1])
    previous = torch.cat([zero, CA[:, :-1]], dim=1)
    following = torch.cat([CA[:, 1:], zero], dim=1)
    return torch.stack([previous, CA, following], dim=2)


def quaternions(R: torch.Tensor) -> torch.Tensor:
    """Rotations [..., 3, 3] -> unit quaternions [..., 4] (x, y, z, w), upstream's
    `_quaternions` formula as it is (a zero matrix gives (0, 0, 0, 1))."""
    diag = torch.diagonal(R, dim1=-2, dim2=-1)
    Rxx, Ryy, Rzz = diag.unbind(-1)
    magnitudes = 0.5 * torch.sqrt(torch.abs(1 + torch.stack([Rxx - Ryy - Rzz, -Rxx + Ryy - Rzz, -Rxx - Ryy + Rzz], -1)))
    signs = torch.sign(
        torch.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1)
    )
    w = torch.sqrt(F.relu(1 + diag.sum(-1, keepdim=True))) / 2.0
    return F.normalize(torch.cat((signs * magnitudes, w), -1), dim=-1)


def ca_orientation_features(CA: torch.Tensor, E_idx: torch.Tensor, residue_index: torch.Tensor) -> torch.Tensor:
    """upstream `CA_ProteinFeatures._orientations_coarse`: per edge the unit direction to the
    neighbour's CA in residue i's frame (3) and the frames' relative rotation as a quaternion (4)
    -> [B, L, K, 7]. Residue i's frame comes from the bond vectors CA(i-1)->CA(i) and
    CA(i)->CA(i+1) (a vector not 3.6-4.0 A long counts as zero); residues without CA(i-1) or
    CA(i+2) in the record have a zero frame, as upstream's (its frames need three bonds). Bounding
    that by the record, not the padded row, gives every record of a padded batch its own features
    (upstream's batch of one)."""
    b, length = CA.shape[:2]
    dX = CA[:, 1:] - CA[:, :-1]
    norm = torch.norm(dX, dim=-1)
    bonded = (norm > CA_BONDED[0]) & (norm < CA_BONDED[1])
    U = F.normalize(dX * bonded[..., None], dim=-1)  # [B, L - 1, 3]
    zero = torch.zeros_like(U[:, :1])
    u_in, u_out = torch.cat([zero, U], dim=1), torch.cat([U, zero], dim=1)  # into and out of residue i
    normal = F.normalize(torch.cross(u_in, u_out, dim=-1), dim=-1)
    o_1 = F.normalize(u_in - u_out, dim=-1)
    frame = torch.stack((o_1, normal, torch.cross(o_1, normal, dim=-1)), 2)  # [B, L, 3, 3], rows
    in_record = record_mask(residue_index)
    two_on = torch.cat([in_record[:, 2:], torch.zeros_like(in_record[:, :2])], dim=1)[:, :length]
    has_frame = two_on & (torch.arange(length, device=CA.device) >= 1)
    frame = frame * has_frame.to(frame.dtype)[..., None, None]
    frame_nb = gather_nodes(frame.reshape(b, length, 9), E_idx).reshape(b, length, E_idx.shape[2], 3, 3)
    CA_nb = gather_nodes(CA, E_idx)
    dU = torch.matmul(frame.unsqueeze(2), (CA_nb - CA.unsqueeze(-2)).unsqueeze(-1)).squeeze(-1)
    dU = F.normalize(dU, dim=-1)
    R = torch.matmul(frame.unsqueeze(2).transpose(-1, -2), frame_nb)
    return torch.cat((dU, quaternions(R)), dim=-1)


def ca_edge_features(
    CA: torch.Tensor, E_idx: torch.Tensor, num_rbf: int, ca_distance: torch.Tensor, residue_index: torch.Tensor
) -> torch.Tensor:
    """ProteinMPNN's CA-only edge input without its positional part: RBFs of the 9 distances
    between (previous, own, next CA) of i and of its neighbour (ca_atoms; the CA-CA one is the
    k-NN distance ca_distance), then ca_orientation_features -> [B, L, K, 9 * num_rbf + 7]."""
    rbf = rbf_features(ca_atoms(CA), E_idx, num_rbf, ca_distance)
    return torch.cat([rbf, ca_orientation_features(CA, E_idx, residue_index)], dim=-1)


def relative_position_buckets(residue_index: torch.Tensor, E_idx: torch.Tensor, max_relative: int) -> torch.Tensor:
    """[B, L, K] long in [0, 2 * max_relative + 1]: clipped offset, or the last bucket across a
    chain break (pairs in different segments)."""
    seg = segment_ids(residue_index)
    ridx_nb = gather_nodes(residue_index.unsqueeze(-1), E_idx).squeeze(-1)
    seg_nb = gather_nodes(seg.unsqueeze(-1), E_idx).squeeze(-1)
    offset = torch.clamp(ridx_nb - residue_index.unsqueeze(-1), -max_relative, max_relative)
    bucket = offset + max_relative
    return torch.where(seg_nb == seg.unsqueeze(-1), bucket, torch.full_like(bucket, 2 * max_relative + 1))


def relative_position_buckets_by_chain(
    residue_index: torch.Tensor, E_idx: torch.Tensor, max_relative: int
) -> torch.Tensor:
    """ProteinMPNN's relative position (upstream `tied_featurize` + `PositionalEncodings`):
    [B, L, K] long, the neighbour's sequence-position offset clipped to +-max_relative within
    the same chain (chain_ids: a chain break stays inside its chain), the last bucket across
    chains. Positions are indices into the record (upstream numbers residues consecutively,
    numbering gaps filled), not residue_index."""
    b, length = residue_index.shape
    chain = chain_ids(residue_index)
    position = torch.arange(length, device=residue_index.device, dtype=residue_index.dtype).expand(b, length)
    pos_nb = gather_nodes(position.unsqueeze(-1), E_idx).squeeze(-1)
    chain_nb = gather_nodes(chain.unsqueeze(-1), E_idx).squeeze(-1)
    bucket = torch.clamp(pos_nb - position.unsqueeze(-1), -max_relative, max_relative) + max_relative
    return torch.where(chain_nb == chain.unsqueeze(-1), bucket, torch.full_like(bucket, 2 * max_relative + 1))


def local_frames(X: torch.Tensor) -> torch.Tensor:
    """[B, L, 3, 3] orthonormal frames (columns e1, e2, e3) from N, CA, C."""
    n, ca, c = X[..., 0, :], X[..., 1, :], X[..., 2, :]
    e1 = F.normalize(c - ca, dim=-1)
    u2 = n - ca
    e2 = F.normalize(u2 - (u2 * e1).sum(-1, keepdim=True) * e1, dim=-1)
    e3 = torch.cross(e1, e2, dim=-1)
    return torch.stack([e1, e2, e3], dim=-1)


def orientation_features(X: torch.Tensor, atoms: torch.Tensor, E_idx: torch.Tensor) -> torch.Tensor:
    """Per edge: unit directions from CA_i to the neighbour's 5 atoms in i's frame (15) and the
    relative rotation R_i^T R_j (9) -> [B, L, K, 24]."""
    b, length, k = E_idx.shape
    R = local_frames(X)
    nb_atoms = gather_nodes(atoms.reshape(b, length, 15), E_idx).reshape(b, length, k * 5, 3)
    v = F.normalize(nb_atoms - X[:, :, 1:2, :], dim=-1)
    directions = torch.matmul(v, R).reshape(b, length, k, 15)
    R_nb = gather_nodes(R.reshape(b, length, 9), E_idx).reshape(b, length, k, 3, 3)
    rel = torch.matmul(R.transpose(-1, -2).unsqueeze(2), R_nb).reshape(b, length, k, 9)
    return torch.cat([directions, rel], dim=-1)


def dihedral_features(X: torch.Tensor, mask: torch.Tensor, residue_index: torch.Tensor) -> torch.Tensor:
    """cos/sin of phi, psi, omega -> [B, L, 6]; zero where a dihedral would cross a chain break
    or touch an unobserved residue (so masked coordinates never leak into their neighbours)."""
    b, length = mask.shape
    # N0 CA0 C0 N1 ... with one zero atom before and two after: dihedral s then spans original
    # atoms s-1..s+2, so residue i holds phi_i, psi_i, omega_i at s = 3i, 3i+1, 3i+2 (terminal
    # values touch the zero atoms and are masked below). Padding instead of shifting keeps every
    # slice non-empty at L = 1, which onnxruntime's slice fusion needs.
    atoms = X[:, :, :3, :].reshape(b, 3 * length, 3)
    chain = torch.cat([torch.zeros_like(atoms[:, :1]), atoms, torch.zeros_like(atoms[:, :2])], dim=1)
    U = F.normalize(chain[:, 1:] - chain[:, :-1], dim=-1)
    u2, u1, u0 = U[:, :-2], U[:, 1:-1], U[:, 2:]
    n2 = F.normalize(torch.cross(u2, u1, dim=-1), dim=-1)
    n1 = F.normalize(torch.cross(u1, u0, dim=-1), dim=-1)
    cos = (n2 * n1).sum(-1).reshape(b, length, 3)
    sin = (torch.cross(n2, n1, dim=-1) * u1).sum(-1).reshape(b, length, 3)
    seg = segment_ids(residue_index)
    zero = torch.zeros_like(mask[:, :1])
    same_prev = torch.cat([zero, (seg[:, 1:] == seg[:, :-1]).to(mask.dtype)], dim=1)
    prev_ok = mask * torch.cat([zero, mask[:, :-1]], dim=1) * same_prev
    next_ok = mask * torch.cat([mask[:, 1:], zero], dim=1) * torch.cat([same_prev[:, 1:], zero], dim=1)
    valid = torch.stack([prev_ok, next_ok, next_ok], dim=-1)
    return torch.cat([cos * valid, sin * valid], dim=-1)
