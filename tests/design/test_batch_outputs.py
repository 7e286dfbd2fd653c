"""A batch writes one output per record and never over another's or an earlier run's: records that
share a name (one chain-set line repeated, `x.pdb` beside `x.cif` and `x.pdb.gz`) or whose names
differ only in letter case (one file on macOS and Windows) each keep their own file, numbered in
reading order; the summary counts what was written; an output folder or jsonl an earlier run left
is refused unless --overwrite. Each case is a real `invfold design` command."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

from invfold.cli import main
from invfold.components.protein.sources import read_protein_set
from tests.support.design_files import read_fasta, write_pdb


def invfold(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "INVFOLD_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, "-m", "invfold", *args], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip


def renamed_chain_set(path, jsonl, names):
    """The fixture's chain-set lines (in turn) under `names`."""
    lines = jsonl.read_text().splitlines()
    entries = [json.loads(lines[i % len(lines)]) for i in range(len(names))]
    for entry, name in zip(entries, names, strict=True):
        entry["name"] = name
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return [len(e["seq"]) for e in entries]


def test_records_with_one_name_or_names_differing_in_case_each_keep_their_designs(tmp_path, structures, model):
    jsonl, _, _ = structures
    names = ["dup.A", "dup.A", "Foo.A", "dup.A", "foo.A"]
    chains = tmp_path / "dups.jsonl"
    lengths = renamed_chain_set(chains, jsonl, names)
    out = tmp_path / "designs"
    result = invfold("design", str(model[0]), str(chains), "--out", str(out), "-n", "2", "-T", "0.1")
    assert result.returncode == 0, result.stderr
    assert "designed 10 sequences for 5 records" in result.stdout
    expected = ["dup.A", "dup.A-2", "Foo.A", "dup.A-3", "foo.A-2"]
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted([f"{n}.fasta" for n in expected] + ["summary.json"])
    assert len({f.casefold() for f in files}) == len(files)  # distinct on a case-insensitive file system too
    for name, length, record in zip(expected, lengths, names, strict=True):
        designs = read_fasta(out / f"{name}.fasta")
        assert len(designs) == 2 and all(h.group(1) == record and len(s) == length for h, s in designs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["designed"] == 5 and summary["designs"] == 10
    assert sorted(summary["outputs"]) == sorted(f"{n}.fasta" for n in expected)
    assert summary["renamed"] == {"dup.A-2": "dup.A", "dup.A-3": "dup.A", "foo.A-2": "foo.A"}

    rows_out = tmp_path / "designs.jsonl"
    result = invfold("design", str(model[0]), str(chains), "--out", str(rows_out), "-n", "2", "-T", "0.1")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in rows_out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [n for n in expected for _ in range(2)]
    assert [r["name"] for r in rows] == [n for n in names for _ in range(2)]
    assert [len(r["sequence"]) for r in rows] == [n for n in lengths for _ in range(2)]
    assert json.loads((tmp_path / "designs.summary.json").read_text())["designed"] == 5


def test_structure_files_with_one_stem_each_keep_their_designs(tmp_path, structures, model):
    _, records, _ = structures
    folder = tmp_path / "same_stem"
    folder.mkdir()
    write_pdb(folder / "x.pdb", records[0])
    write_pdb(folder / "x.cif", records[1])
    write_pdb(tmp_path / "x.pdb", records[2])
    (folder / "x.pdb.gz").write_bytes(gzip.compress((tmp_path / "x.pdb").read_bytes()))
    out = tmp_path / "designs"
    result = invfold("design", str(model[0]), str(folder), "--out", str(out), "-n", "1")
    assert result.returncode == 0, result.stderr
    assert "designed 3 sequences for 3 records" in result.stdout
    # numbered in reading order (sorted file names): x.cif, x.pdb, x.pdb.gz, each with its own chain
    for name, file in (("x.B", "x.cif"), ("x.B-2", "x.pdb"), ("x.B-3", "x.pdb.gz")):
        (header, sequence), *_ = read_fasta(out / f"{name}.fasta")
        assert header.group(1) == "x.B" and len(sequence) == len(next(read_protein_set(str(folder / file))))
    assert len({len(next(read_protein_set(str(p)))) for p in folder.iterdir()}) == 3  # three different chains
    summary = json.loads((out / "summary.json").read_text())
    assert summary["designed"] == 3 and len(summary["outputs"]) == 3


def test_an_earlier_runs_output_is_refused_unless_overwrite(tmp_path, structures, model, capsys):
    _, _, pdbs = structures
    out = tmp_path / "designs"
    command = ("design", str(model[0]), str(pdbs), "--out", str(out), "-n", "1")
    assert invfold(*command).returncode == 0
    written = {p: p.read_bytes() for p in out.iterdir()}
    again = invfold(*command, "--seed", "5")
    assert again.returncode == 2 and again.stdout == ""
    line = again.stderr.strip()
    assert "\n" not in line and line.startswith(f"invfold design: error: --out {out}: holds ") and "--overwrite" in line
    assert "s0.B.fasta" in line and {p: p.read_bytes() for p in out.iterdir()} == written  # nothing touched
    replaced = invfold(*command, "--seed", "5", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert (out / "s0.B.fasta").read_bytes() != written[out / "s0.B.fasta"]  # the new run's designs (seed 5)

    rows = tmp_path / "designs.jsonl"
    command = ("design", str(model[0]), str(pdbs), "--out", str(rows), "-n", "1")
    assert main(list(command)) == 0
    for existing in (rows, tmp_path / "designs.summary.json"):
        kept = existing.read_bytes()
        capsys.readouterr()
        assert main([*command, "--seed", "5"]) == 2
        assert f"--out {rows}: exists: {existing.name}" in capsys.readouterr().err
        assert existing.read_bytes() == kept
        existing.unlink()  # then the summary alone is refused too
    assert main([*command, "--seed", "5", "--overwrite"]) == 0 and rows.is_file()


def test_a_stray_file_in_the_output_folder_is_not_overwritten_nor_reported_as_a_design(tmp_path, structures, model):
    _, _, pdbs = structures
    out = tmp_path / "designs"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    refused = invfold("design", str(model[0]), str(pdbs), "--out", str(out), "-n", "1")
    assert refused.returncode == 2 and "notes.txt" in refused.stderr
    done = invfold("design", str(model[0]), str(pdbs), "--out", str(out), "-n", "1", "--overwrite")
    assert done.returncode == 0, done.stderr
    assert (out / "notes.txt").read_text() == "mine\n"
    assert json.loads((out / "summary.json").read_text())["outputs"] == ["s0.B.fasta", "s1.B.fasta"]


def test_output_names_are_unique_in_any_letter_case_and_keep_plain_names():
    from invfold.components.design.batch import output_names

    assert output_names(["a", "A", "a", "a-2", "b"]) == ["a", "A-2", "a-3", "a-2-2", "b"]
    assert output_names(["x/y", "x/y"])[1] == output_names(["x/y"])[0] + "-2"


EXISTING = "this is an existing file"


def test_an_existing_file_as_the_output_folder_is_one_line(tmp_path, structures, model, capsys):
    _, _, pdbs = structures
    taken = tmp_path / "designs"
    taken.write_text("a file\n")
    for extra in ([], ["--overwrite"]):
        assert main(["design", str(model[0]), str(pdbs), "--out", str(taken), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"invfold design: error: --out {taken}: a batch writes a folder (or a .jsonl); {EXISTING}"
    assert taken.read_text() == "a file\n"
