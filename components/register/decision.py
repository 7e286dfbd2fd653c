"""Whether a candidate model is registered: a pure function over typed results.

The compare step gathers the facts (the candidate's evaluation, the champion and its score, the
weights a fine-tuned candidate started from and their score, the tracking server's state) and
`decide` turns them into a `Comparison`. Every model is compared on VALIDATION recovery measured
on the candidate's own validation data: register only when the candidate reaches the threshold,
beats the champion and, when it was fine-tuned, beats its starting weights. The test split is
never used to choose; its figures travel along for the record. Nothing here touches MLflow or
files, so every case is a table row in tests/register/test_decision.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from invfold.components.evaluate.step import scalar_metrics
from invfold.errors import InputError

METRIC = "validation_recovery"  # median per-protein recovery on the validation split; higher is better
REPORTED = ("test", "validation")  # evaluate's scalars (MLflow names) recorded with the decision


@dataclass(frozen=True)
class Evaluation:
    """What the decision reads from an evaluation (evaluate's metrics.json): the validation recovery
    it is chosen on, the data digest, and the test/validation figures for the record."""

    validation_recovery: float
    data_digest: str
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)

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
        return cls(float(validation["recovery"]), str(metrics["data_digest"]), figures)


@dataclass(frozen=True)
class Champion:
    """The registered version holding the `champion` alias. `recovery` is its validation recovery
    on the candidate's validation data (None: it could not be scored); `basis` says how it was obtained."""

    version: str
    recovery: float | None
    basis: str


@dataclass(frozen=True)
class StartingPoint:
    """The weights a fine-tuned candidate started from (`init_from`: a model file, URI or published
    name) and their validation recovery on the candidate's validation data."""

    init_from: str
    recovery: float


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
    it started from; it must beat them, or fine-tuning made nothing worth registering."""
    score = candidate.validation_recovery
    facts = dict(candidate=score, threshold=threshold, data_digest=candidate.data_digest, metrics=candidate.metrics)
    if champion is not None:
        facts.update(champion=champion.recovery, champion_version=champion.version, basis=champion.basis)
    if starting_point is not None:
        facts.update(init_from=starting_point.init_from, starting_point=starting_point.recovery)
    if tracking_down:
        return Comparison(**facts, register=False, decision=f"not registering: {tracking_down}")
    if score < threshold:
        return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} below the threshold {threshold:.4f}")
    beaten = []
    if starting_point is not None:
        start = f"the starting weights {starting_point.init_from} ({starting_point.recovery:.4f} on the same data)"
        if score <= starting_point.recovery:
            return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} does not beat {start}")
        beaten.append(start)
    if champion is None:
        why = f"{METRIC} {score:.4f} beats the threshold {threshold:.4f}" + "".join(f" and {b}" for b in beaten)
        return Comparison(**facts, register=True, decision=why + " (no champion yet)")
    if champion.recovery is None:
        why = f"champion v{champion.version} could not be scored; keeping it"
        return Comparison(**facts, register=False, decision=why)
    figure = f"champion v{champion.version} ({champion.recovery:.4f}, {champion.basis})"
    if score <= champion.recovery:
        return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} does not beat {figure}")
    why = f"{METRIC} {score:.4f} beats the threshold {threshold:.4f}" + "".join(f", {b}" for b in beaten)
    return Comparison(**facts, register=True, decision=f"{why} and {figure}")
