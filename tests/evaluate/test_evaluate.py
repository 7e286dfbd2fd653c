"""evaluate() on the prepared sample with small models: the metrics' definitions, the subsets,
the confusion matrix, and the self-contained report."""

from __future__ import annotations

import argparse
import base64
import json
import math

import numpy as np
import pytest
import torch

from invfold.components.evaluate import cli
from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
from invfold.components.evaluate.metrics import bootstrap_median, designed_sequences, score_dataset
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import open_prepared
from invfold.components.protein.batch import collate
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS
from invfold.errors import ConfigError


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("eval")
    test_names = json.loads(SAMPLE_SPLITS.read_text())["test"]
    subset = root / "test_split_first5.json"
    subset.write_text(json.dumps({"test": test_names[:5]}))
    out = root / "prepared"
    run_prep(
        PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), subset_files=[str(subset)], out=str(out))
    )
    return str(out)


@pytest.fixture(scope="module", params=["one_shot", "autoregressive"])
def model_path(request, tmp_path_factory) -> str:
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding=request.param))
    path = tmp_path_factory.mktemp("model") / f"{request.param}.pt"
    save_model(path, model)
    return str(path)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_metrics_files_subsets_and_report(prepared, model_path, tmp_path):
    metrics = evaluate(EvaluateConfig(model_path=model_path, data=prepared, out=str(tmp_path)))
    data = open_prepared(prepared)
    subset_name = next(d for d in data.datasets if d not in ("train", "validation", "test"))
    results = metrics["datasets"]
    assert {"test", "validation", "test_short_L100", "test_single_chain", subset_name} <= results.keys()
    assert results["test"]["proteins"] == len(data.open("test"))
    assert results["validation"]["proteins"] == len(data.open("validation"))  # what the champion is chosen on
    assert results[subset_name]["proteins"] == 5
    assert math.isclose(results["test"]["perplexity"], math.exp(results["test"]["loss"]))
    assert 0.0 <= results["test"]["recovery"] <= 1.0

    confusion = json.loads((tmp_path / "confusion.json").read_text())
    matrix = np.array(confusion["matrix"])
    assert matrix.shape == (20, 20) and confusion["labels"][0] == "A"
    assert matrix.sum() == results["test"]["residues"]
    # pooled recovery from the confusion diagonal matches the per-protein sums
    lengths = sum(r["proteins"] for r in metrics["recovery_by_length"])
    assert lengths == results["test"]["proteins"]

    baseline = metrics["baseline"]
    assert baseline["letter"] in "ACDEFGHIKLMNPQRSTVWY" and 0 < baseline["recovery"]["test"] < 0.3

    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["datasets"]["test"] == results["test"]
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "<table>" in html
    png = html.split("data:image/png;base64,")[1].split('"')[0]
    assert base64.b64decode(png).startswith(b"\x89PNG")
    assert (tmp_path / "confusion.png").stat().st_size > 1000
    assert "| test |" in (tmp_path / "report.md").read_text()


def test_per_protein_table_and_distribution_in_csv_and_report(prepared, tmp_path):
    """A biologist's questions: which proteins did it design well, how are they spread; and the
    report renders with a real Markdown renderer, every table in a box that scrolls sideways."""
    import csv

    torch.manual_seed(0)
    model = tmp_path / "m.pt"
    save_model(model, InverseFoldingModel(ModelConfig.preset("tiny")))
    out = tmp_path / "eval"
    metrics = evaluate(EvaluateConfig(model_path=str(model), data=prepared, out=str(out), designs_per_protein=0))
    rows = list(csv.DictReader((out / "per_protein.csv").open()))
    test = open_prepared(prepared).open("test")
    assert [r["protein"] for r in rows] == [test[i].name for i in range(len(test))]
    assert list(rows[0]) == ["protein", "length", "chains", "scored_residues", "recovery", "perplexity"]
    scored = [float(r["recovery"]) for r in rows if r["recovery"]]
    assert len(scored) == metrics["datasets"]["test"]["proteins"]
    assert float(np.median(scored)) == pytest.approx(metrics["datasets"]["test"]["recovery"], abs=1e-6)
    assert sum(int(r["scored_residues"]) for r in rows) == metrics["datasets"]["test"]["residues"]

    report = (out / "report.md").read_text()
    per_protein = report.split("## Per protein (test)")[1]
    best = max(rows, key=lambda r: float(r["recovery"] or -1))
    assert per_protein.count("\n| ") == len(rows) + 1  # header + one line per protein
    assert per_protein.split("|---", 1)[1].splitlines()[1].startswith(f"| {best['protein']} |")  # best first
    assert (out / "recovery_distribution.png").read_bytes().startswith(b"\x89PNG")

    html = (out / "report.html").read_text()
    tables = html.count("<table>")
    assert tables >= 6 and html.count('<div class="table-scroll') == tables  # every table scrolls sideways
    assert '<div class="table-scroll tall">' in html  # the per-protein table: a long one scrolls down too
    assert ".table-scroll{overflow-x:auto" in html
    assert f"<td>{best['protein']}</td>" in html and "|---" not in html and "<h2>Per protein (test)</h2>" in html
    assert html.count('<img src="data:image/png;base64,') == 3 and 'alt="per-protein recovery"' in html


def test_recovery_is_of_designed_sequences_not_teacher_forced(prepared, model_path):
    """Autoregressive designs must not depend on the native sequence given as S."""
    from invfold.components.model.io import load_model

    model = load_model(model_path)
    test = open_prepared(prepared).open("test")
    batch = collate([test[i] for i in range(3)])
    designed = designed_sequences(model, batch, seed=5)
    batch.S = torch.randint(0, 20, batch.S.shape)  # scramble the natives
    assert torch.equal(designed, designed_sequences(model, batch, seed=5))


def test_scores_are_seeded_and_rank_splits_sum_to_the_whole(prepared, model_path):
    from invfold.components.model.io import load_model

    model = load_model(model_path)
    test = open_prepared(prepared).open("test")
    rows = list(range(len(test)))
    whole = score_dataset(model, test, rows, 4000, seed=1)
    again = score_dataset(model, test, rows, 4000, seed=1)
    assert np.array_equal(whole.correct, again.correct) and np.allclose(whole.nll, again.nll)
    halves = [score_dataset(model, test, rows[r::2], 4000, seed=1) for r in (0, 1)]
    assert np.allclose(halves[0].count + halves[1].count, whole.count)
    if not model.cfg.autoregressive:  # one-shot designs do not depend on batch composition
        assert np.allclose(halves[0].correct + halves[1].correct, whole.correct)


def test_cli_writes_the_report(prepared, model_path, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["evaluate", model_path, "--data", prepared, "--out", str(tmp_path), "--dataset", "test"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    shown = args.result["datasets"]  # what --json prints
    assert (tmp_path / "report.html").exists()
    saved = json.loads((tmp_path / "metrics.json").read_text())["datasets"]
    # stdout and --json carry the recovery's interval as metrics.json has it
    for key in ("perplexity", "recovery", "recovery_ci_low", "recovery_ci_high", "proteins"):
        assert shown["test"][key] == saved["test"][key]
    assert shown["test"]["recovery_ci_low"] <= shown["test"]["recovery"] <= shown["test"]["recovery_ci_high"]
    low, high = saved["test"]["recovery_ci_low"], saved["test"]["recovery_ci_high"]
    assert f"recovery {saved['test']['recovery']:.4f} [{low:.4f}, {high:.4f}]" in out.splitlines()[0]
    assert set(saved) == {
        "test",
        "test_short_L100",
        "test_single_chain",
    }


def test_unknown_dataset_is_a_clear_error(prepared, model_path, tmp_path):
    with pytest.raises(ValueError, match=r"no dataset\(s\) \['nope'\]"):
        evaluate(EvaluateConfig(model_path=model_path, data=prepared, out=str(tmp_path), datasets=["nope"]))


def test_recall_burial_secondary_structure_in_metrics_and_report(prepared, model_path, tmp_path):
    metrics = evaluate(EvaluateConfig(model_path=model_path, data=prepared, out=str(tmp_path), designs_per_protein=2))
    matrix = np.array(json.loads((tmp_path / "confusion.json").read_text())["matrix"])
    residues = metrics["datasets"]["test"]["residues"]
    recall = metrics["recall_by_residue"]
    assert list(recall) == list("ACDEFGHIKLMNPQRSTVWY")
    for i, r in enumerate(recall.values()):
        assert r["residues"] == matrix[i].sum()
        assert (
            r["recall"] is None if not r["residues"] else r["recall"] == pytest.approx(matrix[i, i] / matrix[i].sum())
        )
    burial = metrics["recovery_by_burial"]
    assert list(burial) == ["core", "boundary", "surface"]
    assert sum(b["residues"] for b in burial.values()) == residues  # every observed residue has a CB
    correct = sum(b["recovery"] * b["residues"] for b in burial.values() if b["residues"])
    assert correct == pytest.approx(np.trace(matrix))
    secondary = metrics["recovery_by_secondary_structure"]
    assert list(secondary) == ["helix", "strand", "coil"]
    assert 0.9 * residues < sum(s["residues"] for s in secondary.values()) <= residues  # chain ends, breaks
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["recovery_by_burial"] == burial and saved["recall_by_residue"] == recall
    report = (tmp_path / "report.md").read_text()
    assert "## Recovery by burial" in report and "| helix |" in report and "## Recall by native residue" in report
    assert "<th>burial</th>" in (tmp_path / "report.html").read_text()


def test_diversity_among_designs(prepared, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "one_shot.pt"
    save_model(path, InverseFoldingModel(ModelConfig.preset("tiny", decoding="one_shot")))
    data = open_prepared(prepared)

    def diversity(temperature):
        cfg = EvaluateConfig(
            model_path=str(path),
            data=prepared,
            out=str(tmp_path / f"t{temperature}"),
            designs_per_protein=3,
            diversity_temperature=temperature,
        )
        return evaluate(cfg)["diversity"]

    cold, hot = diversity(1e-6), diversity(10.0)
    assert cold["proteins"] == hot["proteins"] == len(data.open("test"))
    assert cold["pairwise_difference"] == 0.0  # a one-shot model at T -> 0 designs its argmax every time
    assert hot["pairwise_difference"] > 0.5  # near-uniform letters: most positions differ
    assert "designs per protein" in (tmp_path / "t10.0" / "report.md").read_text()


def test_a_prepared_set_with_only_a_test_split_evaluates(model_path, tmp_path):
    # an external benchmark list: no train chains, so no train composition for the constant predictor
    names = json.loads(SAMPLE_SPLITS.read_text())["test"][:6]
    split = tmp_path / "external_splits.json"
    split.write_text(json.dumps({"train": [], "validation": [], "test": names}))
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(split), out=str(tmp_path / "prepared")))
    metrics = evaluate(
        EvaluateConfig(model_path=model_path, data=str(tmp_path / "prepared"), out=str(tmp_path / "eval"))
    )
    assert metrics["datasets"]["test"]["proteins"] == 6 and "validation" not in metrics["datasets"]
    assert metrics["baseline"]["letter"] is None and "no train chains" in metrics["baseline"]["unavailable"]
    assert "Constant predictor: unavailable" in (tmp_path / "eval" / "report.md").read_text()


def test_greedy_and_diversity_designs_decoded_together_equal_separate_sample_calls(prepared, model_path):
    """score_dataset encodes each batch once and decodes the greedy and the diversity designs in
    one loop: the letters must be those of separate sample() calls with each design's own seed."""
    from invfold.components.evaluate.metrics import GREEDY_TEMPERATURE, seeded_generator
    from invfold.components.model.io import load_model

    model = load_model(model_path).eval()
    test = open_prepared(prepared).open("test")
    rows = sorted(range(4), key=lambda i: (int(test.lengths[i]), i))  # score_dataset's batch order
    scores = score_dataset(model, test, rows, 100_000, seed=3, keep_designed=True, designs=2, temperature=0.5)
    batch = collate([test[i] for i in rows])
    first = rows[0]
    greedy = model.sample(
        batch.X,
        batch.structure_mask,
        batch.residue_index,
        GREEDY_TEMPERATURE,
        generator=seeded_generator(3 + first, "cpu"),
    )
    for d in range(2):
        sampled = model.sample(
            batch.X,
            batch.structure_mask,
            batch.residue_index,
            0.5,
            generator=seeded_generator(3 + first + 7919 * (d + 1), "cpu"),
        )
        for j, row in enumerate(rows):
            n = int(batch.lengths[j])
            assert np.array_equal(scores.samples[row][d], sampled[j, :n].numpy())
    for j, row in enumerate(rows):
        assert np.array_equal(scores.designed[row], greedy[j, : int(batch.lengths[j])].numpy())
    assert any(not np.array_equal(scores.samples[r][0], scores.samples[r][1]) for r in rows)


def test_several_decoding_orders_are_decoded_together_and_averaged(prepared, model_path):
    """orders=K: K greedy designs per chain, one per seeded decoding order, from one decoding loop;
    a chain's recovery is their mean and order 0 is the one-order figure (seed unchanged)."""
    from invfold.components.model.io import load_model

    model = load_model(model_path)
    test = open_prepared(prepared).open("test")
    rows = list(range(len(test)))
    one = score_dataset(model, test, rows, 4000, seed=1)
    three = score_dataset(model, test, rows, 4000, seed=1, orders=3)
    again = score_dataset(model, test, rows, 4000, seed=1, orders=3)
    assert three.correct_by_order.shape == (len(test), 3)
    assert np.array_equal(three.correct_by_order, again.correct_by_order)  # seeded: reproducible
    assert np.array_equal(three.correct_by_order[:, 0], one.correct)
    assert np.allclose(three.correct, three.correct_by_order.mean(1))
    summary = three.summary()
    per_order = np.median(three.correct_by_order / three.count[:, None], axis=0)
    assert math.isclose(summary["recovery_orders_mean"], per_order.mean())
    assert math.isclose(summary["recovery_orders_sd"], per_order.std(ddof=1))
    assert math.isclose(summary["recovery"], float(np.median(three.correct / three.count)))
    if model.cfg.autoregressive:  # different orders design different sequences
        assert not np.array_equal(three.correct_by_order[:, 0], three.correct_by_order[:, 1])
    else:  # a one-shot argmax has no order
        assert summary["recovery_orders_sd"] == 0.0


def test_bootstrap_interval_of_the_median_is_seeded_and_refuses_non_finite():
    values = np.random.default_rng(0).uniform(0.2, 0.5, 40)
    low, high = bootstrap_median(values, 1000, seed=3)
    assert low < float(np.median(values)) < high
    assert (low, high) == bootstrap_median(values, 1000, seed=3)
    assert (low, high) != bootstrap_median(values, 1000, seed=4)
    narrow = bootstrap_median(np.concatenate([values] * 16), 1000, seed=3)  # 16x the chains: narrower
    assert narrow[1] - narrow[0] < high - low
    with pytest.raises(ValueError, match="finite"):
        bootstrap_median(np.array([0.3, float("nan")]), 1000, seed=0)


def test_report_gives_interval_orders_spread_and_sampled_recovery(prepared, model_path, tmp_path):
    from invfold.components.evaluate.step import scalar_metrics

    cfg = EvaluateConfig(model_path=model_path, data=prepared, out=str(tmp_path), orders=2, bootstrap_resamples=200)
    metrics = evaluate(cfg)
    test = metrics["datasets"]["test"]
    autoregressive = metrics["model_config"]["decoding"] == "autoregressive"
    assert test["recovery_ci_low"] <= test["recovery"] <= test["recovery_ci_high"]
    assert 0.0 <= test["sampled_recovery"] <= 1.0 and ("recovery_orders_sd" in test) == autoregressive
    assert metrics["datasets"]["validation"]["recovery_ci_low"] <= metrics["datasets"]["validation"]["recovery"]
    # a one-shot model's argmax depends on no order: one design, no spread across orders
    assert metrics["orders"] == ({"count": 2, "seeds": [0, 104729]} if autoregressive else {"count": 1, "seeds": [0]})
    assert metrics["bootstrap"]["resamples"] == 200 and metrics["sampled"]["temperature"] == 0.1
    flat = scalar_metrics(metrics, "/")  # what MLflow records
    assert {"test/recovery_ci_low", "test/recovery_ci_high", "test/sampled_recovery"} <= set(flat)
    assert ("test/recovery_orders_sd" in flat) == autoregressive
    report = (tmp_path / "report.md").read_text()
    assert "95% interval" in report and "T = 0.1" in report
    assert ("seeds 0, 104729" in report) == autoregressive and ("across orders" in report) == autoregressive
    assert ("One-shot argmax: one design per protein" in report) != autoregressive
    assert f"{test['recovery_ci_low']:.3f} - {test['recovery_ci_high']:.3f}" in report
    again = evaluate(
        EvaluateConfig(
            model_path=model_path, data=prepared, out=str(tmp_path / "again"), orders=2, bootstrap_resamples=200
        )
    )
    assert again["datasets"] == metrics["datasets"]  # seeds explicit: the same figures


@pytest.mark.parametrize("field,value", [("orders", 0), ("bootstrap_resamples", -1), ("bootstrap_resamples", 10)])
def test_orders_and_resamples_are_validated(field, value):
    with pytest.raises(ConfigError, match=f"EvaluateConfig.{field}"):
        EvaluateConfig(model_path="m.pt", data="d", out="o", **{field: value})


def test_the_bootstrap_drawn_in_blocks_is_the_one_draw_of_all_resamples():
    """5,000 chains x 2,000 resamples come in blocks of 838 (bounded memory): the same interval."""
    values = np.random.default_rng(0).random(5000)
    rng = np.random.default_rng(3)
    medians = np.median(values[rng.integers(0, len(values), (2000, len(values)))], axis=1)
    assert bootstrap_median(values, 2000, seed=3) == tuple(float(p) for p in np.percentile(medians, [2.5, 97.5]))


def test_the_report_says_when_by_which_command_and_which_model_and_the_cli_prints_no_json(
    prepared, model_path, tmp_path, capsys
):
    """What a person keeps names its date, the invfold version and the command line; the command
    prints a short summary (the whole record is --json's and metrics.json's); the headline table
    of the HTML page sits in a box that scrolls sideways instead of overflowing the page."""
    from invfold import __version__
    from invfold.cli import main

    out = tmp_path / "eval"
    argv = ["evaluate", model_path, "--data", prepared, "--out", str(out), "--dataset", "test"]
    assert main([*argv, "--designs-per-protein", "0", "--bootstrap-resamples", "0"]) == 0
    printed = capsys.readouterr().out
    assert "{" not in printed and printed.startswith("test: ") and "recovery" in printed.splitlines()[0]
    report = (out / "report.md").read_text()
    assert f"invfold {__version__}" in report and "Written 20" in report
    assert f"by `invfold evaluate {model_path} --data {prepared}" in report
    assert f"Model `{model_path.rsplit('/', 1)[-1]}`" in report
    headline = report.split("| dataset |", 1)[1].splitlines()[0]
    assert "sampled recovery" not in headline and "95% interval" not in headline  # no column of dashes
    page = (out / "report.html").read_text()
    assert page.index('<div class="table-scroll') < page.index("<th>dataset</th>")
