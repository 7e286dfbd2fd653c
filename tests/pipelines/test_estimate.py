"""`invfold run` prints an estimate of the whole run before it starts: the data's size counted
right, each step's seconds from its rate, and the line where the CLI's other messages go."""

from __future__ import annotations

import gzip
import json

import pytest

from invfold.cli import main
from invfold.components.prep.config import PrepConfig
from invfold.components.protein.jsonl import read_chain_set
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS
from invfold.errors import ConfigError
from invfold.pipelines import estimate
from invfold.pipelines.estimate import STEP_RATES, DataSize, chain_set_size, estimate_line, step_seconds


def test_the_sample_is_counted_as_the_reader_reads_it():
    lengths = {r.name: len(r) for r in read_chain_set(str(SAMPLE_CHAIN_SET))}
    split = json.loads(SAMPLE_SPLITS.read_text())
    size = chain_set_size(str(SAMPLE_CHAIN_SET), str(SAMPLE_SPLITS))
    assert (size.chains, size.residues) == (len(lengths), sum(lengths.values()))
    assert size.validation_residues == sum(lengths[n] for n in split["validation"])
    assert size.test_residues == sum(lengths[n] for n in split["test"])
    no_split = chain_set_size(str(SAMPLE_CHAIN_SET))
    assert no_split.test_residues == int(estimate.DEFAULT_FRACTIONS[2] * size.residues)
    assert no_split.chains == size.chains


def test_what_cannot_be_counted_gives_no_size(tmp_path):
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00 not gzip")
    corrupt = tmp_path / "corrupt.jsonl.gz"  # a gzip header, then data zlib rejects (zlib.error, not OSError)
    corrupt.write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    plain = tmp_path / "set.jsonl"
    plain.write_text(json.dumps({"name": "1abc.A", "seq": "MKV"}) + "\n")
    assert chain_set_size("s3://bucket/set.jsonl.gz") is None
    assert chain_set_size(str(tmp_path)) is None
    assert chain_set_size(str(broken)) is None
    assert chain_set_size(str(corrupt)) is None
    assert chain_set_size(str(plain)) == DataSize(1, 3, 0, 0)


def test_each_step_is_its_fixed_part_plus_its_rate_times_the_residues_it_reads():
    size = DataSize(chains=100, residues=20_000, validation_residues=2_000, test_residues=3_000)
    seconds = step_seconds(size, time_budget_s=60.0)
    reads = {"all": 20_000, "validation": 2_000, "test": 3_000, "none": 0}
    for step, (fixed, rate, what) in STEP_RATES.items():
        expected = 60.0 if step == "train" else fixed + rate * reads[what]
        assert seconds[step] == pytest.approx(expected), step
    assert seconds["evaluate"] > STEP_RATES["evaluate"][0]  # the test split adds to it
    unknown = step_seconds(None, time_budget_s=0.0)
    assert unknown["train"] is None and unknown["evaluate"] is None and unknown["prep"] is None
    assert unknown["export-and-register"] == STEP_RATES["export-and-register"][0]


def test_the_line_sums_what_is_known_and_names_what_is_not():
    size = DataSize(10, 1_000, 100, 100)
    total = sum(step_seconds(size, 120.0).values())
    line = estimate_line(size, 120.0)
    minutes, seconds = divmod(round(total), 60)
    assert line.startswith(f"estimate: about {minutes} min {seconds} s (10 chains, 1,000 residues)")
    assert "train 2 min 0 s (its budget)" in line and "plus" not in line
    line = estimate_line(None, 0.0, max_steps=40)
    assert "plus fingerprint, prep, train, evaluate, compare" in line and "train 40 steps" in line


@pytest.fixture
def stopped_run(monkeypatch):
    """A stand-in for the local runner that stops `invfold run` right after its start: what is
    printed before the pipeline starts is under test here; the real run takes minutes and
    tests/pipelines/test_local_pipeline.py checks the same line in it."""
    from invfold.pipelines import local

    def stop(params, **kwargs):
        raise ConfigError("the stand-in runner stops here")

    monkeypatch.setattr(local, "run_local", stop)


def _run(*flags: str) -> list[str]:
    return ["run", *flags, "--data", str(SAMPLE_CHAIN_SET), "--split-file", str(SAMPLE_SPLITS), "--time-budget-s", "60"]


def test_invfold_run_prints_the_estimate_before_it_starts(stopped_run, capsys):
    assert main(_run()) == 2
    out = capsys.readouterr().out
    size = chain_set_size(str(SAMPLE_CHAIN_SET), str(SAMPLE_SPLITS))
    assert estimate_line(size, 60.0) in out.replace("\n", "")
    assert out.index("invfold run:") < out.index("estimate: about")


@pytest.mark.parametrize("flags", [("--json",), ("-q",)])
def test_the_estimate_goes_where_the_other_messages_go(stopped_run, capsys, flags):
    """--json: stdout holds only the JSON object, the estimate goes to stderr with the other
    lines; --quiet quiets logging, not the command's own lines: the estimate stays with them."""
    assert main([*flags, *_run()]) == 2
    captured = capsys.readouterr()
    if "--json" in flags:
        assert json.loads(captured.out)["exit_code"] == 2
        assert "estimate: about" in captured.err and "invfold run:" in captured.err
    else:
        assert "estimate: about" in captured.out and "invfold run:" in captured.out


def test_rates_are_per_residue_of_what_each_step_reads():
    assert set(STEP_RATES) >= {"fingerprint", "prep", "train", "evaluate", "compare", "export-and-register"}
    assert {what for _, _, what in STEP_RATES.values()} <= {"all", "validation", "test", "none"}
    assert estimate.DEFAULT_FRACTIONS == PrepConfig(input="x", out="y").split_fractions


def test_a_plain_jsonl_and_a_gzipped_one_count_alike(tmp_path):
    records = [json.dumps({"name": f"x{i}.A", "seq": "A" * (10 + i)}) + "\n" for i in range(3)]
    (tmp_path / "a.jsonl").write_text("".join(records))
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as fh:
        fh.writelines(records)
    assert chain_set_size(str(tmp_path / "a.jsonl")) == chain_set_size(str(tmp_path / "a.jsonl.gz"))
    assert chain_set_size(str(tmp_path / "a.jsonl")).residues == 33


def test_the_json_result_carries_the_estimate(monkeypatch, capsys, tmp_path):
    """A stand-in runner that returns an empty finished run at once (the real one takes minutes;
    tests/pipelines/test_local_pipeline.py runs it): the result object holds the estimate's sum."""
    from invfold.pipelines import local
    from invfold.pipelines.cli import run_estimate

    def finished(params, **kwargs):
        return local.LocalRun(str(tmp_path), str(tmp_path), None, "sqlite:///x.db", "invfold", None, "m", None, 1.0)

    monkeypatch.setattr(local, "run_local", finished)
    assert main(["--json", *_run()]) == 0
    captured = capsys.readouterr()
    params = {"data_uri": str(SAMPLE_CHAIN_SET), "split_file": str(SAMPLE_SPLITS), "time_budget_s": 60.0}
    expected = run_estimate(params)
    assert json.loads(captured.out)["estimate_s"] == expected["seconds"] > 60.0
    assert expected["line"] in captured.err.replace("\n", "")


def test_the_design_pipeline_estimate_counts_the_designed_residues():
    """The shards' time grows with residues x sequences x temperatures; the other steps are fixed;
    a set that cannot be counted leaves the shards out and says so."""
    size = chain_set_size(str(SAMPLE_CHAIN_SET))
    one, four = estimate.design_step_seconds(size, 1), estimate.design_step_seconds(size, 4)
    fixed, rate = estimate.DESIGN_SHARD_RATE
    assert four["design-shard"] - one["design-shard"] == pytest.approx(rate * size.residues * 3)
    assert {k: v for k, v in one.items() if k != "design-shard"} == {
        k: v for k, v in estimate.DESIGN_STEP_SECONDS.items() if k != "design-shard"
    }
    line = estimate.design_estimate_line(size, 4)
    assert line.startswith("estimate: about ") and f"{size.chains:,} chains, {size.residues:,} residues" in line
    assert "fetch-model 23 s" in line and "design-shard ?" not in line
    unknown = estimate.design_estimate_line(None, 4)
    assert "data size unknown" in unknown and "plus design-shard" in unknown and "design-shard ?" in unknown
