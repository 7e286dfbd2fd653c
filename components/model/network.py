"""The structure-conditioned sequence model (ProteinMPNN family).

forward() is pure tensor code with no Python branch on data, so torch.onnx.export(dynamo=True)
traces it with a dynamic batch and length. Speed comes from working on the neighbour list
([B, L, K] gathers, never dense [B, L, L] features past the k-NN search), from RBF-encoding all
25 atom pairs in one broadcast, and from splitting each message MLP's first linear layer by input
(node i, edge, neighbour j): the node parts are projected once per residue and then gathered,
instead of once per edge.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from invfold.components.model import features as ft
from invfold.components.model.config import ModelConfig
from invfold.components.model.sampling import Groups, letter_bias, listed_members, pick_group_letters, tied_order
from invfold.components.protein.alphabet import NUM_AA

MESSAGE_SCALE = 30.0  # ProteinMPNN divides summed neighbour messages by 30
NUM_GEOMETRIC_EDGE = 24
NUM_DIHEDRAL = 6


def _mlp_tail(hidden: int, linear_layers: int) -> nn.Sequential:
    """The message MLP after its (input-split) first linear layer."""
    parts: list[nn.Module] = []
    for _ in range(linear_layers - 1):
        parts += [nn.GELU(), nn.Linear(hidden, hidden)]
    return nn.Sequential(*parts)


def _ffn(hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))


class EncoderLayer(nn.Module):
    """Node update from neighbour messages, feed-forward, then (optionally) an edge update."""

    def __init__(self, cfg: ModelConfig, update_edges: bool):
        super().__init__()
        h = cfg.hidden
        self.update_edges = update_edges
        self.msg_edge = nn.Linear(h, h, bias=False)
        self.msg_self = nn.Linear(h, h)
        self.msg_nb = nn.Linear(h, h, bias=False)
        self.msg_tail = _mlp_tail(h, cfg.message_mlp_layers)
        self.norm_msg = nn.LayerNorm(h)
        self.ffn = _ffn(h)
        self.norm_ffn = nn.LayerNorm(h)
        if update_edges:
            self.upd_edge = nn.Linear(h, h, bias=False)
            self.upd_self = nn.Linear(h, h)
            self.upd_nb = nn.Linear(h, h, bias=False)
            self.upd_tail = _mlp_tail(h, cfg.message_mlp_layers)
            self.norm_edge = nn.LayerNorm(h)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, h_V, h_E, E_idx, nb_mask, mask):
        pre = self.msg_edge(h_E) + ft.gather_nodes(self.msg_nb(h_V), E_idx) + self.msg_self(h_V).unsqueeze(2)
        message = self.msg_tail(pre) * nb_mask.unsqueeze(-1)
        h_V = self.norm_msg(h_V + self.dropout(message.sum(2) / MESSAGE_SCALE))
        h_V = self.norm_ffn(h_V + self.dropout(self.ffn(h_V))) * mask.unsqueeze(-1)
        if self.update_edges:
            pre = self.upd_edge(h_E) + ft.gather_nodes(self.upd_nb(h_V), E_idx) + self.upd_self(h_V).unsqueeze(2)
            h_E = self.norm_edge(h_E + self.dropout(self.upd_tail(pre)))
        return h_V, h_E


class DecoderLayer(nn.Module):
    """ProteinMPNN's masked decoder layer.

    Inputs are pre-projected so the same code serves the full forward (all rows) and one-row
    steps of incremental sampling: e_proj = msg_edge(h_E) rows, nb_proj = the neighbour part
    (decoded neighbours: msg_nb(h_dec) + msg_seq(h_S); others: msg_nb(h_enc)).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h = cfg.hidden
        self.msg_self = nn.Linear(h, h)
        self.msg_edge = nn.Linear(h, h, bias=False)
        self.msg_nb = nn.Linear(h, h, bias=False)
        self.msg_seq = nn.Linear(h, h, bias=False)
        self.msg_tail = _mlp_tail(h, cfg.message_mlp_layers)
        self.norm_msg = nn.LayerNorm(h)
        self.ffn = _ffn(h)
        self.norm_ffn = nn.LayerNorm(h)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, h_V, e_proj, nb_proj, nb_mask, mask):
        pre = self.msg_self(h_V).unsqueeze(2) + e_proj + nb_proj
        message = self.msg_tail(pre) * nb_mask.unsqueeze(-1)
        h_V = self.norm_msg(h_V + self.dropout(message.sum(2) / MESSAGE_SCALE))
        return self.norm_ffn(h_V + self.dropout(self.ffn(h_V))) * mask.unsqueeze(-1)


class InverseFoldingModel(nn.Module):
    """forward(X [B,L,4,3], S [B,L] long, mask [B,L] float, residue_index [B,L] long,
    decoding_order [B,L] float | None) -> logits [B, L, 20] over ALPHABET.

    S: letters as indices into ALPHABET, UNKNOWN_INDEX (20) for X (Batch.tokens).

    decoding_order: residue j is visible to residue i's decoder iff order[j] < order[i]
    (so argsort ascending is the decoding order). One-shot models ignore S and decoding_order;
    an autoregressive model given None draws a random order (training convenience).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        if cfg.backbone == "ca":
            edge_in = 9 * cfg.num_rbf + ft.NUM_CA_ORIENTATION
        else:
            edge_in = 25 * cfg.num_rbf + (NUM_GEOMETRIC_EDGE if cfg.geometric_features else 0)
        self.edge_embed = nn.Linear(edge_in, h, bias=False)
        self.position_embed = nn.Embedding(2 * cfg.max_relative_position + 2, h)
        self.norm_edges = nn.LayerNorm(h)
        if cfg.edge_projection:
            self.edge_projection = nn.Linear(h, h)
        if cfg.geometric_features:
            self.node_embed = nn.Linear(NUM_DIHEDRAL, h)
            self.norm_nodes = nn.LayerNorm(h)
        n_enc = cfg.encoder_layers
        # a one-shot read-out never uses the last layer's edges: skip that update
        self.encoder = nn.ModuleList(
            EncoderLayer(cfg, update_edges=cfg.autoregressive or i < n_enc - 1) for i in range(n_enc)
        )
        if cfg.autoregressive:
            # ProteinMPNN's W_s has a 21st row, for X: kept with its featurization
            self.seq_embed = nn.Embedding(NUM_AA + 1 if cfg.proteinmpnn_features else NUM_AA, h)
            self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
            self.readout = nn.Linear(h, NUM_AA)
        else:
            layers: list[nn.Module] = []
            for _ in range(cfg.decoder_layers):
                layers += [nn.Linear(h, h), nn.GELU(), nn.Dropout(cfg.dropout)]
            self.readout = nn.Sequential(*layers, nn.Linear(h, NUM_AA))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _run(self, layer: nn.Module, *args):
        if self.cfg.activation_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)

    def encode(self, X, mask, residue_index):
        """Structure only -> (h_V [B,L,H], h_E [B,L,K,H], E_idx [B,L,K], nb_mask [B,L,K]);
        nb_mask: the neighbours the decoder reads (ModelConfig.featurization)."""
        mask = mask.to(X.dtype)
        if self.cfg.proteinmpnn_features:
            # upstream keeps the observed atoms of a partly observed residue (tied_featurize: NaN -> 0)
            E_idx, enc_mask, nb_mask, ca_distance = ft.knn_graph_proteinmpnn(
                X[:, :, 1], mask, residue_index, self.cfg.k_neighbors
            )
            if self.cfg.backbone == "ca":  # CA_ProteinFeatures: X[:, :, 1] alone is read
                edge = ft.ca_edge_features(X[:, :, 1], E_idx, self.cfg.num_rbf, ca_distance, residue_index)
            else:
                atoms = ft.backbone_atoms(X)
                edge = ft.rbf_features(atoms, E_idx, self.cfg.num_rbf, ca_distance)
            buckets = ft.relative_position_buckets_by_chain(residue_index, E_idx, self.cfg.max_relative_position)
        else:
            X = X * mask[:, :, None, None]
            atoms = ft.backbone_atoms(X)
            E_idx, nb_mask = ft.knn_graph(X[:, :, 1], mask, self.cfg.k_neighbors)
            enc_mask = nb_mask
            edge = ft.rbf_features(atoms, E_idx, self.cfg.num_rbf)
            buckets = ft.relative_position_buckets(residue_index, E_idx, self.cfg.max_relative_position)
        if self.cfg.geometric_features:
            edge = torch.cat([edge, ft.orientation_features(X, atoms, E_idx)], dim=-1)
        h_E = self.norm_edges(self.edge_embed(edge) + self.position_embed(buckets))
        if self.cfg.edge_projection:
            h_E = self.edge_projection(h_E)
        if self.cfg.geometric_features:
            dihedrals = ft.dihedral_features(X * mask[:, :, None, None], mask, residue_index)
            h_V = self.norm_nodes(self.node_embed(dihedrals)) * mask.unsqueeze(-1)
        else:
            h_V = X.new_zeros(X.shape[0], X.shape[1], self.cfg.hidden)
        for layer in self.encoder:
            h_V, h_E = self._run(layer, h_V, h_E, E_idx, enc_mask, mask)
        return h_V, h_E, E_idx, nb_mask

    def tokens(self, S: torch.Tensor) -> torch.Tensor:
        """S as embedding rows: X (UNKNOWN_INDEX) keeps its own row where the model has one
        (ProteinMPNN's W_s), otherwise it reads as A (0), as S = 0 marked unknown letters before."""
        if self.seq_embed.num_embeddings > NUM_AA:
            return S
        return torch.where(S < NUM_AA, S, torch.zeros_like(S))

    def forward(self, X, S, mask, residue_index, decoding_order=None):
        mask = mask.to(X.dtype)
        return self.decode(self.encode(X, mask, residue_index), S, mask, decoding_order)

    def decode(self, encoded, S, mask, decoding_order=None):
        """Logits from encode()'s output: forward() without the encoder, so one encoding serves
        teacher-forced scoring and sampling (evaluate)."""
        h_V, h_E, E_idx, nb_mask = encoded
        mask = mask.to(h_V.dtype)
        if not self.cfg.autoregressive:
            return self.readout(h_V)
        if decoding_order is None:
            decoding_order = torch.rand_like(mask)
        order_nb = ft.gather_nodes(decoding_order.unsqueeze(-1), E_idx).squeeze(-1)
        earlier = (order_nb < decoding_order.unsqueeze(-1)).unsqueeze(-1)
        h_S = self.seq_embed(self.tokens(S))
        h_enc = h_V
        for layer in self.decoder:
            dec = ft.gather_nodes(layer.msg_nb(h_V) + layer.msg_seq(h_S), E_idx)
            enc = ft.gather_nodes(layer.msg_nb(h_enc), E_idx)
            nb_proj = torch.where(earlier, dec, enc)
            h_V = self._run(layer, h_V, layer.msg_edge(h_E), nb_proj, nb_mask, mask)
        return self.readout(h_V)

    @torch.no_grad()
    def sample(
        self,
        X,
        mask,
        residue_index,
        temperature: float = 0.1,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        fixed_mask=None,
        fixed_S=None,
        excluded: str = "",
        decoding_order=None,
        uniforms=None,
        groups: Groups | None = None,
        encoded=None,
        structure_rows=None,
    ) -> torch.Tensor:
        """Design sequences -> S [B, L] long.

        Randomness is the decoding order (autoregressive only) and one uniform per residue that
        picks a letter from softmax(logits / T) with excluded letters removed; whichever is not
        given comes from sampling_noise() with one generator (seeded by `seed` when no generator
        is given). Positions where fixed_mask is true keep fixed_S (and are decoded first).
        groups: tied positions and per-position bias (sampling.Groups); None: every position
        alone, no bias beyond `excluded`. A group samples one letter from its members' weighted
        logits at its first member's turn in the decoding order; fixed members keep fixed_S.
        temperature: a float, or a tensor [B, 1] (one per sample).
        encoded: encode(X, mask, residue_index) already computed (X is then read for its device
        and dtype only). structure_rows: long [B], the row of X/mask/encoded each sample designs
        (several samples of one structure share its encoding); default: sample i, row i.
        """
        if bool(torch.as_tensor(temperature).le(0).any()):
            raise ValueError(f"temperature: expected > 0, got {temperature}")
        if generator is None:
            generator = torch.Generator(device=X.device)
            generator.manual_seed(0 if seed is None else int(seed))
        structure_mask = mask.to(X.dtype)
        mask = structure_mask if structure_rows is None else structure_mask[structure_rows]
        b, length = mask.shape
        fixed_mask = torch.zeros_like(mask, dtype=torch.bool) if fixed_mask is None else fixed_mask.to(torch.bool)
        fixed_S = torch.zeros(b, length, dtype=torch.long, device=X.device) if fixed_S is None else fixed_S
        groups = Groups.singletons(length) if groups is None else groups
        groups = groups.with_bias(letter_bias(excluded)).to(X.device)
        if uniforms is None or (self.cfg.autoregressive and decoding_order is None):
            drawn_order, drawn_uniforms = sampling_noise(fixed_mask, self.cfg.autoregressive, generator)
            decoding_order = drawn_order if decoding_order is None else decoding_order
            uniforms = drawn_uniforms if uniforms is None else uniforms
        was_training = self.training
        self.eval()
        try:
            if encoded is None:
                encoded = self.encode(X, structure_mask, residue_index)
            if not self.cfg.autoregressive:
                logits = self.readout(encoded[0])
                logits = logits if structure_rows is None else logits[structure_rows]
                return sample_one_shot(logits, groups, temperature, uniforms, fixed_mask, fixed_S)
            return self._sample_autoregressive(
                encoded, structure_rows, mask, temperature, groups, uniforms, fixed_mask, fixed_S, decoding_order
            )
        finally:
            self.train(was_training)

    def _sample_autoregressive(
        self, encoded, structure_rows, mask, temperature, groups, uniforms, fixed_mask, fixed_S, decoding_order
    ):
        """One group of tied positions (usually one residue) per step with cached per-layer
        projections (O(M * K) per step, not a full forward). Within a group the members are
        computed one after another in the order the group lists them, as ProteinMPNN's
        `tied_sample` does: a later member reads an earlier one's new decoder state, with no letter
        yet (upstream's h_S is zero until the group's letter is drawn; msg_seq has no bias). An
        untied position gets the logits forward() gives on the final sequence in sampling.tied_order.
        Structure tensors are read at structure_rows (samples sharing an encoding); the decoded
        state is per sample."""
        h_enc, h_E, E_idx, nb_mask = encoded
        b, length = mask.shape
        device = h_enc.device
        rows = torch.arange(b, device=device).unsqueeze(1)  # [B, 1]: sample rows
        srows = rows if structure_rows is None else structure_rows.to(device).unsqueeze(1)  # structure rows
        e_proj = [layer.msg_edge(h_E) for layer in self.decoder]
        enc_proj = [layer.msg_nb(h_enc) for layer in self.decoder]
        if structure_rows is not None:
            enc_proj = [p[structure_rows] for p in enc_proj]
            h_enc = h_enc[structure_rows]
        dec_proj = [torch.zeros_like(p) for p in enc_proj]
        h_layers = [h_enc] + [torch.zeros_like(h_enc) for _ in self.decoder]
        S = torch.zeros(b, length, dtype=torch.long, device=device)
        decoding_order, steps = tied_order(decoding_order, groups)
        for t in range(steps.shape[1]):
            g = steps[:, t]
            pos = groups.members[g]  # [B, M]
            listed = listed_members(groups, g)  # [B, M]
            states = []
            for j in range(pos.shape[1]):
                if j and not bool(listed[:, j].any()):
                    states.append(states[0])  # every row repeats its first member: weight 0
                    continue
                p = pos[:, j : j + 1]  # [B, 1]
                keep = listed[:, j : j + 1].unsqueeze(-1)  # [B, 1, 1]: a repeat writes nothing
                idx = E_idx[srows, p]  # [B, 1, K]
                order_nb = ft.gather_nodes(decoding_order.unsqueeze(-1), idx).squeeze(-1)
                earlier = (order_nb < decoding_order[rows, p].unsqueeze(-1)).unsqueeze(-1)
                h = h_enc[rows, p]
                for li, layer in enumerate(self.decoder):
                    nb_proj = torch.where(
                        earlier, ft.gather_nodes(dec_proj[li], idx), ft.gather_nodes(enc_proj[li], idx)
                    )
                    h = layer(h, e_proj[li][srows, p], nb_proj, nb_mask[srows, p], mask[rows, p])
                    h_layers[li + 1][rows, p] = torch.where(keep, h, h_layers[li + 1][rows, p])
                for li, layer in enumerate(self.decoder):  # context for the group's later members
                    seen = layer.msg_nb(h_layers[li][rows, p])
                    dec_proj[li][rows, p] = torch.where(keep, seen, dec_proj[li][rows, p])
                states.append(h)
            letter = pick_group_letters(self.readout(torch.cat(states, 1)), groups, g, temperature, uniforms)
            letters = torch.where(fixed_mask[rows, pos], fixed_S[rows, pos], letter.unsqueeze(1))
            S[rows, pos] = letters
            h_S = self.seq_embed(self.tokens(letters))
            for li, layer in enumerate(self.decoder):
                dec_proj[li][rows, pos] = layer.msg_nb(h_layers[li][rows, pos]) + layer.msg_seq(h_S)
        return S


def sample_one_shot(logits, groups: Groups, temperature, uniforms, fixed_mask, fixed_S) -> torch.Tensor:
    """Letters for every group at once from one-shot logits [B, L, 20] (shared with onnxruntime)."""
    b = logits.shape[0]
    rows = torch.arange(b, device=logits.device).unsqueeze(1)
    S = torch.zeros(fixed_mask.shape, dtype=torch.long, device=logits.device)
    count = groups.members.shape[0]
    g = torch.arange(count, device=logits.device).repeat(b)  # [B * G]
    member_logits = logits[:, groups.members].reshape(b * count, -1, logits.shape[-1])
    flat_uniforms = uniforms.repeat_interleave(count, dim=0)
    letters = pick_group_letters(member_logits, groups, g, temperature, flat_uniforms).reshape(b, count)
    for j in range(groups.members.shape[1]):
        S[rows, groups.members[:, j].unsqueeze(0)] = letters
    return torch.where(fixed_mask, fixed_S, S)


def sampling_noise(fixed_mask: torch.Tensor, autoregressive: bool, generator: torch.Generator | None = None):
    """(decoding_order or None, uniforms [B, L]) drawn in this order from `generator`: the one
    definition of a seed's randomness, shared by PyTorch and onnxruntime design."""
    order = random_decoding_order(fixed_mask, generator) if autoregressive else None
    return order, torch.rand(fixed_mask.shape, generator=generator, device=fixed_mask.device)


def random_decoding_order(fixed_mask: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random order (float [B, L], argsort ascending) that decodes fixed positions first."""
    order = torch.rand(fixed_mask.shape, generator=generator, device=fixed_mask.device)
    return order - 2.0 * fixed_mask.to(order.dtype)


def unknown_last(order: torch.Tensor, batch) -> torch.Tensor:
    """`order` with residues that have a backbone but no known letter (X) moved after all others:
    the decoder then sees their structure and never a sequence token for them (the unknown letter
    is not among the 20 the model embeds)."""
    unknown = (batch.structure_mask - batch.mask).clamp(min=0)
    return order + 2.0 * unknown.to(order.dtype)
