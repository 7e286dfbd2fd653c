"""The pipeline's parameters on the command line (`invfold run`, `invfold submit`).

A parameter has the name of the option it sets (TrainConfig's `preset`, `threads`, `max_steps`,
...; the launcher's `procs_per_node`), and its flag is that name (`--max-steps`). Type, help and
default come from the compiled pipeline (its signature and docstring, in invfold_pipeline.yaml),
choices from the config field it sets, so nothing here restates them. `RENAMED` is the one table
of parameters whose step input has another name."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from functools import cache

from invfold.components.train.config import TrainConfig
from invfold.errors import ConfigError
from invfold.options import check_value, choices_of, field_types, from_pipeline

# pipeline parameter -> the step input it becomes, where the two names differ. The pipeline's
# parameters share one flat form in the Kubeflow UI beside KFP's own (experiment, run name), so
# the ones that belong to another system carry its name there; the steps take the short name.
RENAMED = {
    "mlflow_tracking_uri": "tracking_uri",
    "mlflow_experiment": "experiment",
    "registration_threshold": "threshold",
    "registered_model_name": "model_name",
    "trainer_runtime_kind": "runtime_kind",
}
# earlier flag spellings, still accepted
FLAG_ALIASES = {
    "procs_per_node": ("--nproc",),
    "time_budget_s": ("--time-budget",),
    "registration_threshold": ("--threshold",),
    "mlflow_experiment": ("--experiment",),
    "registered_model_name": ("--model-name",),
    # the design pipeline's, as `invfold design` spells them
    "temperatures": ("-T", "--temperature"),
    "num_sequences": ("-n",),
}
# parameters the commands take under an option of their own (--data; run's --tracking-uri)
OWN_OPTIONS = {"run": ("data_uri", "mlflow_tracking_uri"), "submit": ("data_uri",)}
# the design pipeline's (`--pipeline design`): the structures are --data, the registered model is
# --model models:/NAME@ALIAS (or /VERSION); its other parameters that the training pipeline also
# has (seed, threads, mlflow_*) share that flag
DESIGN_OWN_OPTIONS = ("structures", "model_name", "model_version")
_TYPES = {"STRING": str, "NUMBER_INTEGER": int, "NUMBER_DOUBLE": float, "STRUCT": json.loads, "LIST": json.loads}


@cache
def pipeline_parameters(pipeline: str = "train") -> dict[str, dict]:
    """name -> the compiled pipeline's definition (parameterType, description, defaultValue);
    pipeline "train" (invfold_pipeline.yaml) or "design" (design_pipeline.yaml)."""
    import yaml

    from invfold.pipelines.compile import COMMITTED_DESIGN_YAML, COMMITTED_YAML

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(COMMITTED_YAML if pipeline == "train" else COMMITTED_DESIGN_YAML) as fh:
        text = fh.read()
    # only the top-level `root:` block (a quarter of the file): `invfold run --help` reads it
    start = text.find("\nroot:\n")
    if start >= 0:
        block = text[start + 1 :]
        end = re.search(r"^\S", block[len("root:") :], re.MULTILINE)
        text = block[: len("root:") + end.start()] if end else block
    spec = next(yaml.load_all(text, Loader=loader))
    return spec["root"]["inputDefinitions"]["parameters"]


def _choices(name: str) -> tuple | None:
    """The choices of the config field the parameter sets, if it has any."""
    hints = field_types(TrainConfig)
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    return choices_of(fields[name], hints[name]) if name in fields else None


def add_pipeline_options(parser: argparse.ArgumentParser, command: str) -> None:
    """A flag per pipeline parameter (unset: the pipeline's default): `--recipe`, the training
    pipeline's, then the design pipeline's that the training pipeline has not."""
    from invfold.components.train import recipes

    group = parser.add_argument_group("pipeline parameters (unset: the pipeline's defaults)")
    group.add_argument(
        "--recipe",
        choices=tuple(recipes.RECIPES),
        default=None,
        help=recipes.help_text().replace("%", "%%") + "; the flags below override its fields",
    )
    added: set[str] = set()
    for name, spec in pipeline_parameters().items():
        if name not in OWN_OPTIONS[command]:
            added.add(name)
            _add_parameter(group, name, spec)
    group = parser.add_argument_group("design pipeline parameters (--pipeline design; unset: its defaults)")
    for name, spec in pipeline_parameters("design").items():
        if name not in DESIGN_OWN_OPTIONS and name not in added and name not in OWN_OPTIONS[command]:
            _add_parameter(group, name, spec)


def _add_parameter(group, name: str, spec: dict) -> None:
    help_text = spec["description"].replace("%", "%%")
    if spec["parameterType"] == "BOOLEAN":  # a switch: given sets it, absent keeps the pipeline's default
        kwargs = dict(dest=name, default=None, action="store_const", const=True, help=help_text)
        group.add_argument("--" + name.replace("_", "-"), *FLAG_ALIASES.get(name, ()), **kwargs)
        return
    kind = _TYPES[spec["parameterType"]]
    if "defaultValue" in spec:
        default = int(spec["defaultValue"]) if kind is int else spec["defaultValue"]
        help_text += f" (pipeline default: {json.dumps(default)})"
    kwargs = dict(dest=name, default=None, type=kind, help=help_text)
    if kind is json.loads:
        kwargs["metavar"] = "JSON"
    choices = _choices(name)
    if choices is not None:
        kwargs["choices"] = choices
    group.add_argument("--" + name.replace("_", "-"), *FLAG_ALIASES.get(name, ()), **kwargs)


def check_parameters(params: dict, pipeline: str = "train") -> None:
    """Refuse (ConfigError naming the field, which the CLI shows as its flag) a parameter value
    the config field it sets would refuse: a pipeline parameter follows its field's option() rules
    (bounds, finite floats, choices), checked here before a run is started rather than in the
    step that builds the config. The training pipeline's parameters named as TrainConfig fields;
    the design pipeline's num_sequences, seed and temperatures (DesignConfig)."""
    from invfold.components.design.config import DesignConfig, parse_temperatures

    if pipeline == "train":
        fields = {f.name for f in dataclasses.fields(TrainConfig)}
        for name, value in from_pipeline(TrainConfig, params).items():  # max_steps 0: not limited
            if name in fields:
                check_value(TrainConfig, name, value)
        threshold = params.get("registration_threshold")
        if threshold is not None and not (
            isinstance(threshold, (int, float)) and 0 <= threshold <= 1
        ):  # NaN too: every candidate would pass it
            raise ConfigError(f"--registration-threshold: expected a recovery in [0, 1], got {threshold!r}")
        return
    for name in ("num_sequences", "seed"):
        if name in params:
            check_value(DesignConfig, name, params[name])
    if "temperatures" in params:  # the parameter's name is not the field's
        try:
            parse_temperatures(params["temperatures"])
        except ConfigError as err:
            raise ConfigError(str(err).replace("DesignConfig.temperature", "--temperatures")) from None


def given_parameters(args: argparse.Namespace, pipeline: str = "train") -> dict:
    """The parameters of `pipeline` set on the command line. Training: on top of `--recipe`
    where it is not the pipeline's own (its fields that are pipeline parameters; None -> 0 or "", the
    pipeline's "unset"); with --init-from (fine-tuning), recipes.FINE_TUNE where --lr /
    --warmup-steps are not given."""
    from invfold.components.train import recipes

    names = pipeline_parameters(pipeline)
    params = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    check_parameters(params, pipeline)
    if pipeline != "train":
        return params
    name = getattr(args, "recipe", None) or recipes.DEFAULT
    base = recipes.recipe(name).values() if name != recipes.DEFAULT else {}
    if params.get("init_from"):
        base = recipes.fine_tuning(base, given=set(params))
    for field, value in base.items():
        if field in names and field not in params:
            # None is the pipeline's "unset": "" for a text parameter (KFP refuses 0 there), else 0
            params[field] = ("" if names[field]["parameterType"] == "STRING" else 0) if value is None else value
    return params
