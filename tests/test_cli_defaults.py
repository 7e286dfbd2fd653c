"""Every subcommand's options come from one place: its config dataclass (same name, default,
choices and help), plus, for run/submit, the compiled pipeline's parameters."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from invfold.cli import CompletionOptions, build_parser
from invfold.components.design.design import DesignConfig
from invfold.components.design.score import ScoreConfig
from invfold.components.evaluate.evaluate import EvaluateConfig
from invfold.components.export.onnx_export import ExportConfig
from invfold.components.launch.processes import LocalProcesses
from invfold.components.model.cli import WeightsImport
from invfold.components.model.reference import ModelSource
from invfold.components.prep.config import PrepConfig
from invfold.components.tracking import CommandTracking
from invfold.components.train import recipes
from invfold.components.train.config import TrainConfig
from invfold.options import cli_fields, negated_help, unmarked
from invfold.pipelines.cli import CompileOptions, RunOptions, SubmitOptions
from invfold.pipelines.parameters import DESIGN_OWN_OPTIONS, OWN_OPTIONS, pipeline_parameters

# subcommand -> the config dataclasses its options are generated from
CONFIGS = {
    "prep": (PrepConfig,),
    "train": (TrainConfig, LocalProcesses, CommandTracking),
    "evaluate": (EvaluateConfig, CommandTracking),
    "export": (ExportConfig, ModelSource),
    "design": (DesignConfig, CommandTracking),
    "score": (ScoreConfig, ModelSource),
    "run": (RunOptions,),
    "submit": (SubmitOptions,),
    "compile": (CompileOptions,),
    "weights import": (WeightsImport,),
    "weights list": (),
    "completion": (CompletionOptions,),
}
# the commands without a config file (--config, --print-config): nothing to set, or the script itself
WITHOUT_CONFIG_FILE = ("weights list", "completion")
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


LOGGING_FLAGS = ("verbose", "quiet", "json")  # -v/-q/--json, on every subcommand too (src/invfold/cli.py)
CONFIG_FILE_FLAGS = ("config", "print_config")  # src/invfold/config_file.py


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        and a.dest not in LOGGING_FLAGS + CONFIG_FILE_FLAGS
    ]


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_logging_flags_work_after_the_subcommand(command):
    flags = {s for a in _subcommands()[command]._actions if a.dest in LOGGING_FLAGS for s in a.option_strings}
    assert {"-v", "-q"} <= flags


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_every_command_with_options_reads_a_config_file(command):
    flags = {s for a in _subcommands()[command]._actions if a.dest in CONFIG_FILE_FLAGS for s in a.option_strings}
    assert flags == (set() if command in WITHOUT_CONFIG_FILE else {"--config", "--print-config"})


def test_every_subcommand_is_covered():
    assert set(_subcommands()) == set(CONFIGS)


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_options_are_the_config_fields_with_their_defaults(command):
    fields = {f.name: f for config in CONFIGS[command] for f, _ in cli_fields(config)}
    actions = {a.dest: a for a in _options(_subcommands()[command])}
    pipeline = _pipeline_flags(command) if command in PIPELINE_COMMANDS else set()
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
        text = field.metadata["help"].replace("%", "%%")
        assert action.help and (text in action.help or action.help.startswith(negated_help(text)))


def test_design_defaults_agree_where_they_once_did_not():
    action = {a.dest: a for a in _options(_subcommands()["design"])}["num_sequences"]
    assert action.default == DesignConfig.__dataclass_fields__["num_sequences"].default == 4
    assert "-n" in action.option_strings


def _pipeline_flags(command: str) -> set[str]:
    """Both pipelines' parameters, less those the command takes under options of its own."""
    design = set(pipeline_parameters("design")) - set(DESIGN_OWN_OPTIONS)
    return (set(pipeline_parameters()) | design) - set(OWN_OPTIONS[command])


@pytest.mark.parametrize("command", PIPELINE_COMMANDS)
def test_pipeline_commands_take_every_pipeline_parameter_unset_by_default(command):
    actions = {a.dest: a for a in _options(_subcommands()[command])}
    parameters = _pipeline_flags(command)
    assert parameters <= set(actions)
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for name in parameters:
        assert actions[name].default is None, name  # unset: the pipeline's own default
        assert actions[name].option_strings[0] == "--" + name.replace("_", "-")
        if name in train_fields and TrainConfig.__dataclass_fields__[name].metadata.get("choices"):
            assert tuple(actions[name].choices) == tuple(TrainConfig.__dataclass_fields__[name].metadata["choices"])
    assert tuple(actions["zero_stage"].choices) == (0, 1, 2, 3)  # from TrainConfig's Literal


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_every_help_ends_with_examples_and_the_exit_status(command):
    from invfold.errors import EXIT_STATUS

    text = _subcommands()[command].format_help()
    examples = text.split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert 1 <= len(examples) <= 4 and all(line.startswith(f"  invfold {command}") for line in examples), examples
    status = text.rstrip().split("\nexit status:\n", 1)[1].splitlines()  # the lines of the codes it can return
    assert status[:1] == EXIT_STATUS.splitlines()[1:2] and set(status) <= set(EXIT_STATUS.splitlines()[1:]), status
