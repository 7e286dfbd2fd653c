import argparse

import numpy as np
import pytest
import torch

from invfold.components.design import DesignConfig, cli, design, parse_positions
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.alphabet import ALPHABET
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set
from tests.support.design_files import read_fasta, write_pdb
from tests.support.onnx_files import onnx_file


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_synthetic_set(
        folder,
        SyntheticConfig(
            num_chains=3, seed=4, min_length=30, max_length=70, median_length=50, gap_fraction=1.0, break_fraction=0.0
        ),
    )
    jsonl = folder / "chain_set.jsonl"
    record = next(r for r in read_protein_set(str(jsonl)))
    return jsonl, record, write_pdb(folder / "design_me.pdb", record)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for decoding in ("one_shot", "autoregressive"):
        torch.manual_seed(0)
        model = InverseFoldingModel(ModelConfig.preset("tiny", decoding=decoding)).eval()
        save_model(folder / f"{decoding}.pt", model)
        onnx_file(model, folder / f"{decoding}.onnx")
        paths[decoding] = (folder / f"{decoding}.pt", folder / f"{decoding}.onnx")
    return paths


@pytest.mark.parametrize("decoding", [pytest.param("one_shot", marks=pytest.mark.slow), "autoregressive"])
def test_checkpoint_and_onnx_design_the_same_sequences(tmp_path, data, models, decoding):
    _, _, pdb = data
    fastas = []
    for model in models[decoding]:
        out = tmp_path / f"{model.suffix[1:]}.fasta"
        designs = design(
            DesignConfig(
                model=str(model),
                structure=str(pdb),
                out=str(out),
                num_sequences=3,
                temperature=0.5,
                seed=11,
                fixed_positions="1-4" if decoding == "autoregressive" else "",
                excluded="CW",
            )
        )
        entries = read_fasta(out)
        assert len(entries) == 3 and all(h is not None for h, _ in entries)
        for (header, seq), d in zip(entries, designs, strict=True):
            assert header.group(1) == "design_me.B" and int(header.group(4)) == 11 + int(header.group(2))
            # residues missing from the file are filled in (X: the PDB has no SEQRES) and not designed
            assert seq == d.sequence and set(seq) <= set(ALPHABET + "X")
            assert float(header.group(5)) > 0 and 0 <= float(header.group(6)) <= 1
        fastas.append([s for _, s in entries])
    assert fastas[0] == fastas[1]
    assert len(set(fastas[0])) > 1  # different seeds, different sequences


def test_fixed_positions_excluded_letters_and_determinism(tmp_path, data, models):
    jsonl, record, _ = data
    cfg = dict(
        model=str(models["autoregressive"][0]),
        structure=str(jsonl),
        name=record.name,
        num_sequences=4,
        temperature=2.0,
        seed=3,
        fixed_positions=[1, 2, 3, 10],
        excluded="AGLE",
    )
    a = design(DesignConfig(out=str(tmp_path / "a.fasta"), **cfg))
    b = design(DesignConfig(out=str(tmp_path / "b.fasta"), **cfg))
    assert (tmp_path / "a.fasta").read_text() == (tmp_path / "b.fasta").read_text()
    unobserved = ~np.asarray(record.mask)
    assert unobserved.any()  # the fixture has gaps: those keep the native letter
    for d in a:
        assert len(d.sequence) == len(record)
        for i, letter in enumerate(d.sequence):
            if i + 1 in (1, 2, 3, 10) or unobserved[i]:
                assert letter == record.seq[i]
            else:
                assert letter not in "AGLE"
    assert [d.sequence for d in a] == [d.sequence for d in b]


@pytest.mark.parametrize("kind", [0, 1])
def test_fixed_positions_with_a_one_shot_model_are_refused(tmp_path, data, models, kind):
    _, _, pdb = data
    cfg = DesignConfig(
        model=str(models["one_shot"][kind]), structure=str(pdb), out=str(tmp_path / "x.fasta"), fixed_positions="1-4"
    )
    with pytest.raises(ValueError, match="one-shot model.*use an autoregressive model \\(preset proteinmpnn"):
        design(cfg)
    assert not (tmp_path / "x.fasta").exists()


def test_cli_writes_fasta(tmp_path, data, models):
    _, _, pdb = data
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    out = tmp_path / "cli.fasta"
    args = parser.parse_args(
        ["design", str(models["one_shot"][1]), str(pdb), "--out", str(out), "-n", "2", "--chain", "B", "--exclude", "c"]
    )
    assert args.func(args) == 0
    assert [h.group(2) for h, _ in read_fasta(out)] == ["0", "1"]


def test_ambiguous_structure_names_the_choices(tmp_path, data, models):
    jsonl, _, _ = data
    with pytest.raises(ValueError, match="3 chains match.*--name"):
        design(DesignConfig(model=str(models["one_shot"][0]), structure=str(jsonl), out=str(tmp_path / "x.fa")))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1-3,7", [1, 2, 3, 7]),
        ("5", [5]),
        ("", []),
        (" 2 , 2-3 ", [2, 3]),
    ],
)
def test_parse_positions(text, expected):
    assert parse_positions(text) == expected


@pytest.mark.parametrize("text, message", [("0", "1-based"), ("5-2", "start <= end"), ("a-b", "range")])
def test_parse_positions_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_positions(text)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_sequences", 0, "num_sequences"),
        ("temperature", 0.0, "temperature"),
        ("excluded", "BZ", "excluded"),
        ("excluded", ALPHABET, "all 20"),
    ],
)
def test_config_errors(field, value, message):
    with pytest.raises(ValueError, match=message):
        DesignConfig(model="m.pt", structure="s.pdb", out="o.fa", **{field: value})


def test_onnx_autoregressive_design_decodes_incrementally(tmp_path, data, models):
    """The .onnx backend runs the embedded encoder once and one step (+ cache update) per
    position, never the full graph per step: the full graph runs once, for the designs' scores."""
    from invfold.components.design.design import OnnxBackend, design_record, select_record

    _, _, pdb = data
    backend = OnnxBackend(str(models["autoregressive"][1]), threads=1)
    assert backend.decoding is not None and set(backend.decoding) == {"encoder", "step", "update"}
    calls = {"full": 0, "encoder": 0}
    full_run, encoder_run = backend.session.run, backend.decoding["encoder"].run

    class Counting:
        def __init__(self, run, key):
            self.run_, self.key = run, key

        def run(self, *args, **kwargs):
            calls[self.key] += 1
            return self.run_(*args, **kwargs)

    backend.session = Counting(full_run, "full")
    backend.decoding = {**backend.decoding, "encoder": Counting(encoder_run, "encoder")}
    record = select_record(str(pdb), None, None)
    cfg = DesignConfig(model="m.onnx", structure=str(pdb), out=str(tmp_path / "d.fasta"), num_sequences=2)
    designs = design_record(backend, record, cfg)
    assert len(designs) == 2 and calls == {"full": 1, "encoder": 1}
