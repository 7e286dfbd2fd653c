"""Record names come from the input and reach file names, FASTA headers and the design report.
Names that differ only in characters a file name cannot hold (`x/y`, `x:y`, `x y`) each get
their own FASTA file (none of their designs lost), a newline cannot forge a FASTA record, a path
cannot leave the output folder, and the report escapes names in its table."""

from __future__ import annotations

import json

import pytest

from invfold.components.design import DesignConfig
from invfold.components.design.batch import design_batch, safe_name
from invfold.components.design.fasta import read_fasta
from invfold.components.design.step import markdown_report

NAMES = ["x/y", "x:y", "x y", "../../escape\n>forged sample=0"]


@pytest.mark.slow
def test_names_that_collapse_to_one_file_name_keep_all_their_designs(tmp_path, structures, model):  # noqa: F811
    jsonl, _, _ = structures
    lines = jsonl.read_text().splitlines()
    renamed = tmp_path / "renamed.jsonl"
    entries = [json.loads(lines[i % len(lines)]) for i in range(len(NAMES))]
    for entry, name in zip(entries, NAMES, strict=True):
        entry["name"] = name
    renamed.write_text("".join(json.dumps(e) + "\n" for e in entries))
    out = tmp_path / "designs"
    cfg = DesignConfig(model=str(model[0]), structure=str(renamed), out=str(out), num_sequences=2)
    summary = design_batch(cfg, progress=False)
    assert summary.designed == len(NAMES) and not summary.skipped
    files = sorted(p for p in out.iterdir() if p.suffix == ".fasta")
    assert len(files) == len(NAMES) == len(set(summary.outputs))  # one file per record
    assert sorted(tmp_path.iterdir()) == sorted([renamed, out])  # nothing written outside `out`
    for path in files:
        records = read_fasta(path)
        assert len(records) == 2 and all(">" not in r.name and "\n" not in r.name for r in records)
    assert sorted(safe_name(n) + ".fasta" for n in NAMES) == [p.name for p in files]


def test_the_report_escapes_names_and_messages():
    rows = [
        {"name": "a|b<img src=x onerror=alert(1)>", "sample": 0, "temperature": 0.1, "mean_nll": 1.0,
         "recovery": 0.5, "sequence": "ACD"},
    ]  # fmt: skip
    summary = {
        "model": {},
        "designs": 1,
        "structures_designed": 1,
        "shards": 1,
        "skipped": [{"name": "evil\n| forged | row |", "reason": "bad", "message": "[click](http://x) `code`"}],
    }
    report = markdown_report(rows, summary, {"designs": 1})
    assert "<img" not in report and "&lt;img src=x onerror=alert\\(1\\)&gt;" in report
    assert "\n| forged" not in report and "evil \\| forged \\| row \\|" in report
    assert "[click](http" not in report and "\\`code\\`" in report
    table_rows = [line for line in report.splitlines() if line.startswith("| a") or line.startswith("| evil")]
    assert len(table_rows) == 2
