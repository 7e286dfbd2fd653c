"""A model or structure set behind a URL with credentials (`user:password@`, a presigned query:
the loopback server ignores both) is read, and the secrets reach no FASTA header, no designs
row, no summary and no design report: each names the model by its file name (credentials and
query values hidden, storage.display_uri) and shows a message through storage.redact."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from invfold.components.design.fasta import read_fasta
from invfold.components.design.step import markdown_report

PASSWORD, SIGNATURE = "d3sign-passw0rd", "9f8e7d6c5b4a"


def _secret_url(http_server, name: str) -> str:
    host = http_server.url.removeprefix("http://")
    return f"http://reader:{PASSWORD}@{host}/{name}?X-Amz-Signature={SIGNATURE}"


def _no_secret(text: str, where: str) -> None:
    for secret in (PASSWORD, SIGNATURE):
        assert secret not in text, f"{secret!r} leaked into {where}: {text[:2000]}"


def test_fasta_headers_rows_and_summaries_hold_no_secret(tmp_path, structures, model, http_server):  # noqa: F811
    jsonl, _, _ = structures
    shutil.copy(model[0], http_server.root / "secret-model.pt")
    shutil.copy(jsonl, http_server.root / "secret-chains.jsonl")
    model_url, chains_url = _secret_url(http_server, "secret-model.pt"), _secret_url(http_server, "secret-chains.jsonl")
    outputs = {}
    for out in ("one.fasta", "rows.jsonl"):
        args = ["design", model_url, chains_url, "--out", str(tmp_path / out)]
        args += ["--num-sequences", "1"] + (["--name", json.loads(jsonl.read_text().splitlines()[0])["name"]] if
                                            out.endswith(".fasta") else [])  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "invfold", *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        _no_secret(done.stdout + done.stderr, f"the output of invfold {out}")
        outputs[out] = (tmp_path / out).read_text()
    headers = [line for line in outputs["one.fasta"].splitlines() if line.startswith(">")]
    assert len(read_fasta(tmp_path / "one.fasta")) == len(headers)
    assert headers and all("model=secret-model.pt" in h for h in headers), headers
    rows = [json.loads(line) for line in outputs["rows.jsonl"].splitlines()]
    assert rows and {r["model"] for r in rows} == {"secret-model.pt"}
    summary = (tmp_path / "rows.summary.json").read_text()
    assert json.loads(summary)["structures"].startswith("http://***@127.0.0.1:")
    for name, text in {**outputs, "summary": summary}.items():
        _no_secret(text, name)
    for name in ("secret-model.pt", "secret-chains.jsonl"):
        (http_server.root / name).unlink()


def test_the_design_report_hides_credentials_in_skip_messages():
    message = f"{'http://reader:' + PASSWORD + '@h.example/list.txt?sig=' + SIGNATURE}:3: expected a PDB file"
    summary = {
        "model": {},
        "designs": 0,
        "structures_designed": 0,
        "shards": 1,
        "skipped": [{"name": "x", "reason": "missing_file", "message": message}],
    }
    report = markdown_report([], summary, {"designs": 0})
    assert "http://\\*\\*\\*@h.example/list.txt?sig=\\*\\*\\*" in report
    _no_secret(report, "the design report")
