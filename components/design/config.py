"""What `invfold design` and `invfold score` take: their configs and the parsers of their values.

Light on purpose (no torch, no numpy): the CLI builds its options and rejects bad values from
these dataclasses before any model code is imported."""

from __future__ import annotations

from dataclasses import dataclass

from invfold.components.design.positions import parse_positions
from invfold.components.protein.alphabet import ALPHABET
from invfold.errors import ConfigError
from invfold.options import check_values, option

# invfold design --fasta-layout: ours (every chain, mean_nll/recovery), or protein_mpnn_run.py's seqs/*.fa
FASTA_LAYOUTS = ("invfold", "proteinmpnn")
NUMBERINGS = ("seqres", "proteinmpnn")  # structure.NUMBERINGS (not imported: the CLI starts without numpy)

# invfold score --probs: upstream's --unconditional_probs_only, --conditional_probs_only(_backbone)
PROB_MODES = ("unconditional", "conditional", "conditional-backbone")

# Sampling temperatures above this are uniform sampling in all but name (evaluate's diversity
# temperature has the same bound).
MAX_TEMPERATURE = 10.0
# Backbone noise (Angstrom) above this no longer describes the backbone: ProteinMPNN's published
# weights were trained at 0.02-0.30 A, and a sigma of 10 A moves atoms past their neighbours.
MAX_BACKBONE_NOISE = 10.0
# The longest record any design or score run may be given (max_length's own bound): titin, the
# longest known chain, has about 35,000 residues.
MAX_RECORD_LENGTH = 100_000


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
    fixed_positions: kept native: 1-based sequence positions, e.g. "1-10,15" (in a complex:
        positions in the chains concatenated in record order), and/or residue IDs as LigandMPNN
        writes them, chain + author number + insertion code: "A23 A24 B42C" (positions.py).
    out: x.fasta designs one record; a folder or x.jsonl designs every record of `structure`
    (also a folder of structures or a text list of paths; see batch.py), name / chain filtering.
    temperature: one or several ("0.1,0.2", as ProteinMPNN's --sampling_temp "0.1 0.2"), each
    with num_sequences samples.
    excluded: letters never designed (e.g. "C").
    fixed_positions_json, tied_positions, bias_aa, bias_by_res, omit_aa_jsonl: ProteinMPNN's JSON inputs
    (constraints.py), keyed by the entry name, 1-based positions per chain.
    fasta_layout, save_probs, backbone_noise: ProteinMPNN's FASTA layout, --save_probs 1 and
    --backbone_noise (design.py, probs.py). pssm_*: its PSSM inputs (constraints.py).
    """

    model: str = option(positional=True, help="model.pt (training output) or model.onnx (invfold export)")
    structure: str = option(positional=True, help="PDB/mmCIF file (or .gz), chain-set .jsonl[.gz], or TS50 json")
    out: str = option(
        help="FASTA file to write (one structure; - for stdout), or a folder (one FASTA per structure) or "
        "designs.jsonl (every design of every structure) for a batch"
    )
    name: str | None = option(None, "record name to design (e.g. 1abc.A)")
    chain: str | None = option(None, "chain id to design alone (e.g. A), as a single-chain record")
    design_chains: str = option(
        "",
        "chains of a complex to design, e.g. A,B: every chain is read and the others are kept as fixed "
        "context (structure and native sequence); default: no complex, one chain",
        metavar="CHAINS",
    )
    chain_id_jsonl: str | None = option(
        None,
        "ProteinMPNN's chains to design {entry: [[designed chains], [fixed chains]]} (.json/.jsonl): "
        "--design-chains from a file, for the entry --name picks (or the file's only entry)",
        aliases=("--chain_id_jsonl",),
        metavar="FILE",
    )
    num_sequences: int = option(
        4, "sequences to sample per temperature", aliases=("-n", "--num_seq_per_target"), min=1, max=100_000
    )
    temperature: str | float | list[float] = option(
        "0.1",
        "sampling temperature(s), e.g. 0.1 or 0.1,0.2 (num_sequences at each)",
        type=str,
        aliases=("-T", "--sampling_temp"),
        metavar="T[,T...]",
    )
    seed: int = option(0, "sample i (at each temperature) uses seed + i", min=0, max=2**63 - 100_001)
    fixed_positions: str | list[int | str] = option(
        factory=list,
        type=str,
        aliases=("--fixed",),
        metavar="POSITIONS",
        help="kept native: 1-based sequence positions, e.g. 1-10,15, or residue IDs (chain, author number, "
        "insertion code) as LigandMPNN takes them, e.g. 'A23 A24 B42C' (autoregressive models only: a one-shot "
        "model could not condition the other positions on them)",
    )
    excluded: str = option(
        "",
        "amino acids never designed, e.g. C (ProteinMPNN's --omit_AAs)",
        aliases=("--omit-aa", "--omit_AAs", "--exclude"),
        metavar="LETTERS",
    )
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
    omit_aa_jsonl: str | None = option(
        None,
        'ProteinMPNN per-position omitted letters {entry: {chain: [[[positions], "LETTERS"], ...]}} (.json/.jsonl)',
        aliases=("--omit_AA_jsonl",),
        metavar="FILE",
    )
    fasta_layout: str = option(
        "invfold",
        "FASTA layout: invfold (designs only, every chain, mean_nll and recovery in the header) or proteinmpnn "
        "(protein_mpnn_run.py's: the native first, designed chains only, score, global_score, seq_recovery)",
        choices=FASTA_LAYOUTS,
    )
    save_probs: bool = option(
        False,
        "also write each design's per-position probabilities beside the FASTA (<out stem>.probs.npz; a batch "
        "folder: <record>.probs.npz) in the layout of protein_mpnn_run.py --save_probs 1: probs, log_probs, S, "
        "mask, chain_order, plus decoding_order",
    )
    numbering: str = option(
        "",
        "how 1-based positions are placed where a file's SEQRES and its author numbering disagree (a "
        "Kabat skip): seqres, or proteinmpnn (the author numbering, a skipped number filled with X, as "
        "ProteinMPNN's parser reads it); default: proteinmpnn with --fasta-layout proteinmpnn or a "
        "ProteinMPNN JSON of positions (fixed, tied, omit, bias-by-res, PSSM), seqres otherwise",
        choices=("", *NUMBERINGS),
    )
    save_score: bool = option(
        False,
        "also write the designs' scores beside the FASTA (<out stem>.scores.npz; a batch folder: "
        "<record>.scores.npz) as protein_mpnn_run.py --save_score 1 does: score, global_score",
    )
    backbone_noise: float = option(
        0.0,
        "standard deviation (Angstrom) of Gaussian noise added to the backbone coordinates before the model "
        "reads them (ProteinMPNN's --backbone_noise); sample i draws its noise from seed + i",
        aliases=("--backbone_noise",),
        metavar="SIGMA",
        min=0.0,
        max=MAX_BACKBONE_NOISE,
    )
    pssm_jsonl: str | None = option(
        None,
        'ProteinMPNN PSSM {entry: {chain: {"pssm_coef": [...], "pssm_bias": [[21 floats]...], "pssm_log_odds": '
        "[[21 floats]...]}}} (.json/.jsonl, as make_pssm_input_dict.py writes it); used with --pssm-bias-flag "
        "and/or --pssm-log-odds-flag",
        aliases=("--pssm_jsonl",),
        metavar="FILE",
    )
    pssm_multi: float = option(
        0.0,
        "weight of the PSSM in [0, 1] (ProteinMPNN's --pssm_multi): p = (1 - m c) p + m c pssm_bias",
        aliases=("--pssm_multi",),
        min=0.0,
        max=1.0,
    )
    pssm_threshold: float = option(
        0.0,
        "with --pssm-log-odds-flag 1, letters whose PSSM log-odds are not above it are weighted 0.001 "
        "(ProteinMPNN's --pssm_threshold)",
        aliases=("--pssm_threshold",),
        min=-1e6,
        max=1e6,
    )
    pssm_log_odds_flag: int = option(
        0, "1: restrict letters by --pssm-threshold (ProteinMPNN's --pssm_log_odds_flag)",
        aliases=("--pssm_log_odds_flag",), choices=(0, 1),
    )  # fmt: skip
    pssm_bias_flag: int = option(
        0, "1: mix the PSSM into the probabilities by --pssm-multi (ProteinMPNN's --pssm_bias_flag)",
        aliases=("--pssm_bias_flag",), choices=(0, 1),
    )  # fmt: skip
    out_structure: str | None = option(
        None,
        "also write each design threaded onto the input backbone (N, CA, C, O; observed residues), one file "
        "per design: designs.pdb -> designs_0.pdb, designs_1.pdb, ... (.cif for mmCIF)",
        metavar="FILE",
    )
    overwrite: bool = option(
        False,
        "replace what an earlier run left in --out: a batch refuses a non-empty output folder, or an existing "
        ".jsonl or its summary, without it",
    )
    max_length: int = option(
        10_000,
        "longest record designed, in residues (the neighbour search's memory grows with the square of the "
        "length); longer records are refused (a batch counts them as skipped: too_long)",
        aliases=("--max_length",),
        min=1,
        max=MAX_RECORD_LENGTH,
    )
    batch_residues: int = option(
        8_000,
        "residues sampled in one model run (sequences x record length): the num_sequences samples of a record "
        "are drawn in runs of batch_residues // length sequences (at least one), so memory follows this, not "
        "num_sequences",
        min=1,
        max=1_000_000,
    )
    threads: int | None = option(None, "CPU threads", min=1, max=1024)
    model_reference: str | None = option(
        None, "how outputs name the model: the reference as given (default: the file's name)", cli=False
    )
    model_version: str | None = option(None, "the registered version a models:/ reference resolved to", cli=False)

    @property
    def placed_by(self) -> str:
        """The numbering records are read with (the numbering option, or its default)."""
        if self.numbering:
            return self.numbering
        files = (self.fixed_positions_json, self.tied_positions, self.omit_aa_jsonl, self.bias_by_res, self.pssm_jsonl)
        return "proteinmpnn" if self.fasta_layout == "proteinmpnn" or any(files) else "seqres"

    def __post_init__(self):
        check_values(self)
        if self.numbering not in ("", *NUMBERINGS):
            raise ConfigError(f"DesignConfig.numbering: expected one of {NUMBERINGS}, got {self.numbering!r}")
        self.temperature = parse_temperatures(self.temperature)
        unknown = sorted(set(self.excluded.upper()) - set(ALPHABET))
        if unknown:
            raise ConfigError(f"DesignConfig.excluded: {unknown} are not among the 20 amino acids {ALPHABET}")
        if set(self.excluded.upper()) >= set(ALPHABET):
            raise ConfigError("DesignConfig.excluded: all 20 amino acids are excluded")
        for flag in ("pssm_log_odds_flag", "pssm_bias_flag"):  # 0 or 1: their choices
            if getattr(self, flag) and not self.pssm_jsonl:
                raise ConfigError(f"DesignConfig.{flag}: a PSSM flag needs the PSSM (--pssm-jsonl FILE)")
        if isinstance(self.fixed_positions, str):
            # 1-based ints and residue IDs; no record is longer than max_length, nor a position in it
            self.fixed_positions = parse_positions(self.fixed_positions, self.max_length)
        if self.chain_id_jsonl and self.design_chains:
            raise ConfigError("DesignConfig: --chain-id-jsonl and --design-chains both name the chains to design")
        if self.design_chains and self.chain is not None:
            raise ConfigError(
                "DesignConfig: --chain picks one chain as a single-chain record; --design-chains reads the whole "
                "complex and designs some of its chains: give one of them"
            )


def parse_temperatures(value: str | float | list[float]) -> list[float]:
    """0.1, "0.1", "0.1,0.2" or "0.1 0.2" (ProteinMPNN's --sampling_temp) -> [0.1, ...], each in
    (0, MAX_TEMPERATURE] (inf and NaN are refused: they would sample uniformly or not at all)."""
    parts = value.replace(",", " ").split() if isinstance(value, str) else value
    parts = parts if isinstance(parts, (list, tuple)) else [parts]
    try:
        temperatures = [float(t) for t in parts]
    except (TypeError, ValueError):
        raise ConfigError(f"DesignConfig.temperature: expected numbers like 0.1,0.2, got {value!r}") from None
    if not temperatures or not all(0 < t <= MAX_TEMPERATURE for t in temperatures):
        raise ConfigError(
            f"DesignConfig.temperature: expected one or more temperatures in (0, {MAX_TEMPERATURE:g}], got {value!r}"
        )
    return temperatures


@dataclass
class ScoreConfig:
    """model: model.pt or model.onnx (autoregressive models average over decoding orders; a
    one-shot model's scores do not depend on the order). structure: as for `invfold design`.
    fasta: sequences to score, each as long as the record (chains concatenated in the record's
    order; "/" between chains as ProteinMPNN writes them is accepted and checked); default: the
    native sequence. out: CSV, one row per sequence; <out stem>.json holds the per-residue NLL.
    """

    model: str = option(positional=True, help="model.pt (training output) or model.onnx (invfold export)")
    structure: str = option(positional=True, help="PDB/mmCIF file (or .gz), chain-set .jsonl[.gz], or TS50 json")
    out: str = option(help="CSV to write (one row per sequence); the per-residue JSON goes beside it")
    fasta: str | None = option(None, "FASTA of sequences to score (default: the structure's native sequence)")
    name: str | None = option(None, "record name to score (e.g. 1abc.A)")
    chain: str | None = option(None, "chain id of the record to score (e.g. A)")
    score_chains: str = option(
        "", "chains whose residues are scored, e.g. A,B (default: all); the others are decoded first as context"
    )
    num_orders: int = option(
        8,
        "random decoding orders averaged (ProteinMPNN: --num_seq_per_target with --score_only 1)",
        aliases=("--num_seq_per_target",),
        min=1,
        max=100_000,
    )
    batch_size: int = option(8, "decoding orders per model run", aliases=("--batch_size",), min=1, max=1024)
    batch_residues: int = option(
        80_000,
        "residues in one model run (orders x record length): a long record is scored in fewer orders per run "
        "than batch_size (at least one), so memory follows this (the default: 8 orders at the default max_length)",
        min=1,
        max=1_000_000,
    )
    seed: int = option(0, "order k is drawn from seed + k", min=0, max=2**63 - 100_001)
    max_length: int = option(
        10_000,
        "longest record scored, in residues (memory grows with the square of the length)",
        aliases=("--max_length",),
        min=1,
        max=MAX_RECORD_LENGTH,
    )
    threads: int | None = option(None, "CPU threads", min=1, max=1024)
    probs: str | None = option(
        None,
        "also write per-position log-probabilities of the native structure as protein_mpnn_run.py does "
        "(npz in its layout, <out stem>.probs.npz): unconditional (--unconditional_probs_only), conditional "
        "(--conditional_probs_only, one copy per decoding order), conditional-backbone "
        "(--conditional_probs_only_backbone); the score chains are its designed chains",
        choices=PROB_MODES,
    )

    def __post_init__(self):
        check_values(self)
