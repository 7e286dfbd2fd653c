"""Credentials inside URIs (userinfo, presigned signatures, tokens) never leave the process:
fingerprint and prep run on a loopback HTTP URL carrying `user:password@` and a signature query
(the static server ignores both), against the real MLflow server; the secrets appear in no MLflow
param or tag, no card, no log line and no error message. display_uri is the one redaction."""

from __future__ import annotations

import json
import logging
import shutil
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
