"""One handler for every subcommand: an error the project raises on purpose (InvfoldError) ends
`invfold` with `invfold <cmd>: error: <message>` on stderr and the error's exit code, never a
traceback; every error the project raises on purpose is an InvfoldError."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from invfold.cli import main
from invfold.components.export.onnx_export import ParityError
from invfold.components.launch.base import LaunchError
from invfold.components.launch.schema import ManifestError
from invfold.components.model.published import PublishedWeightsError
from invfold.components.tracking import TrackingError
from invfold.errors import ConfigError, InputError, InvfoldError
from invfold.pipelines.compile import SubmitError
from invfold.pipelines.local import PipelineFailed


@pytest.mark.parametrize(
    "error, code",
    [
        (ConfigError, 2),
        (InputError, 2),
        (PublishedWeightsError, 2),
        (ParityError, 1),
        (LaunchError, 1),
        (ManifestError, 1),
        (TrackingError, 1),
        (SubmitError, 1),
        (PipelineFailed, 1),
    ],
)
def test_every_deliberate_error_is_an_invfold_error_with_its_exit_code(error, code):
    assert issubclass(error, InvfoldError) and error.exit_code == code


REPO = Path(__file__).resolve().parents[1]
BUILTIN_RAISE = re.compile(r"raise (ValueError|RuntimeError|KeyError|FileNotFoundError|OSError|TypeError)\(")
# Guards against a programming mistake (a caller passing what the CLI and the configs never let
# through): a traceback is right there. Every other raise is an InvfoldError, reported in one line.
INTERNAL_GUARDS = {
    "components/model/network.py": 1,  # sampling temperature (DesignConfig checks it first)
    "components/protein/sampler.py": 5,  # sampler arguments (TrainConfig checks them first)
    "components/protein/complexes.py": 2,  # a complex built without chains or with repeated ids
    "components/protein/alphabet.py": 1,  # a KeyError the readers turn into InputError
    "components/design/thread.py": 1,  # a sequence threaded onto a record of another length
    "components/protein/synthetic.py": 6,  # the synthetic set's own arguments (tests and benches, no CLI)
    "pipelines/console.py": 1,  # TrainLimit built with negative numbers
    "components/prep/run.py": 1,  # the kernel's own error of an atomic folder swap, passed on as OSError
    "components/train/trainer.py": 1,  # a torn metrics line, caught on the next line and counted
    "components/evaluate/metrics.py": 1,  # bootstrap of per-chain recoveries (correct / count: finite by construction)
    "src/invfold/options.py": 5,  # a field without help, with clashing bounds, without a command-line or pipeline form
}


def test_every_deliberate_error_is_an_invfold_error():
    """No built-in exception raised on purpose outside the named internal guards: a user's mistake
    raised as ValueError would print a traceback instead of one line."""
    found = {}
    for folder in ("components", "pipelines", "src"):
        for path in sorted((REPO / folder).rglob("*.py")):
            count = len(BUILTIN_RAISE.findall(path.read_text()))
            if count:
                found[str(path.relative_to(REPO))] = count
    assert found == INTERNAL_GUARDS


def _files(tmp_path, line: str) -> dict[str, str]:
    """What the table's lines name: {tmp} a folder, {garbage} a file that is not a model,
    {archive} a file that starts like torch's archive (so only what comes after judges it),
    {oneshot} a real one-shot model (made only for the line that uses it), an empty x.pdb and a
    checkpoint folder with one complete checkpoint ({tmp}/ckpt)."""
    (tmp_path / "model.pt").write_bytes(b"not a model")
    (tmp_path / "archive.pt").write_bytes(b"PK\x03\x04 an archive")
    (tmp_path / "x.pdb").write_text("")
    (tmp_path / "ckpt" / "step-00000001").mkdir(parents=True, exist_ok=True)
    (tmp_path / "ckpt" / "step-00000001" / "COMPLETE").write_text("{}\n")
    files = {"tmp": str(tmp_path), "garbage": str(tmp_path / "model.pt"), "archive": str(tmp_path / "archive.pt")}
    for name, text in CONFIG_FILES.items():
        (tmp_path / name).write_text(text.format(**files))
    if "{oneshot}" in line:
        from invfold.components.model import InverseFoldingModel, ModelConfig, save_model

        save_model(tmp_path / "oneshot.pt", InverseFoldingModel(ModelConfig.preset("tiny", decoding="one_shot")))
        files["oneshot"] = str(tmp_path / "oneshot.pt")
    return files


# --config files the table's lines read (src/invfold/config_file.py), written by _files
CONFIG_FILES = {
    "typo.yaml": "data: {tmp}\nout: {tmp}/t\nmax_step: 3\n",
    "type.yaml": "data: {tmp}\nout: {tmp}/t\nmax_steps: many\n",
    "choice.yaml": "data: {tmp}\nout: {tmp}/t\nstrategy: mpi\nmax_steps: 3\n",
    "twice.yaml": "data: {tmp}\nout: {tmp}/t\nmax_steps: 3\nmax-steps: 4\n",
    "again.yaml": "data: {tmp}\nout: {tmp}/t\nmax_steps: 3\nlr: 0.1\nmax_steps: 4\n",
    "invalid.yaml": "data: {tmp}\nout: {tmp}/t\nmax_steps: 3\nlr: -1\n",
    "prep.yaml": "input: {tmp}/nothing\nout: {tmp}/p\n",
    "design.yaml": "model: {garbage}\nstructure: {tmp}/x.pdb\nout: {tmp}/d.fasta\ntemperature: 0\n",
    "null.yaml": "model_path: {archive}\ndata: null\nout: {tmp}/eval\n",
    "eval.yaml": "designs_per_protein: 1\n",
    "broken.yaml": "strategy: [ddp\npreset: small\n",
    "list.yaml": "- host\n- data\n",
}

CASES = [
    # a mistake in a --config file: one line naming the file, the line, the key and what was expected
    ("train --config {tmp}/typo.yaml", "typo.yaml:3: field 'max_step': expected an option of invfold train (did"),
    ("train --config {tmp}/type.yaml", "type.yaml:3: field 'max_steps': expected an integer, got \"many\""),
    ("train --config {tmp}/choice.yaml", "choice.yaml:3: field 'strategy': expected one of ddp, horovod, deepspeed"),
    ("train --config {tmp}/twice.yaml", "twice.yaml:4: field 'max-steps': expected one key per option"),
    ("train --config {tmp}/again.yaml", "again.yaml:5: field 'max_steps': expected one max_steps (also on line 3)"),
    (
        "train --config {tmp}/invalid.yaml",
        "invalid.yaml:4: field 'lr': expected a finite number in (0, 1.0], got -1.0",
    ),  # its bounds
    ("train --config {tmp}/none.yaml", "none.yaml: expected an existing YAML config file"),
    ("prep --config {tmp}/prep.yaml", "prep.yaml:1: field 'input': {tmp}/nothing: expected an existing protein set"),
    ("design --config {tmp}/design.yaml", "design.yaml:4: field 'temperature': expected one or more temperatures"),
    ("evaluate --config {tmp}/null.yaml", "null.yaml:2: field 'data': expected a string, got null"),
    (
        "evaluate {archive} --data {tmp} --out {tmp}/eval --config {tmp}/eval.yaml",
        "eval.yaml:1: field 'designs_per_protein': expected",
    ),
    ("run --config {tmp}/broken.yaml", "broken.yaml:2: expected valid YAML"),
    ("submit --config {tmp}/list.yaml", "list.yaml:1: expected a mapping of options"),
    # (subcommand line, text the message must contain): every subcommand's bad flags and inputs
    ("prep {tmp}/nothing --out {tmp}/p", "{tmp}/nothing: expected an existing protein set"),
    ("prep {tmp}/x.pdb --out {tmp}/p --min-length 0", "--min-length: expected an integer in [1, 100,000]"),
    ("prep {tmp}/x.pdb --out {tmp}/p --split-by nope", "argument --split-by: invalid choice: 'nope'"),
    ("prep {tmp}/x.pdb --out {tmp}/p --split-file {tmp}/none.json", "none.json: expected an existing split file"),
    ("evaluate {tmp}/missing.pt --data {tmp} --out {tmp}/eval", "missing.pt"),
    ("evaluate {garbage} --data {tmp} --out {tmp}/eval", "expected an invfold model file"),
    ("evaluate {archive} --data {tmp}/none --out {tmp}/eval", "expected an existing prepared folder"),
    ("evaluate {archive} --data {tmp} --out {tmp}/eval --designs-per-protein 1", "--designs-per-protein: expected"),
    ("evaluate nosuch:v1 --data {tmp} --out {tmp}/eval", "unknown published family 'nosuch'"),
    ("evaluate {tmp}/m.onnx --data {tmp} --out {tmp}/eval", "needs the PyTorch model"),
    ("design {garbage} {tmp}/x.pdb --out {tmp}/d.fasta -T 0", "--temperature: expected"),
    ("design {garbage} {tmp}/x.pdb --out {tmp}/d.fasta --fixed 5-2", "fixed positions"),
    ("design {tmp}/missing.pt {tmp}/x.pdb --out {tmp}/d.fasta", "missing.pt"),
    ("design {archive} {tmp}/none.pdb --out {tmp}/d.fasta", "none.pdb: expected an existing structure"),
    ("design {archive} {tmp}/x.pdb --out {tmp}/d.fasta --chain A --design-chains A,B", "--design-chains reads"),
    ("design {archive} {tmp}/x.pdb --out {tmp}/d.fasta --tied-positions {tmp}/t.json", "t.json: expected an existing"),
    ("design models:/just-a-name {tmp}/x.pdb --out {tmp}/d.fasta", "expected an MLflow model URI"),
    ("design {oneshot} {tmp}/x.pdb --out {tmp}/d.fasta --fixed 1-3", "one-shot model"),
    (
        "score {archive} {tmp}/x.pdb --out {tmp}/s.csv --num-orders 0",
        "--num-orders: expected an integer in [1, 100,000], got 0",
    ),
    ("score {archive} {tmp}/x.pdb --out {tmp}/s.csv --fasta {tmp}/none.fasta", "none.fasta: expected an existing"),
    ("score foo:bar {tmp}/x.pdb --out {tmp}/s.csv", "unknown published family 'foo'"),
    ("export {garbage} --out {tmp}/model.txt", "--out: expected a path ending in .onnx"),
    ("export {garbage} --out {tmp}/model.onnx", "expected an invfold model file"),
    ("export {archive} --out {tmp}/model.onnx --tolerance 0", "--tolerance: expected a finite number > 0"),
    ("train --data {tmp} --out {tmp}/t --zero-stage 2 --max-steps 1", "needs strategy 'deepspeed'"),
    ("train --data {tmp} --out {tmp}/t --model nonsense=1 --max-steps 1", "unknown ModelConfig fields ['nonsense']"),
    ("train --data {tmp} --out {tmp}/t --recipe full", "give --max-steps, --epochs, --time-budget-s or"),
    ("train --data {tmp} --out {tmp}/t", "index.json: expected an existing file"),  # before any process starts
    ("train --data {tmp}/none --out {tmp}/t --max-steps 1", "expected an existing prepared folder"),
    ("train --data {tmp} --out {tmp}/t --max-steps 1 --init-from {tmp}/m.onnx", "needs the PyTorch model"),
    ("train --data {tmp} --out {tmp}/t --max-steps 1 --checkpoint-dir {tmp}/ckpt --no-resume", "--no-resume: "),
    ("train --data {tmp} --out {tmp}/t --max-steps 1 --strategy nope", "argument --strategy: invalid choice"),
    (
        "train --data {tmp} --out {tmp}/t --max-steps 1 --init-from proteinmpnn:v_48_020 --preset small",
        "--preset small conflicts with --init-from proteinmpnn:v_48_020, whose architecture is preset proteinmpnn",
    ),
    ("weights import nosuch:v1 --out {tmp}/w.pt", "nosuch:v1"),
    ("run --preset nope", "argument --preset: invalid choice: 'nope'"),
    ("compile --pipeline nope", "argument --pipeline: invalid choice: 'nope'"),
    ("submit --host http://127.0.0.1:9 --data s3://b/x --param oops", "--param expects NAME=VALUE"),
    ("submit --host http://127.0.0.1:9 --data s3://b/x --zero-stage 7", "argument --zero-stage: invalid choice"),
]
# lines whose mistake is only found in the model itself (so torch is loaded), in the checkpoints,
# or in the prepared data's index (read through pyarrow's dataset module)
NEEDS_TORCH = {
    "design {oneshot} {tmp}/x.pdb --out {tmp}/d.fasta --fixed 1-3",
    "train --data {tmp} --out {tmp}/t --max-steps 1 --checkpoint-dir {tmp}/ckpt --no-resume",
    "train --data {tmp} --out {tmp}/t",
    "train --data {tmp} --out {tmp}/t --max-steps 1 --init-from proteinmpnn:v_48_020 --preset small",
}


def _words(line: str) -> list[str]:
    """The subcommand's words: "weights import", "train"."""
    return line.split()[:2] if line.startswith("weights") else line.split()[:1]


@pytest.mark.parametrize("line, expected", CASES, ids=[c[0].split()[0] + f"-{i}" for i, c in enumerate(CASES)])
def test_a_user_mistake_is_one_error_line_and_an_exit_code(line, expected, tmp_path, capsys):
    files = _files(tmp_path, line)
    argv = line.format(**files).split()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    first, *rest = err.splitlines()
    # one line naming the subcommand (argparse's own mistakes add one line: where to read more)
    assert first.startswith(f"invfold {' '.join(_words(line))}: error: "), err
    assert expected.format(**files) in first, err
    assert len(rest) <= 1 and "Traceback" not in err, err
    assert "Config." not in first and "Options." not in first, f"a dataclass field instead of a flag: {first}"


# What the CLI must not import to print help or reject a mistake (torch alone took 1.6-8 s
# and 343 MB on every `--help`); bench/cli_startup.py measures the time and memory this buys.
HEAVY = ("torch", "numpy", "mlflow", "kfp", "onnx", "onnxruntime", "pyarrow", "gemmi", "matplotlib", "scipy")
_PROBE = """
import json, sys
from invfold.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


def _probe(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


HELP_LINES = [
    "--help",
    *(f"{c} --help" for c in ("prep", "train", "evaluate", "export", "design", "score", "run", "compile", "submit")),
    "weights import --help",
    "weights list",
    "completion bash",  # every subcommand's options, still without torch
    "train --print-config",
]


@pytest.mark.parametrize("line", HELP_LINES)
def test_help_builds_without_the_heavy_libraries(line):
    found = _probe(line.split())
    assert found == {"code": 0, "heavy": []}, found


LIGHT_CASES = [c for c in CASES if c[0] not in NEEDS_TORCH]


@pytest.mark.parametrize(
    "line, expected", LIGHT_CASES, ids=[c[0].split()[0] + f"-{i}" for i, c in enumerate(LIGHT_CASES)]
)
def test_a_user_mistake_is_answered_without_the_heavy_libraries(line, expected, tmp_path):
    found = _probe(line.format(**_files(tmp_path, line)).split())
    assert found == {"code": 2, "heavy": []}, found


def test_logging_flags_after_the_subcommand(capsys):
    assert main(["weights", "list", "-q"]) == 0 and main(["weights", "list", "-v"]) == 0
    assert main(["-q", "weights", "list"]) == 0 and main(["--json", "-v", "weights", "list"]) == 0
    assert "proteinmpnn:v_48_020" in capsys.readouterr().out


def test_proteinmpnn_spellings_of_omitted_letters():
    """`--omit-aa C` means letters, as ProteinMPNN's --omit_AAs; the per-position file is --omit-aa-jsonl."""
    from invfold.cli import build_parser

    parse = build_parser("design").parse_args
    args = parse(["design", "m.pt", "x.pdb", "--out", "d.fa", "--omit-aa", "C", "--omit-aa-jsonl", "o.jsonl"])
    assert (args.excluded, args.omit_aa_jsonl) == ("C", "o.jsonl")
    args = parse(["design", "m.pt", "x.pdb", "--out", "d.fa", "--omit_AAs", "CW", "--omit_AA_jsonl", "p.jsonl"])
    assert (args.excluded, args.omit_aa_jsonl) == ("CW", "p.jsonl")


def test_fine_tuning_records_the_preset_that_runs(tmp_path):
    """MLflow once showed preset=small on a ProteinMPNN network: the recorded preset is the initial model's."""
    from invfold.components.launch.cli import record_initial_preset
    from invfold.components.train.config import TrainConfig

    cfg = TrainConfig(data=str(tmp_path), out=str(tmp_path / "t"), init_from="proteinmpnn:v_48_020", max_steps=1)
    assert cfg.preset != "proteinmpnn"
    record_initial_preset(cfg, preset_given=False)
    assert cfg.preset == "proteinmpnn"


def test_json_puts_one_object_on_stdout_and_the_lines_on_stderr(capsys):
    assert main(["weights", "list", "--json"]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert "proteinmpnn:v_48_020" in result["weights"] and result["exit_code"] == 0
    assert "proteinmpnn:v_48_020" in out.err  # what it prints without --json


@pytest.mark.parametrize("line, expected", [c for c in LIGHT_CASES if "argument " not in c[1]][:6])
def test_json_reports_a_mistake_as_an_object(line, expected, tmp_path, capsys):
    files = _files(tmp_path, line)
    assert main(["--json", *line.format(**files).split()]) == 2
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["exit_code"] == 2 and expected.format(**files) in result["error"]


def test_a_reader_that_went_away_ends_the_command_quietly_with_141():
    """`invfold completion bash | head -1`: head exits before the output is written. The pipe's read
    end is closed before the command starts, so every write fails (no race with a real head)."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "invfold", "completion", "bash"], stdout=write, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


def test_the_readmes_exit_status_table_is_the_help_text():
    from invfold.errors import EXIT_STATUS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", readme, re.M))
    for line in EXIT_STATUS.splitlines()[1:]:
        code, meaning = line.split(None, 1)
        assert rows.get(code, "").replace("\\|", "|") == meaning, code
