"""A model file that is damaged or not ours ends `invfold design`, `score` and `export` with one
error line naming it (exit 2), never a traceback: a truncated ONNX file (onnxruntime's
InvalidProtobuf) and a model.pt whose config is missing (KeyError) or not a mapping."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from invfold.cli import main
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.model.io import FORMAT
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set
from tests.support.onnx_files import onnx_file


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged")
    write_synthetic_set(root, SyntheticConfig(num_chains=1, seed=3, min_length=30, max_length=40, median_length=35))
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval()
    save_model(root / "good.pt", model)
    whole = onnx_file(model, root / "good.onnx").read_bytes()
    (root / "truncated.onnx").write_bytes(whole[: len(whole) // 2])
    state = {k: v.detach() for k, v in model.state_dict().items()}
    torch.save({"format": FORMAT, "state_dict": state}, root / "no_config.pt")
    torch.save({"format": FORMAT, "config": [1, 2], "state_dict": state}, root / "list_config.pt")
    return root


def check_one_line(capsys, code: int, command: str, path) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith(f"invfold {command}: error: {path}"), err
    return err


@pytest.mark.parametrize("command", ["design", "score"])
def test_a_truncated_onnx_model_is_one_line(files, tmp_path, capsys, command):
    model = files / "truncated.onnx"
    out = tmp_path / ("d.fasta" if command == "design" else "s.csv")
    code = main([command, str(model), str(files / "chain_set.jsonl"), "--out", str(out)])
    assert "an ONNX model written by invfold export" in check_one_line(capsys, code, command, model)


@pytest.mark.parametrize("name", ["no_config.pt", "list_config.pt"])
def test_a_model_file_without_its_config_is_one_line(files, tmp_path, capsys, name):
    model = files / name
    for command, args in (
        ("design", [str(files / "chain_set.jsonl"), "--out", str(tmp_path / "d.fasta")]),
        ("export", ["--out", str(tmp_path / "m.onnx")]),
    ):
        code = main([command, str(model), *args])
        assert "field 'config': expected the model's config" in check_one_line(capsys, code, command, model)
    assert not (tmp_path / "d.fasta").exists() and not (tmp_path / "m.onnx").exists()


def test_as_a_real_command(files, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for model in ("truncated.onnx", "no_config.pt"):
        result = subprocess.run(
            [sys.executable, "-m", "invfold", "design", str(files / model), str(files / "chain_set.jsonl"),
             "--out", str(tmp_path / "d.fasta")],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
