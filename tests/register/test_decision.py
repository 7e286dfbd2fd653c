"""The registration decision as a table of cases: a pure function over typed results, no MLflow."""

from __future__ import annotations

import pytest
from invfold.components.register.decision import Champion, Comparison, Evaluation, decide

DIGEST = "sha256:abc"


@pytest.mark.parametrize(
    "candidate, champion, tracking_down, register, decision",
    [
        (0.20, None, "", True, "test_recovery 0.2000 beats the threshold 0.1000 (no champion yet)"),
        (0.05, None, "", False, "test_recovery 0.0500 below the threshold 0.1000"),
        (
            0.25,
            Champion("3", 0.25, "recorded on the same data"),
            "",
            False,
            "test_recovery 0.2500 does not beat champion v3 (0.2500, recorded on the same data)",
        ),
        (
            0.30,
            Champion("3", 0.25, "recorded on the same data"),
            "",
            True,
            "test_recovery 0.3000 beats the threshold 0.1000 and champion v3 (0.2500, recorded on the same data)",
        ),
        (
            0.30,
            Champion("3", 0.35, "re-evaluated on this run's test data"),
            "",
            False,
            "test_recovery 0.3000 does not beat champion v3 (0.3500, re-evaluated on this run's test data)",
        ),
        (
            0.30,
            Champion("3", None, "no model.pt to evaluate"),
            "",
            False,
            "champion v3 could not be scored; keeping it",
        ),
        (
            0.90,
            None,
            "tracking server http://127.0.0.1:9 unreachable (refused)",
            False,
            "not registering: tracking server http://127.0.0.1:9 unreachable (refused)",
        ),
    ],
    ids=[
        "no-champion",
        "below-threshold",
        "ties-champion",
        "beats-champion",
        "champion-on-other-data-better",
        "champion-unscored",
        "tracking-down",
    ],
)
def test_decision(candidate, champion, tracking_down, register, decision):
    result = decide(Evaluation(candidate, DIGEST), 0.1, champion, tracking_down)
    assert (result.register, result.decision) == (register, decision)
    assert result.candidate == candidate and result.threshold == 0.1 and result.data_digest == DIGEST
    if champion is not None:
        assert (result.champion, result.champion_version, result.basis) == (
            champion.recovery,
            champion.version,
            champion.basis,
        )
    assert Comparison.from_dict(result.to_dict()) == result  # what the compare step hands to register


def test_evaluation_reads_evaluates_metrics():
    metrics = {"datasets": {"test": {"recovery": 0.21, "perplexity": 9.0}}, "data_digest": DIGEST}
    assert Evaluation.from_metrics(metrics) == Evaluation(0.21, DIGEST, {"test_recovery": 0.21, "test_perplexity": 9.0})
