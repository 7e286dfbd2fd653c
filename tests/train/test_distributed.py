"""The NCCL watchdog defaults set before a GPU process group starts. torch 2.9 renamed the flight
recorder's variables (TORCH_NCCL_TRACE_BUFFER_SIZE -> TORCH_FR_BUFFER_SIZE,
TORCH_NCCL_DEBUG_INFO_TEMP_FILE -> TORCH_FR_DUMP_TEMP_FILE) and warns on the old names: an H200
run with torch 2.11 printed that warning on every rank. No GPU here, so the environment the
function leaves is what is checked; the GPU smoke (bench/gpu_smoke.sh) runs it on NCCL."""

from __future__ import annotations

import os

import pytest

from invfold.components.train import distributed

NAMES = (
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_use_the_current_names_only(clean_env, tmp_path):
    distributed._gpu_env(str(tmp_path / "traces"))
    assert os.environ["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert os.environ["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "traces" / "nccl_trace_rank_")
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in os.environ
    assert (tmp_path / "traces").is_dir()


@pytest.mark.parametrize(
    "old, new",
    [
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"),
        ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"),
    ],
)
def test_an_operator_setting_under_the_old_name_wins(clean_env, tmp_path, old, new):
    """torch reads the new name first, so setting it beside an operator's old one would override them."""
    clean_env.setenv(old, "0")
    distributed._gpu_env(str(tmp_path))
    assert os.environ[old] == "0"
    assert new not in os.environ


def test_an_operator_setting_under_the_new_name_wins(clean_env, tmp_path):
    clean_env.setenv("TORCH_FR_BUFFER_SIZE", "50")
    clean_env.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    distributed._gpu_env(None)
    assert os.environ["TORCH_FR_BUFFER_SIZE"] == "50"
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert "TORCH_FR_DUMP_TEMP_FILE" not in os.environ
