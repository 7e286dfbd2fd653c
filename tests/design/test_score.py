"""invfold score: NLL of given sequences on a real structure, averaged over decoding orders.

Upstream reference: ProteinMPNN `protein_mpnn_run.py` (github.com/dauparas/ProteinMPNN), the
`--score_only 1` branch: for each of `--num_seq_per_target` copies a fresh `randn_1` decoding order,
`_scores(S, log_probs, mask_for_loss)` (protein_mpnn_utils.py: mean NLL over the scored positions),
and the score is the mean over copies; `parse_fasta(..., omit=["/"])` drops chain separators.
"""

import argparse
import csv
import json

import pytest
import torch

from invfold.components.design import score_cli
from invfold.components.design.score import ScoreConfig, score
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.jsonl import read_chain_set
from invfold.errors import InputError
from tests.support.onnx_files import onnx_file

SAMPLE = "src/invfold/data/sample_chain_set.jsonl.gz"
NAME = "1BD2.B"  # 99 residues, a chain of a multi-chain entry


@pytest.fixture(scope="module")
def record():
    return next(r for r in read_chain_set(SAMPLE) if getattr(r, "name", None) == NAME)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval()
    save_model(folder / "ar.pt", model)
    onnx_file(model, folder / "ar.onnx")
    return folder / "ar.pt", folder / "ar.onnx"


def _cfg(model, out, **kw):
    return ScoreConfig(model=str(model), structure=SAMPLE, name=NAME, out=str(out), **kw)


@pytest.mark.slow
def test_native_score_checkpoint_and_onnx_agree_and_average_orders(tmp_path, models, record):
    pt, onnx = models
    a = score(_cfg(pt, tmp_path / "pt.csv", num_orders=4, batch_size=3, seed=5))[0]
    b = score(_cfg(onnx, tmp_path / "onnx.csv", num_orders=4, batch_size=3, seed=5))[0]
    assert a.sequence == record.seq and a.orders == 4
    assert a.scored == sum(1 for c, m in zip(record.seq, record.mask, strict=True) if m and c != "X")
    assert a.mean_nll == pytest.approx(b.mean_nll, abs=1e-4)
    assert all(x == y or abs(x - y) < 1e-4 for x, y in zip(a.per_residue, b.per_residue, strict=True) if x is not None)
    # the mean over four orders is the mean of the four single-order scores (orders seed + k)
    singles = [score(_cfg(pt, tmp_path / f"s{k}.csv", num_orders=1, seed=5 + k))[0].mean_nll for k in range(4)]
    assert a.mean_nll == pytest.approx(sum(singles) / 4, abs=1e-5)
    assert len(set(round(s, 4) for s in singles)) > 1  # orders matter for an autoregressive model
    assert a.std_nll > 0
    # per-residue values average to the mean; unobserved residues are not scored
    values = [v for v in a.per_residue if v is not None]
    assert len(values) == a.scored and sum(values) / len(values) == pytest.approx(a.mean_nll, abs=1e-3)
    rows = list(csv.DictReader((tmp_path / "pt.csv").open()))
    assert rows[0]["sequence_name"] == "native" and float(rows[0]["mean_nll"]) == pytest.approx(a.mean_nll, abs=1e-4)
    data = json.loads((tmp_path / "pt.json").read_text())
    assert data[0]["per_residue"] == a.per_residue and data[0]["structure"] == NAME


def test_fasta_sequences_are_scored_and_a_worse_sequence_scores_worse(tmp_path, models, record):
    poly_g = "G" * len(record)
    fasta = tmp_path / "seqs.fasta"
    half = len(record) // 2
    fasta.write_text(f">native_copy x=1\n{record.seq[:half]}\n{record.seq[half:]}\n>polyG\n{poly_g.lower()}\n")
    scores = score(_cfg(models[0], tmp_path / "s.csv", fasta=str(fasta), num_orders=2))
    assert [s.sequence_name for s in scores] == ["native_copy", "polyG"]
    native = score(_cfg(models[0], tmp_path / "n.csv", num_orders=2))[0]
    assert scores[0].mean_nll == pytest.approx(native.mean_nll, abs=1e-6)
    assert scores[1].sequence == poly_g and scores[1].mean_nll != pytest.approx(native.mean_nll, abs=1e-3)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            ">short\nACD\n",
            r"seqs.fasta: line 1, record 'short': field 'sequence': expected 99 residues, the length of 1BD2",
        ),
        (">bad\n" + "A" * 98 + "B\n", r"seqs.fasta: line 1, record 'bad'.*got 'B' at position 99"),
        (">split\n" + "A" * 50 + "/" + "A" * 49 + "\n", r"'split'.*chains of 99 residues.*got 50/49"),
        ("ACD\n", r"seqs.fasta:1: expected a FASTA header"),
    ],
)
def test_fasta_that_does_not_fit_names_the_record(tmp_path, models, text, message):
    fasta = tmp_path / "seqs.fasta"
    fasta.write_text(text)
    with pytest.raises(InputError, match=message):
        score(_cfg(models[0], tmp_path / "x.csv", fasta=str(fasta)))
    assert not (tmp_path / "x.csv").exists()


def test_cli(tmp_path, models, capsys):
    parser = argparse.ArgumentParser()
    score_cli.add_parser(parser.add_subparsers())
    out = tmp_path / "cli.csv"
    args = parser.parse_args(
        ["score", str(models[1]), SAMPLE, "--name", NAME, "--out", str(out), "--num-orders", "2", "--score-chains", "B"]
    )
    assert args.func(args) == 0
    assert "mean NLL" in capsys.readouterr().out and out.exists() and (tmp_path / "cli.json").exists()
    with pytest.raises(Exception, match="chains \\['Z'\\] are not in the structure"):
        score(_cfg(models[0], out, score_chains="Z"))


def test_samples_of_one_target_are_numbered_in_the_scores(tmp_path, models, record):
    """A design FASTA heads every sample of a target with the target's name: the score rows number
    them in file order (`1BD2.B_1`, `1BD2.B_2`, ...); a name heading one record keeps it."""
    from invfold.cli import main

    fasta = tmp_path / "designs.fasta"
    samples = "".join(f">{NAME} sample={i} T=0.1\n{record.seq}\n" for i in range(3))
    fasta.write_text(samples + f">native\n{record.seq}\n")
    out = tmp_path / "scores.csv"
    argv = ["score", str(models[0]), SAMPLE, "--name", NAME, "--fasta", str(fasta), "--out", str(out)]
    assert main([*argv, "--num-orders", "1"]) == 0
    with out.open() as fh:
        names = [row["sequence_name"] for row in csv.DictReader(fh)]
    assert names == [f"{NAME}_1", f"{NAME}_2", f"{NAME}_3", "native"]
