"""What `invfold run` shows: the runner's stream (KFP's banners, in its own words, and each
step's output) becomes one line per step, a training bar, the failing step's output in full;
all of it lands in the log file. The whole path through a real run is in test_local_pipeline."""

from __future__ import annotations

import io
import json
import logging
import sys

from rich.console import Console

from invfold import storage
from invfold.pipelines.console import StepConsole, TrainLimit


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=120, highlight=False), out


def test_steps_show_one_line_each_with_their_figures_and_everything_goes_to_the_log(tmp_path):
    console, out = _console()
    timings = tmp_path / "timings.jsonl"
    timings.write_text(json.dumps({"step": "evaluate", "compute_s": 1.0, "figures": {"test_recovery": 0.31234}}) + "\n")
    log_file = tmp_path / "logs" / "run.log"
    with StepConsole(log_file, console, train=TrainLimit(max_steps=10), timings_file=timings):
        # KFP's banners come through logging (coloured), the steps' output through print
        logging.getLogger("kfp").info("Executing task \x1b[96m'train-op'\x1b[0m")
        print("    10:00:01 INFO invfold.components.train.trainer: step 5 | epoch 0 | loss 2.8100 | ppl 16.6")
        print("    10:00:02 INFO invfold.components.train.trainer: step 5 | validation | loss 2.7 | recovery 0.210")
        print('    {"executor_output": "a long JSON dump"}')
        logging.getLogger("kfp").info("Task \x1b[96m'train-op'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m")
        logging.getLogger("kfp").info("Executing task 'evaluate-op'")
        logging.getLogger("kfp").info("Task 'evaluate-op' finished with status SUCCESS")
    shown = out.getvalue().splitlines()
    assert [line.split()[:2] for line in shown] == [
        [">", "train"],
        ["ok", "train"],
        [">", "evaluate"],
        ["ok", "evaluate"],
    ]
    assert "test_recovery 0.3123" in shown[-1]
    assert "executor_output" not in out.getvalue()
    logged = log_file.read_text()
    assert "executor_output" in logged and "step 5 | epoch 0" in logged and "\x1b[" not in logged
    assert sys.stdout is not None and not isinstance(sys.stdout, StepConsole)


def test_a_failing_step_shows_its_whole_output(tmp_path):
    console, out = _console()
    with StepConsole(tmp_path / "run.log", console) as display:
        logging.getLogger("kfp").info("Executing task 'prep-op'")
        print("    reading chain_set.jsonl.gz")
        print("    Traceback (most recent call last):")
        for i in range(30):
            print(f'    File "prep.py", line {i}, in frame_{i}')
        print("    invfold.components.prep.errors.PrepError: chain_set.jsonl.gz line 3: 'coords' expected")
        display.fail_running(RuntimeError("Task 'prep-op' finished with status FAILURE"))
    shown = out.getvalue()
    assert "FAILED prep" in shown
    assert all(f"frame_{i}" in shown for i in range(30))
    assert "PrepError: chain_set.jsonl.gz line 3: 'coords' expected" in shown
    assert str(tmp_path / "run.log") in shown.replace("\n", "")


def test_the_steps_output_shows_no_secret_of_the_command(tmp_path):
    """A step (its own process) prints a URI's secret outside the URI, as a library's message
    does; the command (this process) learnt it from its own arguments: neither the console nor
    the log file shows it."""
    storage.remember_secrets(["s3://AKIAEXAMPLEKEYID:wJalrXUtnFEMI/K7MDENG@bucket/set.jsonl"])
    console, out = _console()
    with StepConsole(tmp_path / "run.log", console, verbose=True) as display:
        logging.getLogger("kfp").info("Executing task 'prep-op'")
        print('    ParamValidationError: Invalid bucket name "AKIAEXAMPLEKEYID:wJalrXUtnFEMI"')
        print("    reading s3://AKIAEXAMPLEKEYID:wJalrXUtnFEMI/K7MDENG@bucket/set.jsonl")
        display.fail_running(RuntimeError("Task 'prep-op' finished with status FAILURE"))
    for text in (out.getvalue(), (tmp_path / "run.log").read_text()):
        assert 'Invalid bucket name "***"' in text and "reading s3://***@bucket/set.jsonl" in text
        assert "wJalr" not in text and "K7MDENG" not in text and "AKIAEXAMPLEKEYID" not in text


def test_verbose_shows_the_whole_output_live(tmp_path):
    console, out = _console()
    with StepConsole(tmp_path / "run.log", console, verbose=True):
        print('{"executor_output": "a long JSON dump"}')
    assert "executor_output" in out.getvalue()


def test_training_shows_a_progress_bar_from_the_trainers_metrics_records_on_a_terminal(tmp_path):
    """The bar follows metrics.jsonl (structured records), whatever the trainer's log lines say;
    a record still being written waits for the next read."""
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True, color_system=None)
    root = tmp_path / "pipeline_root"
    metrics = root / "invfold-1" / "train-op" / "model" / "metrics.jsonl"
    with StepConsole(tmp_path / "run.log", console, train=TrainLimit(max_steps=10), pipeline_root=root) as display:
        logging.getLogger("kfp").info("Executing task 'train-op'")
        metrics.parent.mkdir(parents=True)
        records = [
            {"split": "train", "step": 5, "loss": 2.81, "accuracy": 0.1},
            {"split": "validation", "step": 5, "loss": 2.7, "recovery": 0.21},
        ]
        metrics.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"split": "train", "st')
        print("    any line the step prints")
        bar = display._progress
        assert bar is not None and bar.tasks[0].completed == 5 and bar.tasks[0].total == 10
        with open(metrics, "a") as fh:
            fh.write('ep": 7, "loss": 2.5}\n')
        print("    another line")
        assert bar.tasks[0].completed == 7 and bar.tasks[0].fields["loss"] == "2.5000"
        bar.refresh()
    shown = out.getvalue()
    assert "step 7" in shown and "loss 2.5000" in shown and "val recovery 0.210" in shown
