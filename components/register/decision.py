"""Whether a candidate model is registered: a pure function over typed results.

The compare step gathers the facts (the candidate's evaluation, the champion and its score, the
tracking server's state) and `decide` turns them into a `Comparison`: register only when the
candidate reaches the threshold and beats the champion scored on the same test data. Nothing
here touches MLflow or files, so every case is a table row in tests/register/test_decision.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

METRIC = "test_recovery"  # median per-protein recovery on the test split; higher is better


@dataclass(frozen=True)
class Evaluation:
    """What the decision reads from the candidate's evaluation (evaluate's metrics.json)."""

    test_recovery: float
    data_digest: str
    test_metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # test_* figures, for the record

    @classmethod
    def from_metrics(cls, metrics: dict) -> Evaluation:
        from invfold.components.evaluate.step import scalar_metrics

        figures = {k: v for k, v in scalar_metrics(metrics).items() if k.startswith("test_")}
        return cls(float(metrics["datasets"]["test"]["recovery"]), str(metrics["data_digest"]), figures)


@dataclass(frozen=True)
class Champion:
    """The registered version holding the `champion` alias. `recovery` is its test recovery on
    the candidate's test data (None: it could not be scored); `basis` says how it was obtained."""

    version: str
    recovery: float | None
    basis: str


@dataclass(frozen=True)
class Comparison:
    """The compare step's result: both figures, how the champion's was obtained, the decision."""

    candidate: float
    threshold: float
    data_digest: str
    register: bool
    decision: str
    champion: float | None = None
    champion_version: str | None = None
    basis: str = "no champion"
    metric: str = METRIC
    test_metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Comparison:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def decide(candidate: Evaluation, threshold: float, champion: Champion | None, tracking_down: str = "") -> Comparison:
    """`tracking_down`: why the tracking server cannot be used ("" when it can); a model that
    cannot be recorded is not registered."""
    score = candidate.test_recovery
    facts = dict(
        candidate=score, threshold=threshold, data_digest=candidate.data_digest, test_metrics=candidate.test_metrics
    )
    if champion is not None:
        facts.update(champion=champion.recovery, champion_version=champion.version, basis=champion.basis)
    if tracking_down:
        return Comparison(**facts, register=False, decision=f"not registering: {tracking_down}")
    if score < threshold:
        return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} below the threshold {threshold:.4f}")
    if champion is None:
        why = f"{METRIC} {score:.4f} beats the threshold {threshold:.4f} (no champion yet)"
        return Comparison(**facts, register=True, decision=why)
    if champion.recovery is None:
        why = f"champion v{champion.version} could not be scored; keeping it"
        return Comparison(**facts, register=False, decision=why)
    figure = f"champion v{champion.version} ({champion.recovery:.4f}, {champion.basis})"
    if score <= champion.recovery:
        return Comparison(**facts, register=False, decision=f"{METRIC} {score:.4f} does not beat {figure}")
    why = f"{METRIC} {score:.4f} beats the threshold {threshold:.4f} and {figure}"
    return Comparison(**facts, register=True, decision=why)
