"""`invfold design`'s option files (--bias-aa, --bias-by-res, --omit-aa-jsonl, --tied-positions,
--fixed-positions-json, --pssm-jsonl, --chain-id-jsonl) and every command's --config YAML are read
as the data files are: nested past the parser's limit, binary, or malformed (NaN, a string, a list
where an object belongs), a file is one error line naming it (exit 2) before anything is designed,
never a RecursionError or UnicodeDecodeError traceback, and never a skip of every record of a
batch that exits 0 with 0 designs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from invfold.cli import main

DEEP = "[" * 100_000 + "]" * 100_000
BINARY = bytes(range(256)) * 4  # not UTF-8, not JSON
# flag -> malformed contents (a few per flag; file suffix .json or .jsonl), for entry "s0", chain "B"
MALFORMED = {
    "--bias-aa": [
        (".json", DEEP),
        (".jsonl", '{"A": ' + DEEP + "}\n"),
        (".json", BINARY),
        (".json", '{"A": NaN}'),
        (".json", '{"A": "strong"}'),
        (".json", "[1, 2]"),
        (".jsonl", '{"J": 1.0}\n'),
    ],
    "--bias-by-res": [
        (".jsonl", json.dumps({"s0": {"B": "high"}}) + "\n"),
        (".jsonl", json.dumps({"s0": {"B": [[float("nan")] * 21]}}) + "\n"),
        (".json", BINARY),
    ],
    "--omit-aa-jsonl": [
        (".jsonl", json.dumps({"s0": {"B": [[[1], "JZ"]]}}) + "\n"),
        (".jsonl", json.dumps({"s0": "ACD"}) + "\n"),
        (".jsonl", DEEP + "\n"),
    ],
    "--tied-positions": [
        (".jsonl", json.dumps({"s0": {"B": [1]}}) + "\n"),
        (".jsonl", json.dumps({"s0": [{"B": [[1, 2], [1.0, float("inf")]]}]}) + "\n"),
        (".json", DEEP),
    ],
    "--fixed-positions-json": [
        (".jsonl", json.dumps({"s0": {"B": [True]}}) + "\n"),
        (".jsonl", "[]\n"),
        (".jsonl", ""),
    ],
    "--pssm-jsonl": [
        (".jsonl", BINARY),
        (
            ".jsonl",
            json.dumps({"s0": {"B": {"pssm_coef": [2.0], "pssm_bias": [[0] * 21], "pssm_log_odds": [[0] * 21]}}}),
        ),
    ],
}
CASES = [(flag, suffix, content) for flag, cases in MALFORMED.items() for suffix, content in cases]


def write(path, content):
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    return str(path)


def one_line_error(capsys, code: int, path: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and err.startswith("invfold design: error: ") and path in err, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("flag, suffix, content", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_malformed_option_file_fails_the_batch_in_one_line(
    tmp_path, structures, model, capsys, flag, suffix, content
):
    _, _, pdbs = structures
    path = write(tmp_path / f"option{suffix}", content)
    out = tmp_path / "designs"
    code = main(["design", str(model[0]), str(pdbs), "--out", str(out), flag, path])
    one_line_error(capsys, code, path)
    assert not out.exists()  # refused before anything was designed or written


@pytest.mark.parametrize("content", [DEEP, BINARY, json.dumps({"s0": [["B"]]}), json.dumps({"s0": [[], ["B"]]})])
def test_a_malformed_chain_id_file_is_one_line(tmp_path, structures, model, capsys, content):
    _, _, pdbs = structures
    path = write(tmp_path / "chains.jsonl", content)
    out = tmp_path / "d.fasta"
    code = main(["design", str(model[0]), str(pdbs / "s0.pdb"), "--out", str(out), "--chain-id-jsonl", path])
    one_line_error(capsys, code, path)
    assert not out.exists()


def test_the_line_and_entry_are_named(tmp_path, structures, model, capsys):
    _, _, pdbs = structures
    path = write(
        tmp_path / "tied.jsonl", json.dumps({"other": [{"B": [1, 2]}]}) + "\n" + json.dumps({"s0": {"B": [1]}})
    )
    code = main(["design", str(model[0]), str(pdbs), "--out", str(tmp_path / "o"), "--tied-positions", path])
    assert f"{path}:2: field 's0': expected a list of {{chain: positions}} groups" in one_line_error(capsys, code, path)


def test_a_well_formed_file_without_a_records_entry_is_still_that_records_skip(tmp_path, structures, model, capsys):
    """What depends on the record (its entry being in the file) stays a per-record matter."""
    _, _, pdbs = structures
    path = write(tmp_path / "fixed.jsonl", json.dumps({"s0": {"B": [1, 2]}}) + "\n")
    out = tmp_path / "designs"
    assert main(["design", str(model[0]), str(pdbs), "--out", str(out), "--fixed-positions-json", path, "-n", "1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["designed"] == 1 and [s["name"] for s in summary["skipped"]][1:] == ["s1.B"]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "INVFOLD_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, "-m", "invfold", *args], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip


def test_as_real_commands_nested_and_binary_files_are_one_line_exit_2(tmp_path, structures, model):
    _, _, pdbs = structures
    nested = write(tmp_path / "bias.json", DEEP)
    binary = write(tmp_path / "pssm.jsonl", BINARY)
    for flag, path in (("--bias-aa", nested), ("--pssm-jsonl", binary)):
        result = run("design", str(model[0]), str(pdbs), "--out", str(tmp_path / "o"), flag, path)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"invfold design: error: {path}") and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "content, expected",
    [
        ("steps: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper"),
        (b"\xff\xfe\x00binary", "UTF-8"),
        ("threads: " + "[" * 70 + "1" + "]" * 70 + "\n", "threads"),
    ],
)
def test_a_nested_or_binary_config_file_is_one_line(tmp_path, capsys, content, expected):
    path = write(tmp_path / "config.yaml", content)
    code = main(["design", "m.pt", "s.pdb", "--config", path])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and path in err and expected in err, err


def test_an_unopenable_name_is_one_line(tmp_path, structures, model, capsys):
    """A name the system refuses to open (longer than a file name may be) is the file's error."""
    _, _, pdbs = structures
    name = str(tmp_path / ("x" * 5000 + ".json"))
    code = main(["design", str(model[0]), str(pdbs), "--out", str(tmp_path / "o"), "--bias-aa", name])
    assert "expected a readable file, got File name too long" in one_line_error(capsys, code, name[:60])
