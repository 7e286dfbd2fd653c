"""Every subcommand's options come from one place: its config dataclass (same name, default,
choices and help), plus, for run/submit, the compiled pipeline's parameters."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from invfold.cli import build_parser
from invfold.components.design.design import DesignConfig
from invfold.components.design.score import ScoreConfig
from invfold.components.evaluate.evaluate import EvaluateConfig
from invfold.components.export.onnx_export import ExportConfig
from invfold.components.launch.processes import LocalProcesses
from invfold.components.model.cli import WeightsImport
from invfold.components.prep.config import PrepConfig
from invfold.components.train import recipes
from invfold.components.train.config import TrainConfig
from invfold.options import cli_fields, unmarked
from invfold.pipelines.cli import CompileOptions, RunOptions, SubmitOptions
from invfold.pipelines.parameters import OWN_OPTIONS, pipeline_parameters

# subcommand -> the config dataclasses its options are generated from
CONFIGS = {
    "prep": (PrepConfig,),
    "train": (TrainConfig, LocalProcesses),
    "evaluate": (EvaluateConfig,),
    "export": (ExportConfig,),
    "design": (DesignConfig,),
    "score": (ScoreConfig,),
    "run": (RunOptions,),
    "submit": (SubmitOptions,),
    "compile": (CompileOptions,),
    "weights import": (WeightsImport,),
    "weights list": (),
}
PIPELINE_COMMANDS = ("run", "submit")
RECIPE_COMMANDS = ("train", *PIPELINE_COMMANDS)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every (sub)subcommand by its words: "prep", ..., "weights import"."""
    found = {}
    for name, parser in _subparsers(build_parser()).items():
        if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            found.update({f"{name} {sub}": p for sub, p in _subparsers(parser).items()})
        else:
            found[name] = parser
    return found


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def test_every_subcommand_is_covered():
    assert set(_subcommands()) == set(CONFIGS)


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_options_are_the_config_fields_with_their_defaults(command):
    fields = {f.name: f for config in CONFIGS[command] for f, _ in cli_fields(config)}
    actions = {a.dest: a for a in _options(_subcommands()[command])}
    pipeline = set(pipeline_parameters()) - set(OWN_OPTIONS[command]) if command in PIPELINE_COMMANDS else set()
    recipe = {"recipe"} if command in RECIPE_COMMANDS else set()  # a set of field values, not a field
    assert set(actions) == set(fields) | pipeline | recipe, (
        "an option restated outside its config, or a field not on the CLI"
    )
    starts_from = recipes.recipe(recipes.DEFAULT).values() if command == "train" else {}
    for name, field in fields.items():
        action = actions[name]
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            assert action.required or not action.option_strings, f"invfold {command}: {name} is required"
            continue
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        default = starts_from.get(name, default)
        cli = unmarked(action.default)
        if isinstance(default, (tuple, list, dict)) and action.nargs != 3:  # repeatable: collected into a list
            cli = type(default)(cli or ())
        assert cli == default, f"invfold {command} {name}: CLI {action.default!r}, config {default!r}"
        # one name: the option is the field's name (older spellings follow as aliases)
        assert action.option_strings[0] in ("--" + name.replace("_", "-"), "--no-" + name.replace("_", "-"))
        assert action.help and field.metadata["help"].replace("%", "%%") in action.help


def test_design_defaults_agree_where_they_once_did_not():
    action = {a.dest: a for a in _options(_subcommands()["design"])}["num_sequences"]
    assert action.default == DesignConfig.__dataclass_fields__["num_sequences"].default == 4
    assert "-n" in action.option_strings


@pytest.mark.parametrize("command", PIPELINE_COMMANDS)
def test_pipeline_commands_take_every_pipeline_parameter_unset_by_default(command):
    actions = {a.dest: a for a in _options(_subcommands()[command])}
    parameters = set(pipeline_parameters()) - set(OWN_OPTIONS[command])
    assert parameters <= set(actions)
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for name in parameters:
        assert actions[name].default is None, name  # unset: the pipeline's own default
        assert actions[name].option_strings[0] == "--" + name.replace("_", "-")
        if name in train_fields and TrainConfig.__dataclass_fields__[name].metadata.get("choices"):
            assert tuple(actions[name].choices) == tuple(TrainConfig.__dataclass_fields__[name].metadata["choices"])
    assert tuple(actions["zero_stage"].choices) == (0, 1, 2, 3)  # from TrainConfig's Literal
