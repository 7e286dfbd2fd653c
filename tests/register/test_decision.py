"""The registration decision as a table of cases: a pure function over typed results, no MLflow.
Every figure compared is a validation recovery; test figures only travel along for the record."""

from __future__ import annotations

import pytest

from invfold.components.register.decision import Champion, Comparison, Evaluation, StartingPoint, decide
from invfold.errors import InputError

DIGEST = "sha256:abc"
V48 = "proteinmpnn:v_48_020"


@pytest.mark.parametrize(
    "candidate, champion, start, tracking_down, register, decision",
    [
        (0.20, None, None, "", True, "validation_recovery 0.2000 beats the threshold 0.1000 (no champion yet)"),
        (0.05, None, None, "", False, "validation_recovery 0.0500 below the threshold 0.1000"),
        (
            0.25,
            Champion("3", 0.25, "recorded on the same data"),
            None,
            "",
            False,
            "validation_recovery 0.2500 does not beat champion v3 (0.2500, recorded on the same data)",
        ),
        (
            0.30,
            Champion("3", 0.25, "recorded on the same data"),
            None,
            "",
            True,
            "validation_recovery 0.3000 beats the threshold 0.1000 and champion v3 (0.2500, recorded on the same data)",
        ),
        (
            0.30,
            Champion("3", 0.35, "re-evaluated on this run's validation data"),
            None,
            "",
            False,
            "validation_recovery 0.3000 does not beat champion v3 (0.3500, re-evaluated on this run's validation data)",
        ),
        (
            0.30,
            Champion("3", None, "no model.pt to evaluate"),
            None,
            "",
            False,
            "champion v3 could not be scored; keeping it",
        ),
        (
            0.90,
            None,
            None,
            "tracking server http://127.0.0.1:9 unreachable (refused)",
            False,
            "not registering: tracking server http://127.0.0.1:9 unreachable (refused)",
        ),
        (
            0.45,
            None,
            StartingPoint(V48, 0.45),
            "",
            False,
            f"validation_recovery 0.4500 does not beat the starting weights {V48} (0.4500 on the same data)",
        ),
        (
            0.46,
            None,
            StartingPoint(V48, 0.45),
            "",
            True,
            f"validation_recovery 0.4600 beats the threshold 0.1000 and the starting weights {V48} "
            "(0.4500 on the same data) (no champion yet)",
        ),
        (
            0.46,
            Champion("3", 0.40, "recorded on the same data"),
            StartingPoint(V48, 0.47),
            "",
            False,
            f"validation_recovery 0.4600 does not beat the starting weights {V48} (0.4700 on the same data)",
        ),
        (
            0.46,
            Champion("3", 0.40, "recorded on the same data"),
            StartingPoint(V48, 0.45),
            "",
            True,
            f"validation_recovery 0.4600 beats the threshold 0.1000, the starting weights {V48} "
            "(0.4500 on the same data) and champion v3 (0.4000, recorded on the same data)",
        ),
        (
            0.46,
            Champion("3", 0.50, "recorded on the same data"),
            StartingPoint(V48, 0.45),
            "",
            False,
            "validation_recovery 0.4600 does not beat champion v3 (0.5000, recorded on the same data)",
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
        "fine-tuned-ties-its-start",
        "fine-tuned-beats-its-start",
        "fine-tuned-beats-champion-not-its-start",
        "fine-tuned-beats-start-and-champion",
        "fine-tuned-beats-start-not-champion",
    ],
)
def test_decision(candidate, champion, start, tracking_down, register, decision):
    test_figures = {"test/recovery": 0.99}  # never compared: a test figure cannot change the decision
    result = decide(Evaluation(candidate, DIGEST, test_figures), 0.1, champion, tracking_down, starting_point=start)
    assert (result.register, result.decision) == (register, decision)
    assert result.candidate == candidate and result.threshold == 0.1 and result.data_digest == DIGEST
    assert result.metric == "validation_recovery" and result.metrics == test_figures
    if champion is not None:
        assert (result.champion, result.champion_version, result.basis) == (
            champion.recovery,
            champion.version,
            champion.basis,
        )
    if start is not None:
        assert (result.init_from, result.starting_point) == (start.init_from, start.recovery)
    assert Comparison.from_dict(result.to_dict()) == result  # what the compare step hands to register


def test_evaluation_reads_validation_recovery_and_keeps_test_figures_for_the_record():
    metrics = {
        "datasets": {
            "test": {"recovery": 0.21, "perplexity": 9.0},
            "validation": {"recovery": 0.18, "perplexity": 9.5},
        },
        "data_digest": DIGEST,
    }
    evaluation = Evaluation.from_metrics(metrics)
    assert evaluation == Evaluation(
        0.18,
        DIGEST,
        {"test/recovery": 0.21, "test/perplexity": 9.0, "validation/recovery": 0.18, "validation/perplexity": 9.5},
    )
    assert evaluation.test_recovery == 0.21


@pytest.mark.parametrize("validation", [None, {"recovery": float("nan")}, {"perplexity": 3.0}])
def test_an_evaluation_without_a_validation_recovery_is_a_clear_error(validation):
    datasets = {"test": {"recovery": 0.21}}
    if validation is not None:
        datasets["validation"] = validation
    with pytest.raises(InputError, match=r"run1/metrics.json: field 'datasets.validation.recovery': .*never on test"):
        Evaluation.from_metrics({"datasets": datasets, "data_digest": DIGEST}, source="run1/metrics.json")
