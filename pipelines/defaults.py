"""The pipeline's parameter defaults (and so `invfold run`'s, which passes only what the user
sets): the default training recipe of components/train/recipes.py, read from there, plus what
belongs to the pipeline alone (processes, MLflow names, retries)."""

from __future__ import annotations

from invfold.components.train import recipes

_RECIPE = recipes.recipe(recipes.DEFAULT)
_TRAIN = _RECIPE.values()

STRATEGY = _TRAIN["strategy"]
PRESET = _TRAIN["preset"]
MODEL_OVERRIDES: dict = dict(_TRAIN["model_overrides"])
TOKENS_PER_BATCH = _TRAIN["tokens_per_batch"]
TIME_BUDGET_S = _TRAIN["time_budget_s"]
LR = _TRAIN["lr"]
WARMUP_STEPS = _TRAIN["warmup_steps"]
PRECISION = _TRAIN["precision"]
ZERO_STAGE = _TRAIN["zero_stage"]
SEED = _TRAIN["seed"]
THREADS = _TRAIN["threads"]
PROCS_PER_NODE = _RECIPE.procs_per_node
REGISTERED_MODEL = "invfold-inverse-folding"
EXPERIMENT = "invfold"
TRAIN_RETRIES = 2
