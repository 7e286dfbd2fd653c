"""Publishing a prep output: a reader sees the old complete folder or the new complete one,
never a mix, with the old folder's mode. Each rename of the publish (the renameat2 exchange, and the two renames of the
fallback where the exchange is unsupported) is failed in turn, k = 1, 2, ...: prep raises, and
the folder is whole, with every dataset the index names present and matching its digest. Staging
folders are removed, a crashed run's leftovers too."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from invfold.components.prep import run as prep_run
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import INDEX_FILE, content_digest, open_prepared
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    old = write_synthetic_set(root / "old", SyntheticConfig(num_chains=16, seed=1, median_length=60))
    new = write_synthetic_set(root / "new", SyntheticConfig(num_chains=20, seed=2, median_length=60))
    return old, new


def _prep(data, out):
    return run_prep(PrepConfig(input=str(data.chain_set), split_file=str(data.splits), out=str(out)))


def _whole(out) -> str:
    """The folder's digest, after checking it is complete: what open_prepared and a trainer see."""
    prepared = open_prepared(out)
    assert content_digest(prepared.root, prepared.datasets) == prepared.digest
    for name in prepared.datasets:
        assert len(prepared.open(name)) == prepared.index["datasets"][name]["rows"]
    return prepared.digest


class _FailAt:
    """Counts every rename the publish makes (os.rename, os.replace, the exchange) and raises at
    the k-th; k = 0 fails none."""

    def __init__(self, monkeypatch, k: int, exchange: bool):
        self.k, self.calls = k, 0
        for name in ("rename", "replace"):
            real = getattr(os, name)
            monkeypatch.setattr(prep_run.os, name, self._wrap(real))
        real_exchange = prep_run._exchange if exchange else (lambda a, b: False)
        monkeypatch.setattr(prep_run, "_exchange", self._wrap(real_exchange))

    def _wrap(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            if self.calls == self.k:
                raise OSError(f"injected failure of rename {self.k}")
            return real(*args, **kwargs)

        return call


def _leftovers(out) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.prep-"))


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "two-renames"])
def test_failing_each_rename_leaves_the_old_or_the_new_complete_folder(tmp_path, inputs, monkeypatch, exchange):
    old_data, new_data = inputs
    out = tmp_path / "prepared"
    old_digest = _prep(old_data, out).digest
    os.chmod(out, 0o2750)  # the folder's mode goes with it, whichever folder is published

    with monkeypatch.context() as patch:
        counting = _FailAt(patch, 0, exchange)
        new_digest = _prep(new_data, tmp_path / "reference").digest
        calls_fresh = counting.calls
    assert new_digest != old_digest and calls_fresh >= 1

    k, seen = 1, set()
    while True:
        with monkeypatch.context() as patch:
            failing = _FailAt(patch, k, exchange)
            try:
                _prep(new_data, out)
                failed = False
            except OSError as err:
                assert f"injected failure of rename {k}" in str(err)
                failed = True
        digest = _whole(out)
        seen.add(digest)
        assert digest == (old_digest if failed else new_digest)
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o2750
        assert _leftovers(out) == [] and not list(out.glob(".prep-*"))
        if not failed:
            break
        _prep(old_data, out)  # back to the old folder for the next k
        k += 1
    assert k == failing.calls + 1 and failing.calls == (1 if exchange else 3)  # each one failed once
    assert seen == {old_digest, new_digest}


def test_a_crashed_runs_staging_folders_are_removed(tmp_path, inputs):
    out = tmp_path / "prepared"
    _prep(inputs[0], out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    crashed = tmp_path / (prep_run._staging_prefix(out, dead_pid) + "abc")
    crashed.mkdir()
    (crashed / "train.arrow").write_bytes(b"half")
    old_style = out / ".prep-xyz"  # where an older invfold staged, inside the output folder
    old_style.mkdir()
    alive = tmp_path / (prep_run._staging_prefix(out, os.getppid()) + "def")  # a live process's: kept
    alive.mkdir()
    _prep(inputs[1], out)
    assert not crashed.exists() and not old_style.exists() and alive.exists()
    assert json.loads((out / INDEX_FILE).read_text())["digest"] == _whole(out)
