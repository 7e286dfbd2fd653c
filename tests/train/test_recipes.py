"""Named recipes (components/train/recipes.py) and how `invfold train` applies them: a flag the user
types always wins, even when it equals the default recipe's value."""

from __future__ import annotations

import pytest

from invfold.cli import build_parser
from invfold.components.launch.cli import chosen_settings
from invfold.components.train import recipes
from invfold.components.train.config import TrainConfig
from invfold.errors import ConfigError
from invfold.options import from_args


def _config(*flags: str) -> TrainConfig:
    args = build_parser().parse_args(["train", "--data", "d", "--out", "o", *flags])
    return from_args(TrainConfig, args, **chosen_settings(args))


def test_invfold_train_starts_from_the_same_recipe_as_invfold_run():
    cfg = _config()
    assert recipes.DEFAULT == "cpu_demo"
    assert (cfg.preset, cfg.tokens_per_batch, cfg.warmup_steps, cfg.time_budget_s) == ("small", 1500, 30, 180.0)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (("--recipe", "full", "--epochs", "2"), {"preset": "default", "tokens_per_batch": 3000, "time_budget_s": None}),
        # typed values equal to the default recipe's still win over --recipe full
        (
            ("--recipe", "full", "--preset", "small", "--tokens-per-batch", "1500", "--epochs", "1"),
            {"preset": "small", "tokens_per_batch": 1500, "warmup_steps": 50},
        ),
        (
            (
                "--recipe",
                "quality_gate",
            ),
            {"max_steps": 120, "time_budget_s": None, "preset": "small"},
        ),
        (
            (
                "--init-from",
                "x.pt",
            ),
            {"lr": 3e-4, "warmup_steps": 20},
        ),
        (("--init-from", "x.pt", "--lr", "1e-3", "--warmup-steps", "30"), {"lr": 1e-3, "warmup_steps": 30}),
        (("--model", "hidden=32", "--no-resume"), {"model_overrides": {"hidden": 32}, "resume": False}),
    ],
)
def test_a_recipe_sets_what_the_user_did_not(flags, expected):
    cfg = _config(*flags)
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert type(cfg.tokens_per_batch) is int and type(cfg.lr) is float  # plain values, not parser marks


def test_recipes_name_only_trainconfig_fields_and_unknown_names_are_refused():
    with pytest.raises(ConfigError, match="not TrainConfig fields"):
        recipes.Recipe("bad", "x", {"learning_rate": 1.0})
    with pytest.raises(ConfigError, match="expected one of cpu_demo"):
        recipes.recipe("fast")
    for recipe in recipes.RECIPES.values():  # each builds a valid TrainConfig
        assert recipe.config(data="d", out="o", epochs=1).preset
