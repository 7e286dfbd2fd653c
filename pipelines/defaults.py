"""The training recipe the pipeline defaults to (and so `invfold run`, which passes only what
the user sets): the trainer's own defaults, except where the demo recipe of the training
quality gate (tests/train/test_quality.py) differs: the `small` preset and a fixed time budget,
so the bundled sample trains to well above the constant predictor in a few minutes on 2 CPU
processes."""

from __future__ import annotations

from dataclasses import MISSING, fields

from invfold.components.train.config import TrainConfig

_TRAIN = {f.name: f.default for f in fields(TrainConfig) if f.default is not MISSING}

STRATEGY = _TRAIN["strategy"]
PRESET = "small"
MODEL_OVERRIDES: dict = {}
TOKENS_PER_BATCH = 1500
TIME_BUDGET_S = 180.0
LR = _TRAIN["lr"]
WARMUP_STEPS = 30
PRECISION = _TRAIN["precision"]
ZERO_STAGE = _TRAIN["zero_stage"]
SEED = _TRAIN["seed"]
THREADS = _TRAIN["threads"]
PROCS_PER_NODE = 2
REGISTERED_MODEL = "invfold-inverse-folding"
EXPERIMENT = "invfold"
TRAIN_RETRIES = 2
# fine-tuning from published weights (`invfold run --init-from` without --lr / --warmup-steps):
# a lower peak and a short warm-up, so the first steps do not undo the published weights
FINE_TUNE_LR = 3e-4
FINE_TUNE_WARMUP_STEPS = 20
