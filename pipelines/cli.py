"""`invfold run | compile | submit`: the pipeline locally, as YAML, or on Kubeflow.

Training options left unset take the pipeline's defaults (pipelines/defaults.py), the one place
they are kept."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from invfold import __version__
from invfold.errors import ConfigError
from invfold.options import add_command, from_args, option
from invfold.pipelines.parameters import add_pipeline_options, check_parameters, given_parameters, pipeline_parameters

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "run": "run the whole pipeline locally (KFP local runner, MLflow in ./runs)",
    "compile": "write the pipeline YAML for Kubeflow",
    "submit": "submit the pipeline to Kubeflow Pipelines",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "run": (
        "invfold run                                  # the bundled sample, MLflow in runs/mlflow.db",
        "invfold run --data chain_set.jsonl.gz --split-file chain_set_splits.json --time-budget-s 300",
        "invfold run --pipeline design --model models:/invfold-inverse-folding@champion --data structures/",
        "invfold run --recipe full --max-steps 300 --print-config > run.yaml; invfold run --config run.yaml",
    ),
    "compile": (
        "invfold compile --registry registry.acme.example/invfold --tag 0.1.0",
        "invfold compile --pipeline design",
    ),
    "submit": (
        "invfold submit --host https://kubeflow.example.com/pipeline --data s3://bucket/chain_set.jsonl.gz",
        "invfold submit --host URL --namespace team-a --data s3://b/set.jsonl.gz --nodes 2 --nproc 8 --gpus-per-node 8",
        "invfold submit --host URL --pipeline design --data s3://b/pdbs/ --model models:/invfold-inverse-folding/3",
    ),
}


PIPELINES = ("train", "design")
PIPELINE_HELP = "train: prep, train, evaluate, register; design: designs for --data from a registered model (--model)"
MODEL_HELP = (
    "--pipeline design: the registered model, models:/NAME@ALIAS or models:/NAME/VERSION "
    "(default: models:/REGISTERED_MODEL_NAME@champion"
)


@dataclass
class RunOptions:
    """Where `invfold run` runs the pipeline on this machine, and what it shows."""

    data: str | None = option(
        None, "protein set path or URI; the structures to design with --pipeline design (default: the bundled sample)"
    )
    pipeline: str = option("train", PIPELINE_HELP, choices=PIPELINES)
    model: str | None = option(None, MODEL_HELP + ", what `invfold run` registered)")
    runs_dir: str = option("runs", "where pipeline outputs, checkpoints and mlflow.db go")
    tracking_uri: str | None = option(None, "MLflow tracking URI (default: sqlite:///RUNS_DIR/mlflow.db)")
    cache: bool = option(True, "reuse prep's output when its inputs are unchanged (--no-cache: run it again)")
    show_logs: bool = option(
        False, "show every step's whole output live (it always goes to RUNS_DIR/logs/)", aliases=("--verbose",)
    )


@dataclass
class CompileOptions:
    """Which pipeline `invfold compile` writes, where, and the image its steps name."""

    out: str | None = option(
        None, "the YAML file to write (default: pipelines/invfold_pipeline.yaml, or pipelines/design_pipeline.yaml)"
    )
    pipeline: str = option(
        "train",
        "train: prep, train, evaluate, register; design: designs from a registered model",
        choices=("train", "design"),
    )
    registry: str | None = option(None, "image registry prefix (default: registry.example.com/invfold, a placeholder)")
    tag: str | None = option(None, "image tag (default: the package version)")
    digest: str | None = option(
        None,
        "pin the runtime image to this digest (sha256:<64 hex>): every step runs REGISTRY/invfold-runtime:TAG@DIGEST",
    )
    pull_secret: list[str] = option(
        factory=list,
        metavar="NAME",
        help="a Secret every step pulls its image with (kfp-kubernetes set_image_pull_secrets); repeat for more",
    )

    def __post_init__(self):
        if self.digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", self.digest):
            raise ConfigError(f"--digest: expected sha256: and 64 lowercase hex digits, got {self.digest!r}")
        for name in self.pull_secret:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
                raise ConfigError(
                    f"--pull-secret: expected a Secret name (lowercase letters, digits, '-', '.'), got {name!r}"
                )


@dataclass
class SubmitOptions:
    """Where `invfold submit` sends the pipeline, as whom, and on which data."""

    host: str = option(help="KFP API endpoint, e.g. https://kubeflow.example.com/pipeline")
    data: str = option(
        help="protein set URI the cluster can read (s3://, gs://, https://); with --pipeline design, the structures"
    )
    pipeline: str = option("train", PIPELINE_HELP, choices=PIPELINES)
    model: str | None = option(None, MODEL_HELP + ")")
    token: str | None = option(None, "bearer token (default: KFP_TOKEN env, else kubeconfig / in-cluster)")
    namespace: str | None = option(None, "Kubeflow profile namespace (multi-user)")
    package: str | None = option(
        None, "compiled YAML (default: the committed pipelines/invfold_pipeline.yaml, or design_pipeline.yaml)"
    )
    registry: str | None = option(
        None,
        "registry of the runtime image every step runs in (REGISTRY/invfold-runtime:TAG, as pushed by "
        "scripts/build_images.sh): replaces the package's; needed while it names the placeholder "
        "registry.example.com/invfold",
    )
    tag: str | None = option(None, "tag of that image (default: the package version)")
    kfp_experiment: str = option("invfold", "KFP experiment")
    run_name: str | None = option(None, "KFP run name")
    param: list[str] = option(
        factory=list,
        metavar="NAME=VALUE",
        help="any pipeline parameter (VALUE as JSON when it parses), e.g. storage_root=s3://b/p",
    )


def add_parser(subparsers) -> None:
    run = add_command(
        subparsers,
        "run",
        run_command,
        RunOptions,
        help=COMMANDS["run"],
        description="Run fingerprint -> prep -> train -> evaluate -> compare -> register on this machine "
        "through KFP's local runner, on the bundled sample data unless --data is given.",
    )
    add_pipeline_options(run, "run")
    run.set_defaults(resolve_defaults=pipeline_defaults)  # --print-config shows what unset ones run with
    add_command(
        subparsers,
        "compile",
        compile_command,
        CompileOptions,
        help=COMMANDS["compile"],
        description="Compile the pipeline; every step names the runtime image REGISTRY/invfold-runtime:TAG.",
    )
    sub = add_command(
        subparsers,
        "submit",
        submit_command,
        SubmitOptions,
        help=COMMANDS["submit"],
        description="Submit the compiled pipeline with kfp.Client (token or the kubeconfig's credentials).",
    )
    add_pipeline_options(sub, "submit")
    sub.set_defaults(resolve_defaults=pipeline_defaults)


def pipeline_defaults(args: argparse.Namespace) -> dict:
    """What each pipeline parameter left unset runs with: --recipe's value (as `given_parameters`
    sets it), else the compiled pipeline's default (what `--print-config` shows, commented)."""
    recipe = given_parameters(args)
    found = {}
    for pipeline in ("train", "design"):
        for name, spec in pipeline_parameters(pipeline).items():
            if hasattr(args, name) and getattr(args, name) is None and name not in found:
                default = spec.get("defaultValue")
                if spec["parameterType"] == "NUMBER_INTEGER" and default is not None:
                    default = int(default)
                found[name] = recipe.get(name, default)
    return found


def design_parameters(args: argparse.Namespace, model: str | None, structures: str) -> dict:
    """The design pipeline's parameters: those given, the structures, and the registered model
    that --model names (or --registered-model-name / --model-name, at its champion)."""
    from invfold.components.model.reference import registered_model

    params = given_parameters(args, "design")
    params["structures"] = structures
    if model is not None:
        params["model_name"], params["model_version"] = registered_model(model, "--model")
    elif getattr(args, "registered_model_name", None):
        params["model_name"] = args.registered_model_name
    return params


def run_command(args: argparse.Namespace) -> int:
    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    opts = from_args(RunOptions, args)
    if opts.pipeline == "design":
        return run_design_command(args, opts)
    if opts.model is not None:
        raise ConfigError("--model names the registered model of --pipeline design (training: --init-from)")
    from invfold.pipelines.local import run_local

    params = given_parameters(args)
    params["data_uri"] = opts.data or str(SAMPLE_CHAIN_SET)
    if opts.data is None:
        params.setdefault("split_file", str(SAMPLE_SPLITS))
    from rich.console import Console

    console = Console(file=sys.stdout, highlight=False)
    console.print(f"invfold run: fingerprint -> prep -> train -> evaluate -> compare -> register ({opts.runs_dir}/)")
    estimate = run_estimate(params)
    console.print(estimate["line"], soft_wrap=True)
    result = run_local(
        params,
        runs_dir=opts.runs_dir,
        tracking_uri=opts.tracking_uri,
        cache=opts.cache,
        console=console,
        verbose=opts.show_logs or args.verbose,
    )
    console.print(summary_table(result))
    for line in next_steps(result):  # plain lines: no console width ever breaks a command or a URL
        print(line, flush=True)
    keys = ("run_folder", "tracking_uri", "experiment", "mlflow_run_id", "registered_model", "registered_version")
    args.result = {"pipeline": "train", **{k: getattr(result, k) for k in keys}, "wall_s": result.wall_s}
    args.result["estimate_s"] = estimate["seconds"]
    args.result |= {"test": result.figures("evaluate"), "decision": result.figures("compare").get("decision")}
    return 0


def run_estimate(params: dict) -> dict:
    """The run's estimate before it starts (pipelines/estimate.py): {"line": what is printed,
    "seconds": the steps that can be told, summed (None when none of training is known)}."""
    from invfold.pipelines import defaults
    from invfold.pipelines.estimate import chain_set_size, estimate_line, step_seconds

    budget = float(params["time_budget_s"] if "time_budget_s" in params else defaults.TIME_BUDGET_S or 0)
    size = chain_set_size(params["data_uri"], params.get("split_file") or None)
    seconds = step_seconds(size, budget)
    total = round(sum(v for v in seconds.values() if v is not None), 1) if None not in seconds.values() else None
    return {"line": estimate_line(size, budget, int(params.get("max_steps") or 0)), "seconds": total}


def run_design_command(args: argparse.Namespace, opts: RunOptions) -> int:
    """The design pipeline on this machine, shown as the training pipeline is: what runs, one line
    per step (the runner's own output goes to the log file), then where the designs are."""
    from rich.console import Console

    from invfold.data import SAMPLE_CHAIN_SET
    from invfold.pipelines import defaults
    from invfold.pipelines.estimate import chain_set_size, design_estimate_line, design_step_seconds
    from invfold.pipelines.local import run_design_local

    params = design_parameters(args, opts.model, opts.data or str(SAMPLE_CHAIN_SET))
    version = params.get("model_version", "champion")
    reference = f"models:/{params.get('model_name', defaults.REGISTERED_MODEL)}"
    reference += f"/{version}" if str(version).isdigit() else f"@{version}"
    console = Console(file=sys.stdout, highlight=False)
    console.print(
        f"invfold run --pipeline design: fetch-model -> plan-shards -> design-shard (each shard) -> "
        f"gather-designs, {reference} on {params['structures']} ({opts.runs_dir}/)",
        soft_wrap=True,
    )
    size = chain_set_size(params["structures"])  # a chain set; a folder or a list: not counted
    given = {k: spec.get("defaultValue") for k, spec in pipeline_parameters("design").items()} | params
    designs = int(given["num_sequences"]) * len(str(given["temperatures"]).replace(",", " ").split())
    console.print(design_estimate_line(size, designs), soft_wrap=True)
    result = run_design_local(
        params,
        runs_dir=opts.runs_dir,
        tracking_uri=opts.tracking_uri,
        console=console,
        verbose=opts.show_logs or args.verbose,
    )
    gathered = result.gathered()
    model = gathered.get("model", {})
    run_id = result.mlflow_run_id or "not recorded"
    lines = [
        f"design pipeline finished in {result.wall_s:.0f} s: {gathered.get('designs', '?')} designs of "
        f"{gathered.get('structures_designed', '?')} structures, {len(gathered.get('skipped', []))} skipped",
        f"  model:      {reference} (version {model.get('version', '?')})",
        f"  designs:    {_gathered_file(result, 'designs.jsonl')}",
        f"  report:     {_gathered_file(result, 'report')}",
        f"  MLflow run: {run_id} (experiment {result.experiment!r}) at {result.tracking_uri}",
        f"  full log:   {result.log_file}",
    ]
    for line in lines:  # plain lines: no console width ever breaks a path
        print(line, flush=True)
    args.result = {"pipeline": "design", "run_folder": result.run_folder, "mlflow_run_id": result.mlflow_run_id}
    args.result["estimate_s"] = round(sum(design_step_seconds(size, designs).values()), 1) if size else None
    args.result |= {"tracking_uri": result.tracking_uri, "experiment": result.experiment, "wall_s": result.wall_s}
    return 0


def _gathered_file(result, name: str) -> str:
    """The gather step's output `name` under the run folder (the folder when not found)."""
    found = sorted(Path(result.run_folder).glob(f"gather-designs*/**/{name}")) if result.run_folder else []
    return str(found[-1]) if found else str(result.run_folder)


def summary_table(result) -> object:
    """The run's figures in one table: test figures against the constant predictor, the
    champion decision (what to type next follows it: next_steps)."""
    from rich.table import Table

    def fmt(value) -> str:
        return f"{value:.4f}" if isinstance(value, float) else ("-" if value is None else str(value))

    evaluation, compare = result.figures("evaluate"), result.figures("compare")
    compute = sum(t["compute_s"] for t in result.timings)
    title = f"invfold run finished in {result.wall_s:.0f} s ({compute:.0f} s the steps' own compute)"
    table = Table(title=title, show_header=False)
    table.add_column("", style="bold")
    table.add_column("", overflow="fold")
    table.add_row(
        "test median recovery",
        f"{fmt(evaluation.get('test_recovery'))} (constant predictor {fmt(evaluation.get('constant_recovery'))})",
    )
    table.add_row("test perplexity", fmt(evaluation.get("test_perplexity")))
    table.add_row("champion decision", str(compare.get("decision", "not made this run")))
    table.add_row(
        "registered model",
        f"{result.registered_model} version {result.registered_version}"
        if result.registered_version
        else f"{result.registered_model}: not registered this run",
    )
    table.add_row("MLflow run", f"{result.mlflow_run_id or 'not recorded'} (experiment {result.experiment!r})")
    return table


def tool(name: str) -> str:
    """How to type this venv's command `name`: bare when the venv's bin folder is on PATH, else
    its path (relative when under the current folder: `.venv/bin/invfold`)."""
    bin_dir = Path(sys.prefix) / "bin"
    on_path = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if any(p.exists() and p.resolve() == bin_dir.resolve() for p in on_path):
        return name
    return shlex_path(bin_dir / name)


def shlex_path(path) -> str:
    """A path as typed in a shell: relative to the current folder when under it, quoted if needed."""
    path = Path(path).absolute()
    try:
        text = str(path.relative_to(Path.cwd()))
    except ValueError:
        text = str(path)
    return shlex.quote(text)


def next_steps(result) -> list[str]:
    """What to type after a run, as plain lines to copy: activating the venv when its commands are
    not on PATH, the MLflow UI and its page, designing with the champion (a bundled test chain, so
    the command runs as printed), where the artifacts and the log are."""
    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    lines = ["", "next:"]
    if tool("invfold") != "invfold":
        lines.append(f"  # the venv is not active: its commands as below, or first: source {tool('activate')}")
    command, _, url = result.ui_command().partition(", then open ")
    if url:
        ui = f"  {tool('mlflow')} {command.removeprefix('mlflow ')}"
        lines += [f"  # the run in MLflow's UI (then open {url})", ui]
    else:
        lines.append(f"  # the run in MLflow's UI: {command.removeprefix('open ')}")
    champion = getattr(result, "champion_version", None)
    if champion:
        with open(SAMPLE_SPLITS) as fh:
            chain = json.load(fh)["test"][0]
        model = f"models:/{result.registered_model}@champion"
        design = [tool("invfold"), "design", model, shlex_path(SAMPLE_CHAIN_SET), "--name", chain, "-n", "4"]
        design += ["--out", "designs.fasta", "--tracking-uri", shlex.quote(result.tracking_uri)]
        lines += [
            f"  # design with the champion (version {champion}) on the bundled test chain {chain}",
            "  " + " ".join(design),
        ]
    else:
        lines.append(f"  # no champion of {result.registered_model} yet: nothing to design with")
    lines += [
        f"  # artifacts: {result.run_folder or result.pipeline_root}",
        f"  # the whole run's output: {result.log_file}",
    ]
    return lines


def compile_command(args: argparse.Namespace) -> int:
    from invfold.pipelines.compile import compile_pipeline
    from invfold.runtime import DEFAULT_REGISTRY, runtime_image

    opts = from_args(CompileOptions, args)
    registry, tag = opts.registry or DEFAULT_REGISTRY, opts.tag or __version__
    out = opts.out or f"pipelines/{'invfold' if opts.pipeline == 'train' else 'design'}_pipeline.yaml"
    image = runtime_image(registry, tag, opts.digest)
    compile_pipeline(out, registry, tag, pipeline=opts.pipeline, digest=opts.digest, pull_secrets=opts.pull_secret)
    secrets = f", pulled with {', '.join(opts.pull_secret)}" if opts.pull_secret else ""
    print(f"wrote {out} (steps run in {image}{secrets})")
    args.result = {"out": out, "image": image, "pull_secrets": opts.pull_secret}
    return 0


def submit_command(args: argparse.Namespace) -> int:
    from invfold.pipelines.compile import COMMITTED_DESIGN_YAML, submit

    opts = from_args(SubmitOptions, args)
    if opts.pipeline == "design":
        params = design_parameters(args, opts.model, opts.data)
    elif opts.model is not None:
        raise ConfigError("--model names the registered model of --pipeline design (training: --init-from)")
    else:
        params = given_parameters(args)
        params["data_uri"] = opts.data
    for item in opts.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--param expects NAME=VALUE, got {item!r}")
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
        except RecursionError:
            raise ConfigError(f"--param {name}: VALUE nested deeper than the JSON parser's limit") from None
    check_parameters(params, opts.pipeline)  # --param values follow the same rules as the flags
    result = submit(
        opts.host,
        params,
        package=opts.package or (str(COMMITTED_DESIGN_YAML) if opts.pipeline == "design" else None),
        experiment=opts.kfp_experiment,
        run_name=opts.run_name,
        token=opts.token or os.environ.get("KFP_TOKEN"),
        namespace=opts.namespace,
        registry=opts.registry,
        tag=opts.tag,
    )
    print(f"submitted run {result['run_id']}: {result['url']}")
    args.result = {"pipeline": opts.pipeline, **result}
    return 0
