"""Every subcommand's option defaults equal its config dataclass's defaults (one default per option)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from invfold.cli import build_parser
from invfold.components.design.design import DesignConfig
from invfold.components.evaluate.evaluate import EvaluateConfig
from invfold.components.export.onnx_export import ExportConfig
from invfold.components.prep.config import PrepConfig
from invfold.components.train.config import TrainConfig

# subcommand -> (config, option dest -> field where the names differ)
CONFIGS = {
    "prep": (PrepConfig, {"out": "output", "subset": "subset_files"}),
    "train": (
        TrainConfig,
        {"time_budget": "time_budget_s", "cpu_time_budget": "cpu_time_budget_s", "model": "model_overrides"},
    ),
    "evaluate": (EvaluateConfig, {"model": "model_path", "dataset": "datasets"}),
    "export": (
        ExportConfig,
        {"model": "model_path", "out": "out_path", "data": "parity_data", "chains": "parity_chains"},
    ),
    "design": (DesignConfig, {"fixed": "fixed_positions", "exclude": "excluded"}),
}


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_cli_defaults_equal_the_config_defaults(command):
    config, renames = CONFIGS[command]
    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    fields = {f.name: f for f in dataclasses.fields(config)}
    checked = 0
    for action in subparsers.choices[command]._actions:
        field = fields.get(renames.get(action.dest, action.dest))
        if field is None or (field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING):
            continue  # not a config field, or a required one
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        cli = action.default
        if isinstance(default, (tuple, list, dict)):  # repeatable options collect into a list
            cli, default = type(default)(cli or ()), default
        assert cli == default, (
            f"invfold {command} --{action.dest}: CLI {action.default!r}, {config.__name__} {default!r}"
        )
        checked += 1
    assert checked >= 3
