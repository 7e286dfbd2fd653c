import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from invfold.cli import main
from invfold.components.export import check_parity
from invfold.components.export.onnx_export import load_parity_records
from invfold.components.export.runtime import INPUT_NAMES, feeds, session
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set

REAL_SET = Path(__file__).resolve().parents[3] / "shared" / "data" / "real_chain_set.jsonl.gz"


def export_cli(*argv: str) -> int:
    return main(["export", *argv])


@pytest.fixture(scope="module")
def chain_set(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("data")
    cfg = SyntheticConfig(
        num_chains=6, seed=2, min_length=20, max_length=90, median_length=50, gap_fraction=0.5, break_fraction=0.5
    )
    write_synthetic_set(folder, cfg)
    return str(folder / "chain_set.jsonl")


def make_model(tmp_path, decoding):
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding=decoding)).eval()
    path = tmp_path / f"{decoding}.pt"
    save_model(path, model)
    return model, path


@pytest.fixture(scope="module")
def exported(tmp_path_factory, chain_set):
    tmp = tmp_path_factory.mktemp("ar")
    model, path = make_model(tmp, "autoregressive")
    code = export_cli(str(path), "--out", str(tmp / "model.onnx"), "--data", chain_set, "--chains", "3")
    return code, model, tmp


@pytest.mark.slow
def test_export_writes_one_self_contained_file_with_its_report(exported):
    code, model, tmp = exported
    assert code == 0
    assert sorted(p.name for p in tmp.iterdir()) == ["autoregressive.pt", "model.onnx", "model.parity.json"]
    proto = onnx.load(str(tmp / "model.onnx"))
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    report = json.loads((tmp / "model.parity.json").read_text())
    assert report["passed"] and report["max_abs_diff"] <= 1e-4
    assert report["opset"] >= 18 and report["num_parameters"] == model.num_parameters()
    assert list(report["contract"]["inputs"]) == list(INPUT_NAMES)
    lengths = [c["length"] for c in report["parity"]["chains"]]
    assert len(set(lengths)) == 3, lengths


def test_graph_has_the_contract_and_dynamic_batch_and_length(exported):
    _, model, tmp = exported
    sess = session(tmp / "model.onnx", threads=1)
    assert [i.name for i in sess.get_inputs()] == list(INPUT_NAMES)
    assert [o.name for o in sess.get_outputs()] == ["logits"]
    g = torch.Generator().manual_seed(1)
    for batch, length in [(1, 1), (1, 5), (3, 17), (2, 120)]:  # below and above k = 8
        X = torch.cumsum(torch.randn(batch, length, 1, 3, generator=g), 1) * 2 + torch.randn(
            batch, length, 4, 3, generator=g
        )
        S = torch.randint(0, 20, (batch, length), generator=g)
        mask = (torch.rand(batch, length, generator=g) > 0.1).float()
        ridx = torch.arange(length).expand(batch, length).contiguous()
        order = torch.rand(batch, length, generator=g)
        got = sess.run(None, feeds(X, S, mask, ridx, order))[0]
        with torch.no_grad():
            ref = model(X, S, mask, ridx, order).numpy()
        assert got.shape == (batch, length, 20)
        real = mask.numpy() > 0
        assert np.abs(got - ref)[real].max(initial=0.0) < 1e-4


def test_parity_failure_exits_nonzero_with_the_difference(tmp_path, chain_set, capsys):
    _, path = make_model(tmp_path, "one_shot")
    code = export_cli(
        str(path), "--out", str(tmp_path / "m.onnx"), "--data", chain_set, "--chains", "2", "--tolerance", "1e-12"
    )
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("invfold export: error: ") and "max |logit difference|" in err
    assert not (tmp_path / "m.onnx").exists() and (tmp_path / "m.rejected.onnx").exists()
    report = json.loads((tmp_path / "m.parity.json").read_text())
    assert not report["passed"] and 1e-12 < report["max_abs_diff"] < 1e-4  # a real gap, not a broken graph


def test_parity_records_span_the_length_range(chain_set):
    records = load_parity_records(chain_set, count=3, max_length=500)
    lengths = [len(r) for r in records]
    assert lengths == sorted(lengths) and len(set(lengths)) == 3


@pytest.mark.skipif(not REAL_SET.exists(), reason="../shared/data (real chains) is absent on this machine")
def test_parity_on_real_chains_up_to_500_residues(exported):
    _, model, tmp = exported
    records = load_parity_records(str(REAL_SET), count=4, max_length=500)
    assert max(len(r) for r in records) > 400
    parity = check_parity(tmp / "model.onnx", model, records, tolerance=1e-4)
    assert parity["passed"], parity


@pytest.mark.slow
def test_proteinmpnn_featurization_exports_with_parity(tmp_path, chain_set):
    """The ProteinMPNN-compatible featurization (published weights) exports too: unobserved residues
    as neighbour candidates, X tokens, chains with breaks, in onnxruntime as in eager PyTorch."""
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive", featurization="proteinmpnn"))
    path = tmp_path / "mpnn.pt"
    save_model(path, model.eval())
    assert export_cli(str(path), "--out", str(tmp_path / "m.onnx"), "--data", chain_set, "--chains", "3") == 0
    report = json.loads((tmp_path / "m.parity.json").read_text())
    assert report["passed"], report
    sess = session(tmp_path / "m.onnx", threads=1)
    records = load_parity_records(chain_set, count=3, max_length=500)
    from invfold.components.protein.batch import collate

    b = collate(records)
    assert (b.tokens == 20).any()  # X tokens (missing residues) reach the graph
    order = torch.rand(b.S.shape)
    got = sess.run(None, feeds(b.X, b.tokens, b.structure_mask, b.residue_index, order))[0]
    with torch.no_grad():
        ref = model(b.X, b.tokens, b.structure_mask, b.residue_index, order).numpy()
    real = b.structure_mask.numpy() > 0
    assert np.abs(got - ref)[real].max() < 1e-4


@pytest.mark.slow
def test_ca_only_model_exports_with_parity_and_designs_alike(tmp_path, chain_set):
    """A CA-only network (ProteinMPNN's CA weights' architecture, tiny) passes the gate, and
    `invfold design` with its .onnx designs on a CA-only PDB file (a real sample chain, N, C, O
    left out) what its .pt designs: CA features in onnxruntime as in eager PyTorch."""
    from tests.support.parity_cases import ca_only, parity_cases, sample_records
    from tests.support.structures import write_chains

    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "tiny", decoding="autoregressive", featurization="proteinmpnn", backbone="ca", geometric_features=False
    )
    path = tmp_path / "ca.pt"
    save_model(path, InverseFoldingModel(cfg).eval())
    assert export_cli(str(path), "--out", str(tmp_path / "ca.onnx"), "--data", chain_set, "--chains", "3") == 0
    report = json.loads((tmp_path / "ca.parity.json").read_text())
    assert report["passed"] and report["model_config"]["backbone"] == "ca", report
    pdb = write_chains(tmp_path / "small_ca.pdb", ca_only(parity_cases(sample_records())["break"]))
    designs = {}
    for suffix in (".pt", ".onnx"):
        out = tmp_path / f"d{suffix}.fasta"
        args = ["design", str(tmp_path / f"ca{suffix}"), str(pdb), "-n", "2", "-T", "0.5", "--seed", "4"]
        assert main([*args, "--out", str(out)]) == 0
        designs[suffix] = [line for line in out.read_text().splitlines() if not line.startswith(">")]
    assert designs[".pt"] == designs[".onnx"] and len(designs[".pt"]) == 2


def test_export_prints_a_short_summary_without_the_libraries_info_lines(tmp_path, chain_set):
    """A real `invfold export`: invfold's own lines at INFO, onnxscript's and onnx_ir's (hundreds of
    INFO lines per export) left at WARNING; the result in two lines (the JSON is --json's)."""
    import subprocess
    import sys

    _, path = make_model(tmp_path, "one_shot")
    out = tmp_path / "model.onnx"
    argv = [str(path), "--out", str(out), "--data", chain_set, "--chains", "2"]
    proc = subprocess.run([sys.executable, "-m", "invfold", "export", *argv], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    assert not [line for line in lines if "INFO onnx" in line or "torchvision" in line], lines[:20]
    assert len(lines) < 15, lines
    assert proc.stdout.splitlines()[0].startswith(f"wrote {out} (") and "{" not in proc.stdout
    assert "parity: max |logit difference|" in proc.stdout
