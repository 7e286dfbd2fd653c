"""PrepConfig: every option of the prep step, validated before anything is read."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from invfold import storage
from invfold.components.protein.alphabet import ALPHABET
from invfold.components.protein.limits import DEFAULT_LIMITS, ReadLimits
from invfold.errors import ConfigError
from invfold.options import check_values, option

# The longest chain prep may be told to keep (max_length's own bound; the card's length histogram
# is sized by it): titin, the longest known chain, has about 35,000 residues.
MAX_CHAIN_LENGTH = 100_000


@dataclass
class PrepConfig:
    """Options of `run_prep`.

    input: a chain_set.jsonl[.gz], a TS50 JSON list, a structure file or a folder of them (local
        path or remote URI). split_file: train/validation/test names; when absent prep makes the
        split (see split.py). subset_files: `test`-only files that become named datasets.
    out: folder (local path or remote URI) for the Arrow files, index.json and the card.
    Filters (the field's defaults): alphabet = the 20 standard letters (chains with other letters
        are dropped, except X: an unknown residue or a numbering gap, kept in place and masked);
        max_length = 500 (CATH 4.2 and ProteinMPNN-style training cap); min_length = 30 (shorter
        chains are peptides without a fold of their own, and CATH rarely classifies domains that
        short; the project's real 833-chain set, shortest 32, loses none); min_observed_fraction =
        0.5 (a chain with over half its backbone missing teaches the model its sequence from little
        structure).
    strict: turn input defects (reader skips, duplicate names, chains without any observed
        residue, split names absent from the set) into errors; filter drops stay counted drops.
    split_fractions/split_by/identity_tool/identity_threshold/seed: how prep makes a split when no
        split file is given. check_identity: also report the highest train-test identity for a
        user-supplied split file (opt-in: it costs a search; always done when prep splits).
    check_against: a prepared folder (path or URI) whose train split every non-train chain here is
        checked against: how an external evaluation list prepared on its own (e.g. a TS50-style
        list) overlaps a model's training data. The card's `split.external_overlap` gives, per
        dataset, members that are train chains there by name and members at identity_threshold
        or more to one (reported, never dropped: the list is someone else's benchmark).
    complexes: read the chains of one entry (all protein chains of a PDB/mmCIF file; the
        chain-set lines "1abc.A", "1abc.B" wherever they are) as one complex record named by the
        entry ("1abc"), the model conditioning on every chain (protein/complexes.py). The length
        filters apply to the whole complex. With a split file naming chains, a complex goes where
        its chains are named (chains named in different splits: dropped as `split_conflict`).
        Without complexes, prep's own split still keeps the chains of one entry in one split.
    batch_rows/batch_bytes: rows per Arrow record batch are flushed at whichever comes first;
        memory is bounded by these (times the number of datasets), not by the input size.
    max_line_bytes/max_file_bytes/max_numbering_span/max_numbering_gap: what one input may make the
        readers allocate (protein/limits.py, whose defaults these are): a longer chain-set line or a
        chain numbered across a wider span is a counted skip (`line_too_long`, `numbering_span`); a
        longer TS50 list entry, or a file (structure, TS50 list, split file) larger once
        decompressed, is an InputError (`too_large`); a wider jump in a structure chain's author
        numbering is filled with nothing.
    """

    input: str = option(positional=True, help="protein set path or URI")
    out: str = option(aliases=("--output",), help="output folder (path or URI)")
    split_file: str | None = option(
        None,
        "chain_set_splits.json with train/validation/test; without it prep makes a split that keeps "
        "related chains together",
    )
    subset_files: list[str] = option(
        factory=list,
        aliases=("--subset",),
        metavar="FILE",
        help="subset file with a 'test' list (e.g. test_split_L100.json); repeatable",
    )
    max_length: int = option(500, "longest chain kept, in residues", min=1, max=MAX_CHAIN_LENGTH)
    min_length: int = option(30, "shortest chain kept, in residues", min=1, max=MAX_CHAIN_LENGTH)
    min_observed_fraction: float = option(
        0.5, "least fraction of a chain's backbone that must be observed", min=0.0, max=1.0
    )
    alphabet: str = option(ALPHABET, "letters kept (chains with others are dropped)")
    strict: bool = option(False, "input defects are errors instead of counted skips")
    complexes: bool = option(
        False, "the chains of one entry (structure file, chain-set lines of one entry) as one multi-chain record"
    )
    seed: int = option(0, "seed of the split prep makes")
    split_fractions: tuple[float, float, float] = option(
        (0.8, 0.1, 0.1),
        "train, validation and test fractions of a split prep makes",
        metavar=("TRAIN", "VALIDATION", "TEST"),
        min=0.0,
        max=1.0,
    )
    split_by: Literal["auto", "cath", "cluster", "identity"] = option("auto", "what keeps related chains together")
    identity_tool: Literal["auto", "mmseqs", "kmer"] = option("auto", "sequence-identity search of a split by identity")
    identity_threshold: float = option(
        0.4, "chains at least this identical stay on one side of the split", above=0, below=1
    )
    check_identity: bool = option(False, "with --split-file, also report the highest train-test sequence identity")
    check_against: str | None = option(
        None,
        "a prepared folder whose train split these chains are checked against (overlap in the card), e.g. the "
        "training data of the model an external benchmark list will evaluate",
        metavar="PREPARED",
    )
    batch_rows: int = option(1024, "rows per Arrow record batch (memory bound)", min=1, max=2**20)
    batch_bytes: int = option(32 * 2**20, "bytes per Arrow record batch (memory bound)", min=1, max=2**31)
    log_every: int = option(5000, "records between progress lines", min=1)
    max_line_bytes: int = option(
        DEFAULT_LIMITS.max_line_bytes,
        "longest chain-set line (longer lines are skipped) or TS50 list entry (an error) read, in bytes",
    )
    max_file_bytes: int = option(
        DEFAULT_LIMITS.max_file_bytes,
        "largest file read whole (structure file, TS50 list, split file), in bytes once decompressed",
    )
    max_numbering_span: int = option(
        DEFAULT_LIMITS.max_numbering_span,
        "most residues a structure chain's numbering may span, gaps included (wider chains are skipped)",
    )
    max_numbering_gap: int = option(
        DEFAULT_LIMITS.max_numbering_gap,
        "most residues filled into one gap of a structure chain's author numbering (without a deposited "
        "sequence); a wider jump, e.g. fusion-style 100 -> 1001, is renumbering and filled with nothing",
        min=0,
    )

    def __post_init__(self):
        self.input, self.out = str(self.input), str(self.out)
        if self.split_file is not None:
            self.split_file = str(self.split_file)
        self.subset_files = [str(p) for p in self.subset_files]
        self.check_against = str(self.check_against) if self.check_against else None
        self.split_fractions = tuple(float(f) for f in self.split_fractions)
        if not self.input or not self.out:
            raise ConfigError("PrepConfig: input and out must be given")
        check_values(self)
        if not self.min_length <= self.max_length:
            raise ConfigError(
                f"need 1 <= min_length <= max_length, got min_length={self.min_length}, max_length={self.max_length}"
            )
        if (
            not self.alphabet
            or not set(self.alphabet) <= set(ALPHABET)
            or len(set(self.alphabet)) != len(self.alphabet)
        ):
            raise ConfigError(f"alphabet must be distinct letters of {ALPHABET}, got {self.alphabet!r}")
        if (
            len(self.split_fractions) != 3
            or min(self.split_fractions) < 0
            or abs(sum(self.split_fractions) - 1.0) > 1e-6
            or self.split_fractions[0] <= 0
        ):
            raise ConfigError(
                f"split_fractions must be 3 non-negative numbers (train > 0) summing to 1, got {self.split_fractions}"
            )
        self.read_limits()  # each bound judged here, before anything is read

    def read_limits(self) -> ReadLimits:
        """The readers' bounds (protein/limits.py) these options set."""
        return ReadLimits(self.max_line_bytes, self.max_file_bytes, self.max_numbering_span, self.max_numbering_gap)

    def options(self) -> dict:
        """The options as written into the card (JSON-ready)."""
        out = asdict(self)
        out["split_fractions"] = list(self.split_fractions)
        for name in ("input", "output", "split_file", "check_against"):
            if out.get(name):
                out[name] = storage.display_uri(out[name])
        out["subset_files"] = [storage.display_uri(p) for p in self.subset_files]
        return out
