"""TrainConfig validation and the token-budget sampler (no processes started)."""

from __future__ import annotations

import numpy as np
import pytest

from invfold.components.protein.sampler import TokenBudgetSampler
from invfold.components.train.config import TrainConfig

BASE = dict(data="prepared", out="out", max_steps=10)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(strategy="mpi"), "TrainConfig.strategy"),
        (dict(precision="fp16"), "TrainConfig.precision"),
        (dict(zero_stage=4, strategy="deepspeed"), "TrainConfig.zero_stage"),
        (dict(zero_stage=2), "needs strategy 'deepspeed'"),
        (dict(max_steps=None), "give max_steps, epochs, time_budget_s or cpu_time_budget_s"),
        (dict(max_steps=0), "TrainConfig.max_steps"),
        (dict(tokens_per_batch=0), "TrainConfig.tokens_per_batch"),
        (dict(grad_accum=0), "TrainConfig.grad_accum"),
        (dict(lr=0.0), "TrainConfig.lr"),
        (dict(label_smoothing=1.0), "TrainConfig.label_smoothing"),
        (dict(backbone_noise=-0.1), "TrainConfig.backbone_noise"),
        (dict(preset="huge"), "TrainConfig.preset"),
        (dict(schedule="one_cycle", max_steps=None, time_budget_s=60.0), "one_cycle"),
        (dict(out="s3://bucket/run"), "TrainConfig.out: expected a local folder"),
        (dict(strategy="deepspeed", checkpoint_dir="s3://bucket/ckpt"), "deepspeed writes checkpoints as local files"),
        (dict(time_budget_s=0.0), "TrainConfig.time_budget_s"),
        (dict(balance="random"), "TrainConfig.balance"),
    ],
)
def test_config_rejects(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{**BASE, **overrides})


def test_config_round_trips_through_json(tmp_path):
    cfg = TrainConfig(**BASE, strategy="deepspeed", zero_stage=3, model_overrides={"hidden": 64})
    cfg.to_json(str(tmp_path / "c.json"))
    again = TrainConfig.from_json(str(tmp_path / "c.json"))
    assert again == cfg
    assert again.checkpoint_dir == "out/checkpoints"
    assert again.model_config().hidden == 64


def test_config_file_with_unknown_field_names_it(tmp_path):
    (tmp_path / "c.json").write_text('{"data": "d", "out": "o", "max_steps": 1, "learning_rate": 1}')
    with pytest.raises(ValueError, match=r"c.json: unknown TrainConfig fields \['learning_rate'\]"):
        TrainConfig.from_json(str(tmp_path / "c.json"))


LENGTHS = np.random.default_rng(0).integers(30, 400, size=300)
LONG_SET = np.random.default_rng(1).integers(30, 500, size=3000)


def test_batches_fit_the_budget_cover_every_chain_and_stay_sorted_within():
    sampler = TokenBudgetSampler(LENGTHS, tokens_per_batch=1200, seed=1)
    batches = sampler.all_batches(0)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    for b in batches:
        assert len(b) * LENGTHS[b].max() <= 1200 or len(b) == 1
        assert list(LENGTHS[b]) == sorted(LENGTHS[b])
    padded = sum(len(b) * LENGTHS[b].max() for b in batches)
    assert padded / LENGTHS.sum() < 1.15  # bucketing keeps padding small


def test_a_chain_longer_than_the_budget_gets_a_batch_of_its_own():
    sampler = TokenBudgetSampler(np.array([50, 900, 60]), tokens_per_batch=200, shuffle=False)
    assert [1] in sampler.all_batches(0)


def test_epochs_are_deterministic_and_differ():
    a = TokenBudgetSampler(LENGTHS, 1200, seed=1)
    b = TokenBudgetSampler(LENGTHS, 1200, seed=1)
    assert a.all_batches(3) == b.all_batches(3)
    assert a.all_batches(3) != a.all_batches(4)


@pytest.mark.parametrize("balance", ["interleaved", "pairs"])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_get_equal_disjoint_shares(world_size, balance):
    shares = [
        TokenBudgetSampler(LENGTHS, 1200, rank=r, world_size=world_size, seed=2, balance=balance).rank_batches(0)
        for r in range(world_size)
    ]
    assert len({len(s) for s in shares}) == 1
    rows = [i for s in shares for b in s for i in b]
    assert len(rows) == len(set(rows))
    if balance == "interleaved":  # fewer than world_size chains wait for the next epoch
        assert 0 <= len(LENGTHS) - len(rows) < world_size
    else:
        dropped = len(TokenBudgetSampler(LENGTHS, 1200, seed=2).all_batches(0)) - sum(map(len, shares))
        assert 0 <= dropped < world_size


def test_iteration_resumes_from_a_position_across_epochs():
    sampler = TokenBudgetSampler(LENGTHS, 1200, rank=1, world_size=2, seed=4)
    stream = sampler.iterate(0, 0)
    taken = [next(stream) for _ in range(len(sampler.rank_batches(0)) + 5)]
    _, epoch, position = taken[9]
    resumed = sampler.iterate(epoch, position)
    assert [next(resumed) for _ in range(len(taken) - 10)] == taken[10:]
    assert taken[-1][1:] == (1, 5)


def test_too_few_batches_for_the_ranks_is_a_clear_error():
    with pytest.raises(ValueError, match="fewer than the 4 ranks"):
        TokenBudgetSampler(np.array([100, 100]), tokens_per_batch=1000, rank=0, world_size=4)


def _step_padding(world_size: int, balance: str, lengths=LENGTHS, budget=1200) -> list[list[int]]:
    samplers = [
        TokenBudgetSampler(lengths, budget, rank=r, world_size=world_size, seed=5, balance=balance)
        for r in range(world_size)
    ]
    steps = zip(*(s.rank_batches(0) for s in samplers), strict=True)
    return [[len(b) * lengths[b].max() for b in step] for step in steps]


def test_ranks_get_batches_of_similar_size_at_each_step():
    """Every step waits for the slowest rank: paired batches must be close in padded size."""
    ratios = [max(sizes) / min(sizes) for sizes in _step_padding(2, "pairs")]
    assert np.median(ratios) < 1.03  # about 1.08 when pairs are left to chance


@pytest.mark.parametrize("world_size", [2, 8])
def test_interleaved_steps_balance_padding_better_than_pairs(world_size):
    """Share of each step's padded work that the slowest rank's wait does not waste (mean/max)."""

    def efficiency(balance):
        steps = np.array(_step_padding(world_size, balance, LONG_SET), dtype=float)
        return steps.mean(axis=1).sum() / steps.max(axis=1).sum()

    assert efficiency("interleaved") > efficiency("pairs") > 0.95
    assert efficiency("interleaved") > 0.99


def test_interleaved_changes_nothing_for_one_process():
    a = TokenBudgetSampler(LENGTHS, 1200, seed=3, balance="interleaved").all_batches(2)
    assert a == TokenBudgetSampler(LENGTHS, 1200, seed=3, balance="pairs").all_batches(2)


def test_unknown_balance_is_refused():
    with pytest.raises(ValueError, match="TokenBudgetSampler.balance"):
        TokenBudgetSampler(LENGTHS, 1200, balance="random")
