import argparse
import json

import pytest

from invfold.components.design import DesignConfig, cli, design
from invfold.components.design.batch import design_batch, is_batch
from invfold.components.design.config import parse_temperatures
from tests.support.design_files import read_fasta


@pytest.mark.slow
def test_folder_to_one_fasta_per_structure_with_temperatures_and_skips(tmp_path, structures, model):
    _, _, pdbs = structures
    out = tmp_path / "designs"
    cfg = DesignConfig(model=str(model[0]), structure=str(pdbs), out=str(out), num_sequences=2, temperature="0.1,0.5")
    assert is_batch(cfg)
    summary = design_batch(cfg, progress=True)
    assert summary.designed == 2 and summary.designs == 8
    assert [s.reason for s in summary.skipped] == ["not_a_structure"] or len(summary.skipped) == 1
    assert "broken.pdb" in summary.skipped[0].message
    written = json.loads((out / "summary.json").read_text())
    assert written["skip_counts"] == summary.skip_counts and written["designs"] == 8
    for name in ("s0.B", "s1.B"):
        entries = read_fasta(out / f"{name}.fasta")
        assert [h.group(2) for h, _ in entries] == ["0", "1", "2", "3"]
        assert [h.group(3) for h, _ in entries] == ["0.1", "0.1", "0.5", "0.5"]
        assert [h.group(4) for h, _ in entries] == ["0", "1", "0", "1"]  # sample i of each T: seed + i
    # the batch designs what a single-structure call designs, at each temperature
    single = design(
        DesignConfig(model=str(model[0]), structure=str(pdbs / "s1.pdb"), out=str(tmp_path / "one.fasta"),
                     num_sequences=2, temperature=0.5)
    )  # fmt: skip
    assert [d.sequence for d in single] == [s for _, s in read_fasta(out / "s1.B.fasta")[2:]]


def test_jsonl_to_jsonl_skips_records_that_cannot_be_designed(tmp_path, structures, model):
    jsonl, records, _ = structures
    shortest = min(len(r) for r in records)
    out = tmp_path / "all.jsonl"
    results = {}
    for m in model:
        cfg = DesignConfig(
            model=str(m), structure=str(jsonl), out=str(out), num_sequences=2, temperature=0.2,
            fixed_positions=f"{shortest}-{shortest + 1}", overwrite=True,  # the second model replaces the first's
        )  # fmt: skip
        summary = design_batch(cfg, progress=False)
        assert summary.designed == 2 and [s.name for s in summary.skipped] == [min(records, key=len).name]
        assert "beyond the chain" in summary.skipped[0].message
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 4 and {r["temperature"] for r in rows} == {0.2}
        assert json.loads((tmp_path / "all.summary.json").read_text())["skip_counts"] == summary.skip_counts
        results[m.suffix] = [r["sequence"] for r in rows]
    assert results[".pt"] == results[".onnx"]


def test_list_of_paths_and_cli(tmp_path, structures, model, capsys):
    _, _, pdbs = structures
    listing = tmp_path / "structures.txt"
    listing.write_text(f"# two structures and a missing one\n{pdbs / 's0.pdb'}\n\nmissing.cif\n{pdbs / 's1.pdb'}\n")
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    out = tmp_path / "out"
    args = parser.parse_args(["design", str(model[1]), str(listing), "--out", str(out), "-n", "1", "-T", "0.1 0.3"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "designed 4 sequences for 2 records" in printed and "skipped 1 records (missing_file 1)" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["skipped"][0]["name"].endswith("missing.cif") and "structures.txt:4" in summary["skipped"][0]["message"]
    )
    assert sorted(p.name for p in out.iterdir()) == ["s0.B.fasta", "s1.B.fasta", "summary.json"]


def test_nothing_to_design_is_an_error(tmp_path, model):
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="at least one record"):
        design_batch(DesignConfig(model=str(model[0]), structure=str(tmp_path / "empty.txt"), out=str(tmp_path / "o")))


@pytest.mark.parametrize(
    "value, expected", [("0.1", [0.1]), ("0.1,0.2", [0.1, 0.2]), ("0.1 0.2", [0.1, 0.2]), (0.3, [0.3])]
)
def test_parse_temperatures(value, expected):
    assert parse_temperatures(value) == expected


@pytest.mark.parametrize("value", ["0", "0.1,-1", "hot", ""])
def test_bad_temperatures(value):
    with pytest.raises(ValueError, match="DesignConfig.temperature"):
        DesignConfig(model="m.pt", structure="s.pdb", out="o.fa", temperature=value)


def test_folder_in_proteinmpnn_layout_with_probs_pt_and_onnx(tmp_path, structures, model):
    """--fasta-layout proteinmpnn and --save-probs in batch mode: <name>.fasta in upstream's layout
    (native first, then T=, sample= from 1 at each T) and <name>.probs.npz beside it; the exported
    graph saves the probabilities the checkpoint saves. A .jsonl or stdout target is refused."""
    import numpy as np

    _, _, pdbs = structures
    saved = {}
    for path in model:
        out = tmp_path / path.suffix[1:]
        cfg = DesignConfig(model=str(path), structure=str(pdbs), out=str(out), num_sequences=2, temperature="0.1,0.5",
                           fasta_layout="proteinmpnn", save_probs=True)  # fmt: skip
        assert design_batch(cfg).designed == 2
        assert sorted(p.name for p in out.iterdir()) == [
            "s0.B.fasta", "s0.B.probs.npz", "s1.B.fasta", "s1.B.probs.npz", "summary.json"
        ]  # fmt: skip
        headers = [line for line in (out / "s1.B.fasta").read_text().splitlines() if line.startswith(">")]
        assert headers[0].startswith(">s1, score=") and "designed_chains=['B']" in headers[0]  # the file's name
        assert [h.split(", score=")[0] for h in headers[1:]] == [
            ">T=0.1, sample=1",
            ">T=0.1, sample=2",
            ">T=0.5, sample=1",
            ">T=0.5, sample=2",
        ]
        saved[path.suffix] = np.load(out / "s1.B.probs.npz")
        assert saved[path.suffix]["probs"].shape[0] == 4
    pt, onnx = saved[".pt"], saved[".onnx"]
    np.testing.assert_array_equal(pt["S"], onnx["S"])
    np.testing.assert_array_equal(pt["decoding_order"], onnx["decoding_order"])
    np.testing.assert_allclose(pt["probs"], onnx["probs"], atol=1e-4)
    for argv in (
        ["--out", str(tmp_path / "all.jsonl"), "--save-probs"],
        ["--out", "-", "--fasta-layout", "proteinmpnn"],
    ):
        parser = argparse.ArgumentParser()
        cli.add_parser(parser.add_subparsers())
        args = parser.parse_args(["design", str(model[0]), str(pdbs / "s1.pdb"), *argv])
        with pytest.raises(ValueError, match="writes FASTA files"):
            args.func(args)
