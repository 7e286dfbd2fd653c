"""Whether a candidate model is registered: a pure function over typed results.

The compare step gathers the facts (the candidate's evaluation, the champion and its score, the
weights a fine-tuned candidate started from and their score, the tracking server's state) and
`decide` turns them into a `Comparison`. Every model is compared on VALIDATION recovery measured
on the candidate's own validation data: register only when the candidate reaches the threshold,
beats the champion beyond noise and, when it was fine-tuned, beats its starting weights beyond
noise by the same test (a fine-tune that only moves the figure within noise made nothing worth
registering). Beyond noise: a one-sided paired bootstrap over the validation chains both were scored on (each chain's
recovery difference, candidate minus champion or starting weights; p = the share of resamples whose mean difference is
<= 0, registered only when p < ALPHA over at least MIN_CHAINS chains); when the other figure has no
per-chain values (the one recorded on a champion's version), the candidate must beat it by more than
the half-width of the candidate's own bootstrap 95% interval of the median. The test split is
never used to choose; its figures travel along for the record. Nothing here touches MLflow or
files, so every case is a table row in tests/register/test_decision.py.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from invfold import storage
from invfold.components.evaluate.step import scalar_metrics
from invfold.errors import ConfigError, InputError

METRIC = "validation_recovery"  # median per-protein recovery on the validation split; higher is better
ALPHA = 0.05  # one-sided: the chance of registering a candidate no better than the champion
MIN_CHAINS = 10  # fewer paired chains than this cannot tell a win from noise: the champion stays
RESAMPLES = 2000  # paired bootstrap resamples (seeded: the same facts give the same decision)
BOOTSTRAP_SEED = 0
REPORTED = ("test", "validation")  # evaluate's scalars (MLflow names) recorded with the decision


@dataclass(frozen=True)
class Evaluation:
    """What the decision reads from an evaluation (evaluate's metrics.json): the validation recovery
    it is chosen on, the data digest, and the test/validation figures for the record."""

    validation_recovery: float
    data_digest: str
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    chains: dict[str, float] = dataclasses.field(default_factory=dict)  # validation chain -> recovery

    @property
    def half_width(self) -> float | None:
        """Half the bootstrap 95% interval of the validation median (None: not measured)."""
        low, high = self.metrics.get("validation/recovery_ci_low"), self.metrics.get("validation/recovery_ci_high")
        return None if low is None or high is None else (high - low) / 2

    @property
    def test_recovery(self) -> float | None:
        return self.metrics.get("test/recovery")

    @classmethod
    def from_metrics(cls, metrics: dict, source: str = "metrics.json") -> Evaluation:

        validation = (metrics.get("datasets") or {}).get("validation") or {}
        if not isinstance(validation.get("recovery"), (int, float)) or validation["recovery"] != validation["recovery"]:
            raise InputError(
                source,
                None,
                "datasets.validation.recovery",
                "a finite validation recovery (models are chosen on the validation split, never on test: "
                "the prepared data needs a non-empty validation split)",
                validation.get("recovery", "no validation figures"),
                reason="no_validation",
            )
        figures = {k: v for k, v in scalar_metrics(metrics, "/").items() if k.startswith(REPORTED)}
        chains = (metrics.get("per_chain") or {}).get("validation") or {}
        return cls(float(validation["recovery"]), str(metrics["data_digest"]), figures, finite_chains(chains, source))


def finite_chains(chains: dict, source: str) -> dict[str, float]:
    """Chain -> recovery, every value a finite number in [0, 1], or a loud InputError naming the chain."""
    out = {}
    for name, value in chains.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
            raise InputError(
                source, None, f"per_chain.validation.{name}", "a finite recovery in [0, 1]", value, reason="not_finite"
            )
        out[str(name)] = float(value)
    return out


@dataclass(frozen=True)
class Champion:
    """The registered version holding the `champion` alias. `recovery` is its validation recovery
    on the candidate's validation data (None: it could not be scored); `basis` says how it was obtained."""

    version: str
    recovery: float | None
    basis: str
    chains: dict[str, float] = dataclasses.field(default_factory=dict)  # validation chain -> recovery


@dataclass(frozen=True)
class StartingPoint:
    """The weights a fine-tuned candidate started from (`init_from`: a model file, URI or published
    name) and their validation recovery on the candidate's validation data."""

    init_from: str
    recovery: float
    chains: dict[str, float] = dataclasses.field(default_factory=dict)  # validation chain -> recovery


@dataclass(frozen=True)
class Comparison:
    """The compare step's result: the figures, how the champion's was obtained, the decision."""

    candidate: float
    threshold: float
    data_digest: str
    register: bool
    decision: str
    champion: float | None = None
    champion_version: str | None = None
    basis: str = "no champion"
    init_from: str | None = None
    starting_point: float | None = None
    metric: str = METRIC
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    statistic: dict | None = None  # how "beyond noise" was judged against the champion (test, n, p, ...)
    candidate_chains: dict[str, float] = dataclasses.field(default_factory=dict)  # for deciding again
    starting_statistic: dict | None = None  # how "beyond noise" was judged against the starting weights
    starting_chains: dict[str, float] = dataclasses.field(default_factory=dict)  # for deciding again

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Comparison:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def decide(
    candidate: Evaluation,
    threshold: float,
    champion: Champion | None,
    tracking_down: str = "",
    starting_point: StartingPoint | None = None,
) -> Comparison:
    """`tracking_down`: why the tracking server cannot be used ("" when it can); a model that
    cannot be recorded is not registered. `starting_point`: for a fine-tuned candidate, the weights
    it started from; it must beat them beyond noise, or fine-tuning made nothing worth registering.
    A threshold that is not a number in [0, 1] is refused: NaN compares false, so every candidate
    would pass it."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
        raise ConfigError(f"registration_threshold: expected a recovery in [0, 1], got {threshold!r}")
    score = candidate.validation_recovery
    facts = dict(
        candidate=score,
        threshold=threshold,
        data_digest=candidate.data_digest,
        metrics=candidate.metrics,
        candidate_chains=candidate.chains,
    )
    if champion is not None:
        facts.update(champion=champion.recovery, champion_version=champion.version, basis=champion.basis)
    if starting_point is not None:
        # as it may be shown: the comparison becomes MLflow tags, descriptions and the step's outputs
        facts.update(
            init_from=storage.display_uri(starting_point.init_from),
            starting_point=starting_point.recovery,
            starting_chains=starting_point.chains,
        )
    if tracking_down:
        return Comparison(**facts, register=False, decision=f"not registering: {tracking_down}")
    if score < threshold:
        return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} below the threshold {threshold:.4f}")
    beaten = []
    if starting_point is not None:
        start = f"the starting weights {facts['init_from']} ({starting_point.recovery:.4f} on the same data)"
        if score <= starting_point.recovery:
            return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} does not beat {start}")
        statistic = beyond_noise(candidate, starting_point, "starting weights")
        facts["starting_statistic"] = statistic
        if not statistic["beyond_noise"]:
            why = f"{METRIC} {score:.4f} is above {start} but within noise: {statistic['summary']}"
            return Comparison(**facts, register=False, decision=why)
        beaten.append(f"{start} beyond noise ({statistic['summary']})")
    if champion is None:
        why = f"{METRIC} {score:.4f} beats the threshold {threshold:.4f}" + "".join(f" and {b}" for b in beaten)
        return Comparison(**facts, register=True, decision=why + " (no champion yet)")
    if champion.recovery is None:
        why = f"champion v{champion.version} could not be scored; keeping it"
        return Comparison(**facts, register=False, decision=why)
    figure = f"champion v{champion.version} ({champion.recovery:.4f}, {champion.basis})"
    if score <= champion.recovery:
        return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} does not beat {figure}")
    statistic = beyond_noise(candidate, champion)
    facts["statistic"] = statistic
    if not statistic["beyond_noise"]:
        why = f"{METRIC} {score:.4f} is above {figure} but within noise: {statistic['summary']}"
        return Comparison(**facts, register=False, decision=why)
    why = f"{METRIC} {score:.4f} beats the threshold {threshold:.4f}" + "".join(f", {b}" for b in beaten)
    return Comparison(**facts, register=True, decision=f"{why} and {figure} beyond noise: {statistic['summary']}")


def paired_bootstrap(candidate: dict[str, float], champion: dict[str, float]) -> dict:
    """One-sided paired bootstrap over the chains both were scored on: per-chain differences
    (candidate - champion), their mean, the one-sided (1 - ALPHA) lower bound of the mean and p (the
    share of RESAMPLES resamples whose mean difference is <= 0)."""
    names = sorted(candidate.keys() & champion.keys())
    diffs = np.array([candidate[n] - champion[n] for n in names])
    if not np.isfinite(diffs).all():
        raise InputError("comparison", None, "per-chain recovery", "finite values", "non-finite", reason="not_finite")
    if not len(diffs):
        return {"test": "paired bootstrap", "n": 0, "mean_difference": None, "lower_bound": None, "p": 1.0}
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = diffs[rng.integers(0, len(diffs), (RESAMPLES, len(diffs)))].mean(1)
    return {
        "test": "paired bootstrap",
        "n": len(diffs),
        "mean_difference": float(diffs.mean()),
        "lower_bound": float(np.quantile(means, ALPHA)),
        "p": float((means <= 0).mean()),
    }


def beyond_noise(candidate: Evaluation, other: Champion | StartingPoint, what: str = "champion") -> dict:
    """Whether the candidate's lead over `other` (the champion or the starting weights, named by
    `what`) is beyond noise, with the record of why."""
    if candidate.chains and other.chains:
        stat = paired_bootstrap(candidate.chains, other.chains)
        stat.update(alpha=ALPHA, resamples=RESAMPLES, seed=BOOTSTRAP_SEED, min_chains=MIN_CHAINS)
        if stat["n"] < MIN_CHAINS:
            stat.update(beyond_noise=False, summary=f"{stat['n']} paired chains, fewer than {MIN_CHAINS}")
            return stat
        stat["beyond_noise"] = stat["p"] < ALPHA
        stat["summary"] = (
            f"paired bootstrap over {stat['n']} validation chains, mean per-chain difference "
            f"{stat['mean_difference']:+.4f} (one-sided {1 - ALPHA:.0%} lower bound {stat['lower_bound']:+.4f}), "
            f"p = {stat['p']:.4f} {'<' if stat['beyond_noise'] else '>='} alpha {ALPHA}"
        )
        return stat
    half = candidate.half_width
    margin = candidate.validation_recovery - other.recovery
    possessive = what + ("'" if what.endswith("s") else "'s")
    stat = {
        "test": "margin: half-width of the candidate's bootstrap 95% interval",
        "margin": margin,
        "half_width": half,
    }
    if half is None or not math.isfinite(half):
        stat.update(beyond_noise=False, summary="no per-chain values or interval to tell a win from noise")
        return stat
    stat["beyond_noise"] = margin > half
    stat["summary"] = (
        f"lead {margin:+.4f} {'>' if stat['beyond_noise'] else '<='} half-width {half:.4f} of the candidate's "
        f"95% interval (the {possessive} figure has no per-chain values)"
    )
    return stat
