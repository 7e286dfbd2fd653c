"""The registration decision as a table of cases: a pure function over typed results, no MLflow.
Every figure compared is a validation recovery; test figures only travel along for the record."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from invfold.components.register.decision import (
    ALPHA,
    MIN_CHAINS,
    Champion,
    Comparison,
    Evaluation,
    StartingPoint,
    decide,
    paired_bootstrap,
)
from invfold.errors import ConfigError, InputError

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
            "validation_recovery 0.3000 beats the threshold 0.1000 and champion v3 (0.2500, recorded on the same data)"
            " beyond noise: lead +0.0500 > half-width 0.0100 of the candidate's 95% interval"
            " (the champion's figure has no per-chain values)",
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
            False,
            f"validation_recovery 0.4600 is above the starting weights {V48} (0.4500 on the same data) but within "
            "noise: lead +0.0100 <= half-width 0.0100 of the candidate's 95% interval (the starting weights' figure "
            "has no per-chain values)",
        ),
        (
            0.46,
            None,
            StartingPoint(V48, 0.44),
            "",
            True,
            f"validation_recovery 0.4600 beats the threshold 0.1000 and the starting weights {V48} "
            "(0.4400 on the same data) beyond noise (lead +0.0200 > half-width 0.0100 of the candidate's 95% "
            "interval (the starting weights' figure has no per-chain values)) (no champion yet)",
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
            StartingPoint(V48, 0.44),
            "",
            True,
            f"validation_recovery 0.4600 beats the threshold 0.1000, the starting weights {V48} "
            "(0.4400 on the same data) beyond noise (lead +0.0200 > half-width 0.0100 of the candidate's 95% "
            "interval (the starting weights' figure has no per-chain values)) and champion v3 (0.4000, recorded "
            "on the same data)"
            " beyond noise: lead +0.0600 > half-width 0.0100 of the candidate's 95% interval"
            " (the champion's figure has no per-chain values)",
        ),
        (
            0.46,
            Champion("3", 0.50, "recorded on the same data"),
            StartingPoint(V48, 0.44),
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
        "fine-tuned-within-noise-of-its-start",
        "fine-tuned-beats-its-start",
        "fine-tuned-beats-champion-not-its-start",
        "fine-tuned-beats-start-and-champion",
        "fine-tuned-beats-start-not-champion",
    ],
)
def test_decision(candidate, champion, start, tracking_down, register, decision):
    # test/recovery is never compared: a test figure cannot change the decision; the validation
    # interval (half-width 0.01) is the noise a champion without per-chain values is beaten beyond
    test_figures = {"test/recovery": 0.99, "validation/recovery_ci_low": 0.29, "validation/recovery_ci_high": 0.31}
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


def _chains(values) -> dict[str, float]:
    return {f"chain{i:03d}": float(v) for i, v in enumerate(values)}


def _paired(candidate_values, champion_values, metrics=None):
    """A candidate and a champion scored on the same validation chains, each figure its median."""
    candidate = Evaluation(float(np.median(candidate_values)), DIGEST, metrics or {}, _chains(candidate_values))
    champion = Champion("3", float(np.median(champion_values)), "re-evaluated on this run's validation data")
    return decide(candidate, 0.1, dataclasses.replace(champion, chains=_chains(champion_values)))


RNG = np.random.default_rng(7)
BASE = RNG.uniform(0.3, 0.5, 36)  # 36 validation chains, as the figures
NOISE = RNG.normal(0, 0.03, 36)  # two decoding-order draws of one model differ this much per chain


@pytest.mark.parametrize(
    "candidate_values, champion_values, register, says",
    [
        (BASE + 0.03 + NOISE / 3, BASE, True, "beyond noise: paired bootstrap over 36 validation chains"),
        (BASE + NOISE, BASE + 0.002, None, "within noise: paired bootstrap over 36 validation chains"),
        (BASE - 0.03, BASE, False, "does not beat champion v3"),
        ((BASE + 0.05)[:5], BASE[:5], False, f"within noise: 5 paired chains, fewer than {MIN_CHAINS}"),
        (BASE, BASE, False, "does not beat champion v3"),  # ties keep the champion
    ],
    ids=["clear-win", "within-noise", "clear-loss", "tiny-n", "ties"],
)
def test_paired_decision_table(candidate_values, champion_values, register, says):
    result = _paired(candidate_values, champion_values)
    if register is None:  # within noise: the median may lead, but never beyond noise
        assert not result.register
        if result.candidate > result.champion:
            assert says in result.decision and result.statistic["p"] >= ALPHA
    else:
        assert result.register == register and says in result.decision
    if result.statistic is not None and "p" in result.statistic:  # the record says why
        stat = result.statistic
        assert stat["n"] == len(candidate_values) and stat["alpha"] == ALPHA and stat["test"] == "paired bootstrap"
        assert f"p = {stat['p']:.4f}" in result.decision or stat["n"] < MIN_CHAINS
    assert Comparison.from_dict(result.to_dict()) == result


def test_within_noise_refuses_a_higher_median_the_old_gate_registered():
    """The fine-tuning 'win' of the issue (0.4505 -> 0.458 on 36 chains) inside per-chain noise:
    the candidate's median is higher, so the strict gate registered it; the paired test does not."""
    rng = np.random.default_rng(11)
    champion = rng.uniform(0.35, 0.55, 36)
    candidate = champion + rng.normal(0.0, 0.04, 36)
    result = _paired(candidate, champion)
    assert result.candidate > result.champion  # the old rule: register
    assert not result.register and "within noise" in result.decision and result.statistic["p"] >= ALPHA


def test_paired_decision_is_seeded():
    a, b = _paired(BASE + NOISE, BASE), _paired(BASE + NOISE, BASE)
    assert a.statistic == b.statistic and a.decision == b.decision


def test_without_per_chain_values_the_margin_is_the_candidates_interval():
    champion = Champion("3", 0.40, "recorded on the same data")
    wide = {"validation/recovery_ci_low": 0.35, "validation/recovery_ci_high": 0.47}  # half-width 0.06
    narrow = {"validation/recovery_ci_low": 0.40, "validation/recovery_ci_high": 0.42}  # half-width 0.01
    assert not decide(Evaluation(0.41, DIGEST, wide), 0.1, champion).register
    kept = decide(Evaluation(0.41, DIGEST, {}), 0.1, champion)
    assert not kept.register and "no per-chain values or interval" in kept.decision
    won = decide(Evaluation(0.42, DIGEST, narrow), 0.1, champion)
    assert won.register and "lead +0.0200 > half-width 0.0100" in won.decision


def test_non_finite_per_chain_values_are_refused_loudly():
    metrics = {
        "datasets": {"validation": {"recovery": 0.3}},
        "data_digest": DIGEST,
        "per_chain": {"validation": {"1abc.A": 0.3, "2xyz.B": float("nan")}},
    }
    with pytest.raises(InputError, match=r"run1/metrics.json: field 'per_chain.validation.2xyz.B'"):
        Evaluation.from_metrics(metrics, source="run1/metrics.json")
    with pytest.raises(InputError, match="finite"):
        paired_bootstrap({"a": 0.3}, {"a": float("inf")})


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), -0.1, 1.5])
def test_a_threshold_that_is_not_a_recovery_is_refused(threshold):
    """NaN compares false: `score < nan` never held, so every candidate was registered."""
    with pytest.raises(ConfigError, match=r"registration_threshold: expected a recovery in \[0, 1\]"):
        decide(Evaluation(0.05, DIGEST, {}), threshold, None)


@pytest.mark.parametrize(
    "lead, register, says",
    [
        (0.0001, False, "but within noise: paired bootstrap over 36 validation chains"),
        (0.03, True, "beyond noise (paired bootstrap over 36 validation chains"),
    ],
)
def test_the_starting_weights_are_beaten_beyond_noise_by_the_champions_paired_test(lead, register, says):
    """A fine-tune 0.0001 above its starting weights on every chain's noise is not registered; the
    same paired bootstrap (MIN_CHAINS, ALPHA) as against a champion decides."""
    start_values = BASE + NOISE
    candidate_values = BASE + lead + np.random.default_rng(11).normal(0, 0.03, 36)
    candidate = Evaluation(float(np.median(candidate_values)), DIGEST, {}, _chains(candidate_values))
    start = StartingPoint(V48, float(np.median(start_values)), _chains(start_values))
    if candidate.validation_recovery <= start.recovery:  # the paired test, not the medians, is the point
        candidate = dataclasses.replace(candidate, validation_recovery=start.recovery + 0.0001)
    result = decide(candidate, 0.1, None, starting_point=start)
    assert result.register is register and says in result.decision
    assert result.starting_statistic["test"] == "paired bootstrap" and result.starting_statistic["n"] == 36
    assert (result.starting_statistic["p"] < ALPHA) is register
    assert result.starting_statistic["min_chains"] == MIN_CHAINS
    assert Comparison.from_dict(result.to_dict()) == result
