"""Tied, fixed, omitted and biased positions from ProteinMPNN-shaped JSON inputs, on a chain of the
bundled sample, with a .pt and an .onnx autoregressive model giving the same designs."""

import json

import numpy as np
import pytest
import torch

from invfold.components.design import DesignConfig, design
from invfold.components.design.constraints import ConstraintFiles, load_constraints
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.sources import read_protein_set
from invfold.data import SAMPLE_CHAIN_SET
from tests.support.onnx_files import onnx_file

NAME = "1A8O.A"  # 70 residues, entry "1A8O", chain "A"


@pytest.fixture(scope="module")
def record():
    return next(r for r in read_protein_set(str(SAMPLE_CHAIN_SET)) if r.name == NAME)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval()
    save_model(folder / "m.pt", model)
    onnx_file(model, folder / "m.onnx")
    return folder / "m.pt", folder / "m.onnx"


def write(path, obj, jsonl=True):
    path.write_text(json.dumps(obj) + "\n" if jsonl else json.dumps(obj))
    return str(path)


def run_both(tmp_path, models, **kw):
    """The designs of the .pt and the .onnx model (which must agree)."""
    out = []
    for model in models:
        cfg = DesignConfig(
            model=str(model),
            structure=str(SAMPLE_CHAIN_SET),
            name=NAME,
            out=str(tmp_path / f"{model.suffix[1:]}.fasta"),
            num_sequences=3,
            temperature=1.0,
            seed=5,
            **kw,
        )
        out.append([d.sequence for d in design(cfg)])
    assert out[0] == out[1], "checkpoint and ONNX designs differ"
    return out[0]


@pytest.mark.slow
def test_tied_repeats_get_one_letter_per_group(tmp_path, models, record):
    """ProteinMPNN's tied decoding (dauparas/ProteinMPNN protein_mpnn_utils.py, ProteinMPNN.tied_sample;
    the input shape of helper_scripts/make_tied_positions_dict.py): positions 1..10 tied to 11..20 as
    repeats within chain A; every tied pair carries one letter in every design."""
    assert record.mask[:20].all()
    ties = write(tmp_path / "tied.jsonl", {"1A8O": [{"A": [i, i + 10]} for i in range(1, 11)], "other": []})
    untied = run_both(tmp_path, models)
    tied = run_both(tmp_path, models, tied_positions=ties)
    for seq in tied:
        assert seq[:10] == seq[10:20]
    assert any(s[:10] != s[10:20] for s in untied)  # without ties the repeats differ
    # weighted form (make_pos_neg_tied_positions_dict.py): {"A": [[positions], [weights]]}
    weighted = write(tmp_path / "w.json", {"1A8O": [{"A": [[i, i + 10], [1.0, 0.5]]} for i in range(1, 11)]}, False)
    for seq in run_both(tmp_path, models, tied_positions=weighted):
        assert seq[:10] == seq[10:20]


def test_an_onnx_file_without_decoding_graphs_refuses_tied_positions(tmp_path, models, record):
    """A later tied member reads an earlier one's decoder state, which one full graph run per step
    cannot give: such a file names the fix instead of designing otherwise than the checkpoint."""
    from invfold.components.design.design import OnnxBackend, design_record

    ties = write(tmp_path / "tied.jsonl", {"1A8O": [{"A": [1, 2]}]})
    backend = OnnxBackend(str(models[1]), threads=1)
    backend.decoding = None  # as a file exported before the incremental decoding graphs
    cfg = DesignConfig(model=str(models[1]), structure=str(SAMPLE_CHAIN_SET), name=NAME,
                       out=str(tmp_path / "d.fasta"), tied_positions=ties)  # fmt: skip
    with pytest.raises(ValueError, match=r"tied positions need the incremental decoding graphs.*invfold export"):
        design_record(backend, record, cfg)


def test_bias_forces_omit_removes_and_fixed_keep(tmp_path, models, record):
    glycine = write(tmp_path / "bias.jsonl", {"G": 100.0, "X": 3.0})
    omit = write(tmp_path / "omit.jsonl", {"1A8O": {"A": [[[3, 4], "G"], [[5], "GAX"]]}})
    fixed = write(tmp_path / "fixed.json", {"1A8O": {"A": [1, 2, 30]}}, False)
    rows = [[0.0] * 21 for _ in range(len(record))]
    rows[39][18] = 200.0  # position 40: W (column 18 of ACDEFGHIKLMNPQRSTVWYX)
    by_res = write(tmp_path / "by_res.jsonl", {"1A8O": {"A": rows}})
    designs = run_both(
        tmp_path, models, bias_aa=glycine, omit_aa_jsonl=omit, fixed_positions_json=fixed, bias_by_res=by_res
    )
    observed = np.asarray(record.mask)
    for seq in designs:
        for i, letter in enumerate(seq):
            if i in (0, 1, 29) or not observed[i]:
                assert letter == record.seq[i]
            elif i in (2, 3, 4):
                assert letter not in "G" and (i != 4 or letter != "A")
            elif i == 39:
                assert letter == "W"
            else:
                assert letter == "G"
    assert len({s[2:5] for s in designs}) > 1  # omitted positions are still sampled


def test_ties_bias_and_excluded_together(tmp_path, models, record):
    ties = write(tmp_path / "tied.jsonl", {"1A8O": [{"A": [1, 50, 60]}, {"A": [2, 3]}]})
    rows = [[0.0] * 20 for _ in range(len(record))]
    rows[49]["ACDEFGHIKLMNPQRSTVWY".index("K")] = 100.0  # K at 50: the group's mean bias is +33
    by_res = write(tmp_path / "r.json", {"1A8O": {"A": rows}}, False)
    for seq in run_both(tmp_path, models, tied_positions=ties, bias_by_res=by_res, excluded="C"):
        assert seq[0] == seq[49] == seq[59] == "K" and seq[1] == seq[2] and "C" not in seq


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "tied_positions",
            {"1A8O": [{"B": [1]}]},
            r"t\.jsonl: entry '1A8O', group 0, chain 'B': chain 'B' is not in the structure",
        ),
        ("tied_positions", {"1A8O": [{"A": [1, 71]}]}, r"group 0, chain 'A'.*position 71.*expected 1\.\.70"),
        ("tied_positions", {"1A8O": [{"A": [1, 2]}, {"A": [2, 3]}]}, r"group 1.*position 2 is already tied"),
        ("tied_positions", {"2XYZ": []}, r"no entry '1A8O'.*entries: 2XYZ"),
        ("bias_by_res", {"1A8O": {"A": [[0.0] * 21] * 3}}, r"chain 'A': expected 70 rows.*got 3 rows"),
        ("bias_by_res", {"1A8O": {"A": [[0.0] * 19] * 70}}, r"\[0\] \(position 1\): expected 21 finite numbers"),
        ("bias_aa", {"B": 1.0}, r"key 'B': expected one of ACDEFGHIKLMNPQRSTVWYX"),
        ("omit_aa", {"1A8O": {"A": [[[3], "GZ"]]}}, r"chain 'A'\[0\]: letters \['Z'\]"),
        ("omit_aa", {"1A8O": {"C": []}}, r"chain 'C': the structure has no such chain"),
        ("fixed_positions", {"1A8O": {"A": [0]}}, r"position 0 of chain 'A': expected 1\.\.70"),
        ("fixed_positions", {"1A8O": {"A": "1-3"}}, r"expected a list of 1-based positions"),
    ],
)
def test_bad_inputs_name_file_key_and_expectation(tmp_path, record, name, content, message):
    path = write(tmp_path / "t.jsonl", content)
    with pytest.raises(ValueError, match=message) as error:
        load_constraints(ConstraintFiles(**{name: path}), record)
    assert "t.jsonl" in str(error.value)


def test_jsonl_lines_merge_and_a_repeated_entry_is_refused(tmp_path, record):
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps({"other": {}}) + "\n" + json.dumps({"1A8O": {"A": [4]}}) + "\n")
    assert load_constraints(ConstraintFiles(fixed_positions=str(path)), record).fixed.nonzero()[0].tolist() == [3]
    path.write_text(json.dumps({"1A8O": {}}) + "\n\n" + json.dumps({"1A8O": {"A": [4]}}) + "\n")
    with pytest.raises(ValueError, match=r"f\.jsonl:3: field '1A8O': expected one line per entry \(also on line 1\)"):
        load_constraints(ConstraintFiles(fixed_positions=str(path)), record)


def test_everything_omitted_somewhere_is_refused(tmp_path, models):
    omit = write(tmp_path / "o.jsonl", {"1A8O": {"A": [[[7], "ACDEFGHIKLMNPQRSTVWY"]]}})
    cfg = DesignConfig(
        model=str(models[0]), structure=str(SAMPLE_CHAIN_SET), name=NAME, out=str(tmp_path / "x.fa"), omit_aa_jsonl=omit
    )
    with pytest.raises(ValueError, match="position 7 .*every letter omitted"):
        design(cfg)


def test_ties_across_two_chains_of_a_complex(tmp_path, models):
    """Homo-oligomer-like ties (make_tied_positions_dict.py shape) across chains A and D of the
    sample's two-chain entry 1tii, designed as one complex record: tied pairs share a letter, and
    the checkpoint and the ONNX graph agree."""
    from invfold.components.design.design import design_record, load_backend
    from tests.support.structures import sample_complex

    record = sample_complex("1tii")
    chains = record.chain_positions()
    pairs = [(p, p) for p in range(1, 31) if record.mask[chains["A"][p - 1]] and record.mask[chains["D"][p - 1]]]
    assert len(pairs) >= 20
    ties = write(tmp_path / "tied.jsonl", {"1tii": [{"A": [a], "D": [d]} for a, d in pairs]})
    cfg = DesignConfig(
        model="unused", structure="unused", out="unused", num_sequences=2, temperature=1.0, seed=2, tied_positions=ties
    )
    designs = [[d.sequence for d in design_record(load_backend(str(m)), record, cfg)] for m in models]
    assert designs[0] == designs[1]
    for seq in designs[0]:
        assert all(seq[chains["A"][a - 1]] == seq[chains["D"][d - 1]] for a, d in pairs)
