"""Designing and scoring chains of a real complex (1tii of the bundled sample: chains A, D) with the
other chains as fixed context; a checkpoint and its ONNX export design the same sequences."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from invfold.components.design import DesignConfig, cli, design, load_backend
from invfold.components.design.design import select_record
from invfold.components.design.score import ScoreConfig, score
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.model.network import random_decoding_order
from invfold.components.protein.batch import collate
from invfold.errors import ConfigError
from tests.support.onnx_files import onnx_file
from tests.support.structures import SAMPLE, sample_complex, write_sample_complex

ENTRY = "1tii"  # chain A 187 residues, chain D 98


@pytest.fixture(scope="module")
def pdb(tmp_path_factory):
    return write_sample_complex(tmp_path_factory.mktemp("complex") / f"{ENTRY}.pdb", ENTRY)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for decoding in ("one_shot", "autoregressive"):
        torch.manual_seed(1)
        model = InverseFoldingModel(ModelConfig.preset("tiny", decoding=decoding)).eval()
        save_model(folder / f"{decoding}.pt", model)
        onnx_file(model, folder / f"{decoding}.onnx")
        paths[decoding] = (folder / f"{decoding}.pt", folder / f"{decoding}.onnx")
    return paths


def _fasta(path):
    lines = path.read_text().splitlines()
    return list(zip(lines[::2], lines[1::2], strict=True))


@pytest.mark.parametrize("decoding", [pytest.param("autoregressive", marks=pytest.mark.slow), "one_shot"])
def test_design_chains_keep_context_native_and_backends_agree(tmp_path, pdb, models, decoding):
    record = select_record(str(pdb), None, None, complexes=True)
    assert record.name == ENTRY and record.chain_names == ("A", "D")
    chains = record.chain_positions()
    outputs = []
    for kind, path in zip(("pt", "onnx"), models[decoding], strict=True):
        out = tmp_path / f"{kind}.fasta"
        cfg = DesignConfig(model=str(path), structure=str(pdb), out=str(out), design_chains="D", num_sequences=3)
        outputs.append((design(cfg), _fasta(out)))
    (pt, pt_fasta), (onnx, onnx_fasta) = outputs
    assert [d.sequence for d in pt] == [d.sequence for d in onnx]
    assert [d.mean_nll for d in pt] == pytest.approx([d.mean_nll for d in onnx], abs=1e-4)
    for d, (header, seq) in zip(pt, pt_fasta, strict=True):
        assert d.designed_chains == ("D",) and d.fixed_chains == ("A",)
        assert header.startswith(f">{ENTRY} ") and header.endswith("designed_chains=D fixed_chains=A")
        first, second = seq.split("/")
        assert (len(first), len(second)) == (len(chains["A"]), len(chains["D"]))
        letters = np.array(list(d.sequence))
        native = np.array(list(record.seq))
        assert (letters[chains["A"]] == native[chains["A"]]).all()  # context keeps its native letters
        designed = chains["D"][record.mask[chains["D"]]]
        assert (letters[designed] != native[designed]).any()  # the designed chain is designed
    assert [seq for _, seq in pt_fasta] == [seq for _, seq in onnx_fasta]


@pytest.mark.slow
def test_designed_chain_logits_depend_on_the_context_sequence(tmp_path, pdb):
    """Autoregressive: decoding the context chain first, the designed chain's logits change with the
    context's letters (the model conditions on them); a one-shot model reads structure only. 1tii's
    chains are >= 10 A apart (CA), so the model needs ProteinMPNN's k = 48 neighbours to see across."""
    models = {}
    for decoding in ("one_shot", "autoregressive"):
        torch.manual_seed(1)
        model = InverseFoldingModel(
            ModelConfig(**{**vars(ModelConfig.preset("tiny", decoding=decoding)), "k_neighbors": 48})
        ).eval()
        save_model(tmp_path / f"{decoding}.pt", model)
        onnx_file(model, tmp_path / f"{decoding}.onnx")
        models[decoding] = (tmp_path / f"{decoding}.pt", tmp_path / f"{decoding}.onnx")
    record = select_record(str(pdb), None, None, complexes=True)
    chains = record.chain_positions()
    b = collate([record])
    context = torch.zeros(len(record), dtype=torch.bool)
    context[chains["A"]] = True
    mutated = b.S.clone()
    mutated[0, chains["A"]] = (mutated[0, chains["A"]] + 7) % 20
    d = torch.from_numpy(chains["D"][record.mask[chains["D"]]])
    for decoding, expect_change in (("autoregressive", True), ("one_shot", False)):
        for path in models[decoding]:
            backend = load_backend(str(path))
            order = random_decoding_order(context[None], torch.Generator().manual_seed(0))
            native = backend.logits(b, b.S, order if backend.cfg.autoregressive else None)[0, d]
            other = backend.logits(b, mutated, order if backend.cfg.autoregressive else None)[0, d]
            changed = (native - other).abs().max().item()
            assert (changed > 1e-3) == expect_change, (decoding, path.suffix, changed)


def test_context_chain_changes_the_design(tmp_path, pdb, models):
    """Same seed, designed chain D alone (as a single chain) vs in the complex: different designs."""
    pt = models["autoregressive"][0]
    alone = design(DesignConfig(model=str(pt), structure=str(pdb), out=str(tmp_path / "a.fa"), chain="D"))
    together = design(DesignConfig(model=str(pt), structure=str(pdb), out=str(tmp_path / "b.fa"), design_chains="D"))
    d = sample_complex(ENTRY).chain_positions()["D"]
    assert len(alone[0].sequence) == len(d)
    assert [x.sequence for x in alone] != ["".join(y.sequence[i] for i in d) for y in together]


def test_design_all_chains_and_score_the_designs(tmp_path, pdb, models):
    pt, onnx = models["autoregressive"]
    out = tmp_path / "all.fasta"
    designs = design(DesignConfig(model=str(pt), structure=str(pdb), out=str(out), design_chains="A,D"))
    assert designs[0].fixed_chains == () and _fasta(out)[0][0].endswith("designed_chains=A,D fixed_chains=-")
    # the FASTA with "/" between chains scores as is; scoring chain D with A as context
    scores = score(
        ScoreConfig(model=str(onnx), structure=str(pdb), out=str(tmp_path / "s.csv"), fasta=str(out), score_chains="D")
    )
    assert len(scores) == len(designs) and all(s.structure == ENTRY for s in scores)
    d = set(sample_complex(ENTRY).chain_positions()["D"].tolist())
    assert all(v is None for s in scores for i, v in enumerate(s.per_residue) if i not in d)


def test_chain_set_entry_and_errors(tmp_path, models):
    pt = models["autoregressive"][0]
    # a chain-set entry of several lines is one complex when design chains are given; --name picks
    # the entry or one of its chains
    for name in (ENTRY, f"{ENTRY}.A"):
        (d,) = design(
            DesignConfig(
                model=str(pt),
                structure=str(SAMPLE),
                out=str(tmp_path / "x.fa"),
                name=name,
                design_chains="A",
                num_sequences=1,
            )
        )
        assert d.name == ENTRY and d.chain_lengths == (187, 98)
    with pytest.raises(ConfigError, match=r"chains \['Z'\] are not in the structure \(chains: A, D\)"):
        design(
            DesignConfig(
                model=str(pt), structure=str(SAMPLE), out=str(tmp_path / "x.fa"), name=ENTRY, design_chains="Z"
            )
        )
    with pytest.raises(ConfigError, match="give one of them"):
        DesignConfig(model=str(pt), structure=str(SAMPLE), out="x.fa", chain="A", design_chains="A")


def test_cli_design_chains(tmp_path, pdb, models):
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    out = tmp_path / "cli.fasta"
    onnx = models["autoregressive"][1]
    args = parser.parse_args(["design", str(onnx), str(pdb), "--out", str(out), "-n", "2", "--design-chains", "A"])
    assert args.func(args) == 0
    assert [h.endswith("designed_chains=A fixed_chains=D") for h, _ in _fasta(out)] == [True, True]


def test_cli_chain_id_jsonl_is_design_chains_from_a_file(tmp_path, pdb, models):
    """ProteinMPNN's --chain_id_jsonl {entry: [[designed], [fixed]]} designs what --design-chains does."""
    chain_ids = tmp_path / "chain_ids.jsonl"
    chain_ids.write_text('{"%s": [["A"], ["D"]]}\n' % ENTRY)
    pt = str(models["autoregressive"][0])
    outs = []
    for i, choice in enumerate((["--design-chains", "A"], ["--chain_id_jsonl", str(chain_ids)])):
        parser = argparse.ArgumentParser()
        cli.add_parser(parser.add_subparsers())
        out = tmp_path / f"cli{i}.fasta"
        args = parser.parse_args(["design", pt, str(pdb), "--out", str(out), "-n", "2", *choice])
        assert args.func(args) == 0
        outs.append(_fasta(out))
    assert outs[0] == outs[1] and [h.endswith("designed_chains=A fixed_chains=D") for h, _ in outs[1]] == [True, True]


def test_batch_design_of_a_folder_keeps_each_complex(tmp_path, pdb, models):
    """`invfold design MODEL folder/ --design-chains A --out designs/`: each structure is read as a
    complex, chain A is designed with the other chains as context (the design a single-structure
    call gives), a structure without chain A is skipped and counted."""
    from invfold.components.design.batch import design_batch
    from tests.support.parity_cases import sample_records
    from tests.support.structures import ChainSpec, write_chains

    folder = tmp_path / "structures"
    folder.mkdir()
    (folder / f"{ENTRY}.pdb").write_bytes(pdb.read_bytes())  # chains A (designed) and D (context)
    records = sample_records()
    write_chains(folder / "1BD2.cif", [ChainSpec("D", records["1BD2.D"]), ChainSpec("B", records["1BD2.B"])])  # no A
    onnx = models["autoregressive"][1]
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    out = tmp_path / "designs"
    args = parser.parse_args(["design", str(onnx), str(folder), "--out", str(out), "-n", "2", "--design-chains", "A"])
    assert args.func(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["designed"] == 1 and summary["skip_counts"] == {"no_design_chain": 1}
    assert summary["skipped"][0]["name"] == "1BD2"
    batch = _fasta(out / f"{ENTRY}.fasta")
    record = sample_complex(ENTRY)
    chains = record.chain_positions()
    single = design(DesignConfig(model=str(onnx), structure=str(pdb), out=str(tmp_path / "one.fa"),
                                 design_chains="A", num_sequences=2))  # fmt: skip
    assert [s for _, s in batch] == [_fasta(tmp_path / "one.fa")[i][1] for i in range(2)]
    for header, seq in batch:
        assert header.endswith("designed_chains=A fixed_chains=D")
        first, second = seq.split("/")
        assert (len(first), len(second)) == (len(chains["A"]), len(chains["D"]))  # the whole complex
        assert second == "".join(record.seq[i] for i in chains["D"])  # context keeps its native letters
    assert single[0].chain_lengths == (len(chains["A"]), len(chains["D"]))
    # jsonl output and the pipeline's shard step carry the complex too
    rows_out = tmp_path / "designs.jsonl"
    design_batch(DesignConfig(model=str(onnx), structure=str(folder), out=str(rows_out), design_chains="A",
                              num_sequences=1), progress=False)  # fmt: skip
    (row,) = [json.loads(line) for line in rows_out.read_text().splitlines()]
    assert row["name"] == ENTRY and len(row["sequence"]) == len(record)
    assert row["chain_lengths"] == [len(chains["A"]), len(chains["D"])] and row["fixed_chains"] == ["D"]


def test_design_pipeline_steps_take_design_chains(tmp_path, pdb, models):
    from invfold.components.design.step import design_shard_step, plan_shards

    folder = tmp_path / "structures"
    folder.mkdir()
    (folder / f"{ENTRY}.pdb").write_bytes(pdb.read_bytes())
    assert plan_shards(str(folder), 4) == ["0/2", "1/2"]  # two chains, one record each
    assert plan_shards(str(folder), 4, design_chains="D") == ["0/1"]  # one complex
    summary = design_shard_step(
        model_path=str(models["autoregressive"][0]), structures=str(folder), shard="0/1", temperatures="0.1",
        num_sequences=1, seed=0, score_orders=1, threads=1, out_dir=str(tmp_path / "out"), design_chains="D",
    )  # fmt: skip
    assert summary["designed"] == 1
    (row,) = [json.loads(line) for line in (tmp_path / "out" / "designs.jsonl").read_text().splitlines()]
    chains = sample_complex(ENTRY).chain_positions()
    assert len(row["sequence"]) == len(chains["A"]) + len(chains["D"]) and row["designed_chains"] == ["D"]
