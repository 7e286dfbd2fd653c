"""A training setting is declared once, on its TrainConfig field: the parameters it adds to the
pipeline and to the train step's component are written from the fields marked
`option(pipeline=...)` by scripts/generate_signatures.py (`make generate`), their descriptions
come from the fields' help, their defaults from the default recipe, and a checkpoint's and a
run's records list the fields of their group."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import subprocess
import sys

import yaml

from invfold.components.launch.component import train_op
from invfold.components.train import recipes
from invfold.components.train.config import TrainConfig
from invfold.options import field_help, option, pipeline_default, pipeline_fields, pipeline_type
from invfold.pipelines import defaults
from invfold.pipelines.compile import COMMITTED_YAML
from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "generate_signatures.py"
KFP_TYPES = {str: "STRING", int: "NUMBER_INTEGER", float: "NUMBER_DOUBLE", bool: "BOOLEAN", dict: "STRUCT"}


def _generator():
    spec = importlib.util.spec_from_file_location("generate_signatures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_written_parameters_are_current():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_new_setting_is_written_into_every_signature_and_call():
    """A field marked as a pipeline parameter (here on a copy of TrainConfig) is the only edit:
    the generator writes it into the component's signature and train_options, and into the
    pipeline's signature and its call of the train step; nothing else changes."""
    extended = dataclasses.make_dataclass(
        "TrainConfig",
        [("dropout_rate", float, option(0.1, "dropout of every layer", min=0.0, below=1, pipeline=True))],
        bases=(TrainConfig,),
    )
    generator = _generator()
    added = {}
    for path, text in generator.expected(extended).items():
        diff = difflib.unified_diff(path.read_text().splitlines(), text.splitlines(), lineterm="", n=0)
        changed = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        if changed:
            added[path.relative_to(REPO).as_posix()] = changed
    assert added == {
        "components/launch/component.py": ["+    dropout_rate: float,", '+            "dropout_rate": dropout_rate,'],
        "pipelines/pipeline.py": [
            '+    dropout_rate: float = d.TRAIN["dropout_rate"],',
            "+            dropout_rate=dropout_rate,",
        ],
    }


def _root_parameters() -> dict:
    return next(yaml.safe_load_all(COMMITTED_YAML.read_text()))["root"]["inputDefinitions"]["parameters"]


def test_every_pipeline_setting_is_a_parameter_of_the_compiled_pipeline_and_of_the_train_step():
    """Type, default (the default recipe's) and description (the field's help) of each."""
    parameters = _root_parameters()
    values = recipes.recipe(recipes.DEFAULT).values()
    component_inputs = set(train_op.component_spec.inputs)
    for f, hint in pipeline_fields(TrainConfig):
        parameter = parameters[f.name]
        assert parameter["parameterType"] == KFP_TYPES[pipeline_type(hint)], f.name
        assert parameter["defaultValue"] == pipeline_default(hint, values[f.name]) == defaults.TRAIN[f.name], f.name
        assert parameter["description"] == f"{field_help(TrainConfig, f.name)}{f.metadata['pipeline']}.", f.name
        assert f.name in component_inputs


def test_the_pipeline_keeps_the_parameters_users_set():
    """`invfold run --warmup-steps 10` and the Kubeflow UI's form name these parameters."""
    parameters = _root_parameters()
    assert parameters["warmup_steps"] == {
        "defaultValue": recipes.recipe(recipes.DEFAULT).values()["warmup_steps"],
        "description": "Learning-rate warm-up steps.",
        "isOptional": True,
        "parameterType": "NUMBER_INTEGER",
    }
    assert parameters["max_steps"]["defaultValue"] == 0.0 and parameters["init_from"]["defaultValue"] == ""
    assert parameters["strategy"]["description"] == "Distributed training strategy: ddp, horovod or deepspeed."


def test_a_new_input_of_the_evaluate_step_reaches_its_component(tmp_path):
    """evaluate_step's keywords that the component does not bind from artifacts are its
    parameters: one added to the step (signature and `Args:` line) is written into the
    component's signature, docstring and call; one removed goes from all three."""
    generator = _generator()
    (component,) = generator.PASS_THROUGH
    op, step_path, step = generator.PASS_THROUGH[component]
    copy_component, copy_step = tmp_path / "component.py", tmp_path / "step.py"
    copy_component.write_text(component.read_text())
    step_text = step_path.read_text()
    step_text = step_text.replace("    experiment: str,\n) -> dict:", "    threads: int,\n) -> dict:", 1)
    step_text = step_text.replace(
        "        experiment: MLflow experiment name.\n", "        threads: CPU threads to score with.\n", 1
    )
    copy_step.write_text(step_text)
    generator.PASS_THROUGH = {copy_component: (op, copy_step, step)}
    text = generator.expected()[copy_component]
    diff = difflib.unified_diff(component.read_text().splitlines(), text.splitlines(), lineterm="", n=0)
    assert sorted(line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")) == [
        "+        threads: CPU threads to score with.",
        "+        threads=threads,",
        "+    threads: int,",
        "-        experiment: MLflow experiment name.",
        "-        experiment=experiment,",
        "-    experiment: str,",
    ]
