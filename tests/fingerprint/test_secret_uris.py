"""Credentials inside URIs (userinfo, presigned signatures, tokens) never leave the process:
fingerprint and prep run on a loopback HTTP URL carrying `user:password@` and a signature query
(the static server ignores both), against the real MLflow server; the secrets appear in no MLflow
param or tag, no card, no log line and no error message, a library's included (a real `invfold`
whose s3:// URI botocore quotes). display_uri is the one redaction; what it hides, `redact` hides
wherever it appears."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from mlflow import MlflowClient

from invfold import storage
from invfold.components.fingerprint.step import fingerprint_step
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set
from invfold.components.tracking import RunContext, Tracker
from invfold.errors import InputError

PASSWORD, SIGNATURE, TOKEN = "hunter2-pw", "5ec7e7516a", "t0k3n-abc"


def _secret_url(base: str, name: str) -> str:
    host = base.removeprefix("http://")
    return f"http://reader:{PASSWORD}@{host}/{name}?X-Amz-Signature={SIGNATURE}&X-Amz-Credential=AKIA&token={TOKEN}"


def _no_secret(text: str, where: str) -> None:
    for secret in (PASSWORD, SIGNATURE, TOKEN):
        assert secret not in text, f"{secret!r} leaked into {where}: {text[:500]}"


def test_display_uri_hides_userinfo_and_query_values():
    shown = storage.display_uri(f"https://u:{PASSWORD}@h.example/a/b.jsonl?sig={SIGNATURE}&v=1#x")
    assert shown == "https://***@h.example/a/b.jsonl?sig=***&v=***#x"
    assert storage.display_uri("/data/set.jsonl") == "/data/set.jsonl"
    assert storage.display_uri("s3://bucket/key") == "s3://bucket/key"
    # an empty authority stays: printed as sqlite:/runs/mlflow.db it named an absolute path
    assert storage.display_uri("sqlite:///runs/mlflow.db") == "sqlite:///runs/mlflow.db"
    assert storage.display_uri("file:///tmp/x?token=t") == "file:///tmp/x?token=***"
    assert storage.redact(f"see 's3://k:{PASSWORD}@b/x' now") == "see 's3://***@b/x' now"


def test_fingerprint_and_prep_record_no_secret(tmp_path, http_server, mlflow_server, caplog):
    data = write_synthetic_set(
        http_server.root / "secret-set", SyntheticConfig(num_chains=16, seed=8, median_length=60)
    )
    base = f"{http_server.url}"
    data_url = _secret_url(base, f"secret-set/{data.chain_set.name}")
    split_url = _secret_url(base, f"secret-set/{data.splits.name}")
    run_id = uuid.uuid4().hex

    with caplog.at_level(logging.DEBUG):
        digest = fingerprint_step(data_url, split_url, run_id, "secret-run", mlflow_server, "secret-tests")
        result = run_prep(PrepConfig(input=data_url, split_file=split_url, out=str(tmp_path / "out")))
        with pytest.raises(InputError) as missing:
            run_prep(PrepConfig(input=_secret_url(base, "nope.jsonl"), out=str(tmp_path / "nope")))
    assert digest.startswith("sha256:") and result.counts["kept"] > 0  # the URLs really were read

    client = MlflowClient(mlflow_server)
    ctx = RunContext(run_id, mlflow_server, "secret-tests", "secret-run")
    with Tracker(ctx, "probe") as probe:
        runs = [client.get_run(probe.parent_run_id)] + [
            client.get_run(r.info.run_id)
            for r in client.search_runs(
                [client.get_run(probe.parent_run_id).info.experiment_id],
                filter_string=f"tags.mlflow.parentRunId = '{probe.parent_run_id}'",
            )
        ]
    recorded = [(k, v) for run in runs for k, v in {**run.data.params, **run.data.tags}.items()]
    assert dict(recorded)["data_uri"].startswith("http://***@127.0.0.1:")  # recorded, redacted
    _no_secret(json.dumps(recorded), "MLflow params/tags")
    _no_secret((tmp_path / "out" / "card.json").read_text(), "card.json")
    _no_secret((tmp_path / "out" / "card.md").read_text(), "card.md")
    _no_secret(caplog.text, "log lines")
    _no_secret(str(missing.value), "the error message")
    assert "nope.jsonl" in str(missing.value)
    shutil.rmtree(http_server.root / "secret-set")


def test_a_password_holding_a_slash_is_hidden_whole():
    """urlsplit ends the authority at the first "/", inside such a password (AWS secret keys
    hold "/"): the userinfo runs to the "@" before the host."""
    shown = storage.display_uri(f"http://alice:{PASSWORD}/PW1x@h.example/a/b.pt")
    assert shown == "http://***@h.example/a/b.pt"
    assert storage.redact(f"at s3://KEY:{PASSWORD}/{TOKEN}@bucket/x.") == "at s3://***@bucket/x."
    # what it hid is hidden where a library quotes it outside any URI (s3fs's bucket name)
    assert storage.redact(f'bucket "KEY:{PASSWORD}" and {TOKEN}') == 'bucket "***" and ***'


def test_log_records_and_their_tracebacks_hide_remembered_secrets(caplog):
    storage.display_uri(f"s3://KEY:{PASSWORD}/{TOKEN}@bucket/x")
    log = logging.getLogger("botocore.test")
    with caplog.at_level(logging.INFO):
        try:
            raise ValueError(f'Invalid bucket name "KEY:{PASSWORD}"')
        except ValueError:
            log.exception("listing %s failed", f"KEY:{PASSWORD}/{TOKEN}")
    assert "listing *** failed" in caplog.text and 'Invalid bucket name "***"' in caplog.text
    _no_secret(caplog.text, "a log record and its traceback")


S3_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfi"  # holds "/", as AWS secret keys do


def _invfold(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {"AWS_EC2_METADATA_DISABLED": "true"}
    return subprocess.run(
        [sys.executable, "-m", "invfold", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


@pytest.mark.parametrize("verbose", [False, True])
def test_a_libraries_error_is_one_redacted_line_and_its_traceback_only_with_v(tmp_path, verbose):
    """botocore refuses `KEY:SECRET` (s3fs's bucket of a userinfo whose secret holds "/") and
    quotes it in its message: one line names the error's type, nothing of the secret shows,
    with -v neither in the traceback."""
    uri = f"s3://AKIAEXAMPLEKEYID:{S3_SECRET_KEY}@bucket/set.jsonl"
    done = _invfold(*(["-v"] if verbose else []), "prep", uri, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    for secret in ("AKIAEXAMPLEKEYID", *S3_SECRET_KEY.split("/")):
        assert secret not in done.stderr + done.stdout, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("invfold prep: error: ParamValidationError: ") and 'bucket name "***"' in last
    if verbose:
        assert "Traceback (most recent call last)" in done.stderr
    else:
        assert "Traceback" not in done.stderr and last.endswith("-v shows the traceback)")
