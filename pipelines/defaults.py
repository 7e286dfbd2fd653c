"""The pipeline's parameter defaults (and so `invfold run`'s, which passes only what the user
sets): the default training recipe of components/train/recipes.py, read from there, plus what
belongs to the pipeline alone (processes, MLflow names, retries)."""

from __future__ import annotations

from invfold.components.train import recipes
from invfold.components.train.config import TrainConfig
from invfold.options import pipeline_default, pipeline_fields

_RECIPE = recipes.recipe(recipes.DEFAULT)
_TRAIN = _RECIPE.values()

# TrainConfig's pipeline parameters (option(pipeline=...)) -> their defaults: the recipe's values,
# None as the parameter type's empty value (0, "")
TRAIN: dict = {f.name: pipeline_default(hint, _TRAIN[f.name]) for f, hint in pipeline_fields(TrainConfig)}
TIME_BUDGET_S = TRAIN["time_budget_s"]
PROCS_PER_NODE = _RECIPE.procs_per_node
REGISTERED_MODEL = "invfold-inverse-folding"
EXPERIMENT = "invfold"
TRAIN_RETRIES = 2
