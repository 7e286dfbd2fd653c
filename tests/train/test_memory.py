"""The ranks' allocator and the pre-start memory warning."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

from invfold import allocator
from invfold.components.model.config import ModelConfig
from invfold.components.train import memory
from invfold.components.train.memory import allocator_env, estimated_peak_gb, memory_warning
from tests.support.training import run_job, tiny_config

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

HAS_JEMALLOC = ctypes.util.find_library("jemalloc") is not None


@pytest.mark.parametrize("variable", ["LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_CONF"])
def test_an_allocator_the_user_chose_is_left_alone(variable):
    assert allocator_env({variable: "anything"}) == {}


def test_without_jemalloc_the_ranks_keep_glibc(monkeypatch):
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda name: None)
    assert allocator_env({}) == {}


@pytest.mark.skipif(not HAS_JEMALLOC, reason="libjemalloc2 is not installed (make test installs it)")
def test_a_process_started_with_the_allocator_env_runs_on_jemalloc_with_our_options():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_CONF")}
    env.update(allocator_env(env))
    started = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/maps').read())"], env=env, capture_output=True, text=True
    )
    assert "libjemalloc" in started.stdout
    assert "<jemalloc>" not in started.stderr  # jemalloc accepts every MALLOC_CONF option we give it
    plain = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/maps').read())"],
        env={k: v for k, v in env.items() if k != "LD_PRELOAD"},
        capture_output=True,
        text=True,
    ).stdout
    assert "libjemalloc" not in plain


def test_the_estimate_grows_with_the_work_of_a_batch_and_the_processes():
    default = ModelConfig.preset("default")
    assert estimated_peak_gb(default, 3000, 2) == pytest.approx(2 * estimated_peak_gb(default, 3000, 1))
    assert estimated_peak_gb(default, 1500, 1) < estimated_peak_gb(default, 3000, 1)
    sizes = [estimated_peak_gb(ModelConfig.preset(p), 3000, 1) for p in ("tiny", "small", "default", "proteinmpnn")]
    assert sizes == sorted(sizes)


def test_no_warning_when_the_job_fits():
    assert memory_warning(ModelConfig.preset("small"), 3000, 2, available_gb=24.0) is None


def test_the_warning_names_a_token_budget_that_fits():
    model = ModelConfig.preset("default")
    need = estimated_peak_gb(model, 3000, 2)
    available = need * 0.6
    warning = memory_warning(model, 3000, 2, available_gb=available)
    assert f"{need:.1f} GB" in warning and f"{available:.1f} GB" in warning
    budget = int(warning.split("--tokens-per-batch to ")[1].split()[0])
    assert 500 <= budget < 3000
    assert estimated_peak_gb(model, budget, 2) <= available < estimated_peak_gb(model, budget + 100, 2)


def test_the_warning_says_to_use_fewer_processes_when_no_budget_fits():
    warning = memory_warning(ModelConfig.preset("default"), 3000, 8, available_gb=8.0)
    assert "lower --nproc" in warning and "--tokens-per-batch to" not in warning


def test_train_warns_before_it_starts_and_still_runs(sample_prepared, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(memory, "machine_memory_gb", lambda: 0.5)
    cfg = tiny_config(sample_prepared, tmp_path / "out", max_steps=1, validate_every=0, checkpoint_every=0)
    assert run_job(cfg, nproc=1) == 0
    err = capfd.readouterr().err
    assert "invfold train: warning: this job needs about" in err and "0.5 GB" in err
    assert (tmp_path / "out" / "model.pt").exists()
