"""`invfold run | compile | submit`: the pipeline locally, as YAML, or on Kubeflow.

Training options left unset take the pipeline's defaults (pipelines/defaults.py), the one place
they are kept."""

from __future__ import annotations

import argparse
import json
import sys

from .parameters import add_pipeline_options, given_parameters


def add_parser(subparsers) -> None:
    run = subparsers.add_parser(
        "run",
        help="run the whole pipeline locally (KFP local runner, MLflow in ./runs)",
        description="Run fingerprint -> prep -> train -> evaluate -> compare -> register on this machine "
        "through KFP's local runner, on the bundled sample data unless --data is given.",
    )
    run.add_argument("--data", help="protein set path or URI (default: the bundled sample)")
    run.add_argument("--runs-dir", default="runs", help="where pipeline outputs, checkpoints and mlflow.db go")
    run.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///RUNS_DIR/mlflow.db)")
    run.add_argument("--no-cache", action="store_true", help="run prep even when its inputs are unchanged")
    run.add_argument(
        "--verbose",
        dest="show_logs",
        action="store_true",
        help="show every step's whole output live (it always goes to RUNS_DIR/logs/)",
    )
    add_pipeline_options(run, "run")
    run.set_defaults(func=run_command)

    comp = subparsers.add_parser(
        "compile",
        help="write the pipeline YAML for Kubeflow",
        description="Compile the pipeline; every step names the runtime image REGISTRY/invfold-runtime:TAG.",
    )
    comp.add_argument("--out", default="pipelines/invfold_pipeline.yaml")
    comp.add_argument("--registry", help="image registry prefix (default: registry.example.com/invfold, a placeholder)")
    comp.add_argument("--tag", help="image tag (default: the package version)")
    comp.set_defaults(func=compile_command)

    sub = subparsers.add_parser(
        "submit",
        help="submit the pipeline to Kubeflow Pipelines",
        description="Submit the compiled pipeline with kfp.Client (token or the kubeconfig's credentials).",
    )
    sub.add_argument("--host", required=True, help="KFP API endpoint, e.g. https://kubeflow.example.com/pipeline")
    sub.add_argument("--token", help="bearer token (default: KFP_TOKEN env, else kubeconfig / in-cluster)")
    sub.add_argument("--namespace", help="Kubeflow profile namespace (multi-user)")
    sub.add_argument("--package", help="compiled YAML (default: the committed pipelines/invfold_pipeline.yaml)")
    sub.add_argument("--kfp-experiment", default="invfold", help="KFP experiment")
    sub.add_argument("--run-name")
    sub.add_argument("--data", required=True, help="protein set URI the cluster can read (s3://, gs://, https://)")
    sub.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other pipeline parameter (VALUE as JSON when it parses), e.g. storage_root=s3://b/p",
    )
    add_pipeline_options(sub, "submit")
    sub.set_defaults(func=submit_command)


def run_command(args: argparse.Namespace) -> int:
    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    from .local import run_local

    params = given_parameters(args)
    params["data_uri"] = args.data or str(SAMPLE_CHAIN_SET)
    if args.data is None:
        params.setdefault("split_file", str(SAMPLE_SPLITS))
    from rich.console import Console

    console = Console(file=sys.stdout, highlight=False)
    console.print(f"invfold run: fingerprint -> prep -> train -> evaluate -> compare -> register ({args.runs_dir}/)")
    result = run_local(
        params,
        runs_dir=args.runs_dir,
        tracking_uri=args.tracking_uri,
        cache=not args.no_cache,
        console=console,
        verbose=args.show_logs or args.verbose,
    )
    console.print(summary_table(result))
    return 0


def summary_table(result) -> object:
    """The run in one table: test figures against the constant predictor, the champion
    decision, where to look."""
    from rich.table import Table

    def fmt(value) -> str:
        return f"{value:.4f}" if isinstance(value, float) else ("-" if value is None else str(value))

    evaluation, compare = result.figures("evaluate"), result.figures("compare")
    compute = sum(t["compute_s"] for t in result.timings)
    table = Table(title=f"invfold run finished in {result.wall_s:.0f} s ({compute:.0f} s the steps' own compute)")
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
    table.add_row("MLflow UI", result.ui_command())
    table.add_row("artifacts", str(result.run_folder or result.pipeline_root))
    table.add_row("full log", str(result.log_file))
    return table


def compile_command(args: argparse.Namespace) -> int:
    from invfold import __version__

    from .compile import compile_pipeline
    from invfold.runtime import DEFAULT_REGISTRY, runtime_image

    registry, tag = args.registry or DEFAULT_REGISTRY, args.tag or __version__
    compile_pipeline(args.out, registry, tag)
    print(f"wrote {args.out} (steps run in {runtime_image(registry, tag)})")
    return 0


def submit_command(args: argparse.Namespace) -> int:
    import os

    from invfold.errors import ConfigError

    from .compile import submit

    params = given_parameters(args)
    params["data_uri"] = args.data
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--param expects NAME=VALUE, got {item!r}")
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    result = submit(
        args.host,
        params,
        package=args.package,
        experiment=args.kfp_experiment,
        run_name=args.run_name,
        token=args.token or os.environ.get("KFP_TOKEN"),
        namespace=args.namespace,
    )
    print(f"submitted run {result['run_id']}: {result['url']}")
    return 0
