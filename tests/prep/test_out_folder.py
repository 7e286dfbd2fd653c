"""`invfold prep --out DIR` never deletes what prep did not write. A folder holding anyone
else's files (an `.arrow` of their own included) is refused with one line and left exactly as it
was (entries, bytes, mode, inode); `--out .` is no exception. An empty folder is filled in place
(same inode, mode and group); an earlier prep output is replaced whole, keeping its mode. A file,
or a device such as /dev/null, named by `--out` is one line, exit 2."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import content_digest, open_prepared
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set
from invfold.errors import ConfigError


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic_set(tmp_path_factory.mktemp("in"), SyntheticConfig(num_chains=16, seed=4, median_length=60))


def _prep_command(data, out, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "INVFOLD_NO_PROGRESS": "1"}
    argv = [sys.executable, "-m", "invfold", "prep", str(data.chain_set), "--split-file", str(data.splits)]
    return subprocess.run([*argv, "--out", str(out)], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[-1].startswith("invfold prep: error: ") and [x for x in lines if ": error: " in x] == lines[-1:]
    return lines[-1]


def _snapshot(folder) -> tuple:
    """Everything a refusal must leave alone: the folder's inode and mode, and each entry's bytes."""
    st = os.stat(folder)
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    return st.st_ino, stat.S_IMODE(st.st_mode), files


def _users_folder(folder):
    folder.mkdir()
    (folder / "mydataset.arrow").write_bytes(b"someone else's Arrow file")
    (folder / "notes.txt").write_text("my notes")
    os.chmod(folder, 0o2775)
    return folder


def test_a_folder_holding_someone_elses_files_is_refused_and_left_as_it_was(tmp_path, data):
    folder = _users_folder(tmp_path / "mine")
    before = _snapshot(folder)
    line = _one_error_line(_prep_command(data, folder, tmp_path))
    assert "--out" in line and "'mydataset.arrow'" in line and "'notes.txt'" in line and "another folder" in line
    assert _snapshot(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no staging folder left beside it


def test_out_dot_in_a_folder_of_someone_elses_files_is_refused(tmp_path, data):
    folder = _users_folder(tmp_path / "mine")
    before = _snapshot(folder)
    line = _one_error_line(_prep_command(data, ".", folder))
    assert "'mydataset.arrow'" in line
    assert _snapshot(folder) == before


def test_out_dot_in_an_empty_folder_fills_it_in_place(tmp_path, data):
    folder = tmp_path / "empty"
    folder.mkdir()
    os.chmod(folder, 0o2750)
    inode = os.stat(folder).st_ino
    result = _prep_command(data, ".", folder)
    assert result.returncode == 0, result.stderr[-3000:]
    st = os.stat(folder)
    assert (st.st_ino, stat.S_IMODE(st.st_mode)) == (inode, 0o2750)
    prepared = open_prepared(folder)
    assert content_digest(folder, prepared.datasets) == prepared.digest
    assert len(prepared.open("train")) > 0


@pytest.mark.parametrize("kind", ["file", "dev-null"])
def test_out_naming_a_file_or_a_device_is_one_line(tmp_path, data, kind):
    target = tmp_path / "file.txt" if kind == "file" else "/dev/null"
    if kind == "file":
        target.write_text("not a folder")
    line = _one_error_line(_prep_command(data, target, tmp_path))
    assert f"--out {target}: expected a folder" in line
    if kind == "file":
        assert target.read_text() == "not a folder"


def _cfg(data, out) -> PrepConfig:
    return PrepConfig(input=str(data.chain_set), split_file=str(data.splits), out=str(out))


def test_an_earlier_prep_output_with_a_file_added_is_refused(tmp_path, data):
    out = tmp_path / "prepared"
    run_prep(_cfg(data, out))
    (out / "README.txt").write_text("about this set")
    before = _snapshot(out)
    with pytest.raises(ConfigError, match=r"holds 1 entry prep did not write \('README\.txt'\)"):
        run_prep(_cfg(data, out))
    assert _snapshot(out) == before


def test_an_earlier_prep_output_is_replaced_keeping_its_mode(tmp_path, data):
    out = tmp_path / "prepared"
    first = run_prep(_cfg(data, out))
    os.chmod(out, 0o2751)
    second = run_prep(_cfg(data, out))
    assert second.digest == first.digest == open_prepared(out).digest
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o2751


def test_a_new_folder_gets_the_mode_mkdir_gives_not_a_private_one(tmp_path, data):
    umask = os.umask(0o027)
    try:
        run_prep(_cfg(data, tmp_path / "new"))
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o750
