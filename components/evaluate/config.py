"""What `invfold evaluate` takes. Light on purpose (no torch, no numpy): the CLI builds its
options and rejects bad values from it before any model code is imported."""

from __future__ import annotations

from dataclasses import dataclass

from invfold.errors import ConfigError
from invfold.options import check_values, option

# Residues one scoring run decodes at most: tokens_per_batch x (orders + designs_per_protein) (every
# order and every sampled design of a batch is decoded at once; at the defaults 6,000 x 5 = 30,000).
# Memory follows it, so it is refused before anything is allocated.
MAX_DECODED_RESIDUES = 1_000_000


@dataclass
class EvaluateConfig:
    """model_path: model.pt from training. data: prepared folder. out: local output folder.
    datasets: what to report besides the automatic test subsets (default: test plus every subset
    dataset in the prepared data). seed: autoregressive decoding orders. short_max_length: the
    "short" subset's bound (CATH's test_split_L100 uses 100). designs_per_protein: sequences sampled
    per test protein at `diversity_temperature` for the diversity figure and the sampled recovery beside
    greedy (0: neither). orders: greedy designs per chain, one per decoding order (seeds seed,
    seed + 104729, ...; recovery is their per-chain mean, the report gives the spread across orders).
    bootstrap_resamples: resamples of the chains for the 95% interval of the median (seeded by seed).
    tokens_per_batch x (orders + designs_per_protein) is what one scoring run decodes, bounded by
    MAX_DECODED_RESIDUES."""

    model_path: str = option(
        positional=True,
        metavar="MODEL",
        help="model file (model.pt; path or URI) or published weights (e.g. proteinmpnn:v_48_020)",
    )
    data: str = option(help="prepared folder (path or URI)")
    out: str = option(help="output folder")
    datasets: list[str] | None = option(
        None,
        "dataset to score (repeatable; default: test, validation and every subset dataset)",
        aliases=("--dataset",),
        metavar="DATASET",
    )
    seed: int = option(0, "seed of autoregressive decoding orders", min=0, max=2**62)
    tokens_per_batch: int = option(6000, "residue budget of one scoring batch", min=1, max=MAX_DECODED_RESIDUES)
    short_max_length: int = option(100, "longest chain of the 'short' subset", min=1)
    threads: int | None = option(None, "torch threads (default: torch's)", min=1, max=1024)
    designs_per_protein: int = option(
        2, "sequences sampled per test protein for the diversity figure (0: none)", min=0, max=100
    )
    diversity_temperature: float = option(
        0.1, "sampling temperature for diversity and sampled recovery", above=0, max=10.0
    )
    orders: int = option(3, "decoding orders per chain (greedy recovery is their mean)", min=1, max=100)
    bootstrap_resamples: int = option(
        1000, "bootstrap resamples for the 95% interval of the median recovery", min=0, max=100_000
    )
    model_label: str | None = option(None, "how the report names the model (default: the file's name)", cli=False)
    command: str | None = option(None, "the command line that asked for the report (credentials hidden)", cli=False)

    def __post_init__(self) -> None:
        self.model_path, self.data, self.out = str(self.model_path), str(self.data), str(self.out)
        if not self.model_path or not self.data or not self.out:
            raise ConfigError("EvaluateConfig: model_path, data and out must be given")
        check_values(self)
        if self.designs_per_protein == 1:
            raise ConfigError(
                f"EvaluateConfig.designs_per_protein: expected 0 or at least 2, got {self.designs_per_protein}"
            )
        if 0 < self.bootstrap_resamples < 100:
            raise ConfigError(
                f"EvaluateConfig.bootstrap_resamples: expected 0 (no interval) or at least 100, "
                f"got {self.bootstrap_resamples}"
            )
        decoded = self.tokens_per_batch * (self.orders + self.designs_per_protein)
        if decoded > MAX_DECODED_RESIDUES:
            raise ConfigError(
                f"EvaluateConfig.tokens_per_batch: one scoring run would decode tokens_per_batch x (orders + "
                f"designs_per_protein) = {self.tokens_per_batch:,} x {self.orders + self.designs_per_protein} = "
                f"{decoded:,} residues at once; expected at most {MAX_DECODED_RESIDUES:,} (lower one of them)"
            )
