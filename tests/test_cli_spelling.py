"""What a mistake on the command line answers before any input is read: the subcommand's name,
the closest flag it has, ProteinMPNN's spelling of a flag answered with ours (or accepted as an
alias), the same `{"error", "exit_code"}` object under --json as every other mistake, and help
that lists only the exit codes the command can return."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from invfold.cli import build_parser, main


def _files(tmp_path) -> dict[str, str]:
    (tmp_path / "m.pt").write_bytes(b"PK\x03\x04 an archive")
    (tmp_path / "x.pdb").write_text("")
    return {"model": str(tmp_path / "m.pt"), "pdb": str(tmp_path / "x.pdb"), "tmp": str(tmp_path)}


def _mistake(argv: list[str], capsys) -> tuple[str, str]:
    assert main(argv) == 2
    out = capsys.readouterr()
    return out.out, out.err


def test_an_unknown_flag_names_the_subcommand_and_the_closest_flags(tmp_path):
    """A real `invfold` process, as a user meets it."""
    f = _files(tmp_path)
    argv = ["design", f["model"], f["pdb"], "--out", f"{f['tmp']}/d.fasta", "--temprature", "0.2"]
    proc = subprocess.run([sys.executable, "-m", "invfold", *argv], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    first = proc.stderr.splitlines()[0]
    assert first == "invfold design: error: unrecognized arguments: --temprature 0.2; did you mean --temperature?"


@pytest.mark.parametrize(
    "flag, answer",
    [
        ("--out_folder", "use --out FOLDER"),
        ("--pdb_path", "give the structure as the second argument"),
        ("--pdb_path_chains", "use --design-chains A,B"),
        ("--model_name", "e.g. invfold design proteinmpnn:v_48_020"),
        ("--save_probs", "use --save-probs"),
        ("--ca_only", "proteinmpnn-ca:v_48_020"),
        ("--use_soluble_model", "proteinmpnn-soluble:v_48_020"),
        ("--score_only", "invfold score MODEL STRUCTURE"),
        ("--batch_size", "no batch size"),
    ],
)
def test_proteinmpnns_flags_without_an_alias_are_answered_with_ours(flag, answer, tmp_path, capsys):
    f = _files(tmp_path)
    _, err = _mistake(["design", f["model"], f["pdb"], "--out", f"{f['tmp']}/d.fasta", flag, "1"], capsys)
    assert err.startswith(f"invfold design: error: {flag} is ProteinMPNN's; ") and answer in err.splitlines()[0]


def test_proteinmpnns_common_flags_are_aliases():
    parse = build_parser("design").parse_args
    args = parse(
        ["design", "m.pt", "x.pdb", "--out", "d.fa", "--num_seq_per_target", "8", "--sampling_temp", "0.1 0.2"]
        + ["--max_length", "500"]
    )
    assert (args.num_sequences, args.temperature, args.max_length) == (8, "0.1 0.2", 500)
    args = build_parser("score").parse_args(
        ["score", "m.pt", "x.pdb", "--out", "s.csv", "--num_seq_per_target", "4", "--batch_size", "2"]
    )
    assert (args.num_orders, args.batch_size) == (4, 2)


def test_proteinmpnns_model_name_points_to_the_published_weights(tmp_path, capsys):
    f = _files(tmp_path)
    _, err = _mistake(["design", "v_48_020", f["pdb"], "--out", f"{f['tmp']}/d.fasta"], capsys)
    assert err.startswith("invfold design: error: ") and "proteinmpnn:v_48_020" in err, err


@pytest.mark.parametrize(
    "line, expected",
    [
        ("design {model} {pdb} --out {tmp}/d.fasta --bogus", "unrecognized arguments: --bogus"),
        ("run --preset nope", "argument --preset: invalid choice: 'nope'"),
        ("design {model} {pdb}", "the following arguments are required: --out"),
        ("desing {model}", "invalid choice: 'desing'"),
    ],
)
def test_an_argparse_mistake_under_json_is_an_object_too(line, expected, tmp_path, capsys):
    out, err = _mistake(["--json", *line.format(**_files(tmp_path)).split()], capsys)
    result = json.loads(out)
    assert result["exit_code"] == 2 and expected in result["error"] and expected in err


def test_a_misspelt_subcommand_or_choice_suggests_the_closest(capsys):
    _, err = _mistake(["desing"], capsys)
    assert "did you mean 'design'?" in err
    _, err = _mistake(["run", "--strategy", "horvod"], capsys)
    assert err.startswith("invfold run: error: ") and "did you mean 'horovod'?" in err


def test_run_takes_designs_short_forms():
    args = build_parser("run").parse_args(["run", "--pipeline", "design", "-T", "0.2,0.3", "-n", "3"])
    assert (args.temperatures, args.num_sequences) == ("0.2,0.3", 3)
    args = build_parser("run").parse_args(["run", "--temperature", "0.5"])
    assert args.temperatures == "0.5"


@pytest.mark.parametrize(
    "command, codes",
    [("design", (0, 1, 2, 141)), ("score", (0, 1, 2, 141)), ("train", None)],  # None: every code
)
def test_help_lists_the_exit_codes_the_command_can_return(command, codes, capsys):
    from invfold.errors import EXIT_STATUS

    codes = codes or tuple(int(line.split()[0]) for line in EXIT_STATUS.splitlines()[1:])
    assert main([command, "--help"]) == 0
    status = capsys.readouterr().out.split("exit status:\n", 1)[1]
    assert [int(line.split()[0]) for line in status.splitlines() if line.strip()] == list(codes)
