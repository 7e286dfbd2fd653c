"""invfold.runtime's failure report: a process's uncaught error as its container's termination
message (what the runtime image installs as Python starts), run in a child process as a
step runs, with a file standing in for the kubelet's /dev/termination-log."""

from __future__ import annotations

import subprocess
import sys

from invfold.runtime import TERMINATION_LIMIT, termination_message


def fail_with(tmp_path, raise_line: str, mounted: bool = True) -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "termination-log"
    if mounted:
        log.write_text("")
    install = f"from invfold.runtime import report_failures_to_kubernetes; report_failures_to_kubernetes({str(log)!r})"
    code = f"{install}\n{raise_line}\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return proc, log.read_text() if log.exists() else ""


def test_an_uncaught_error_becomes_one_line_and_the_traceback_stays(tmp_path):
    proc, message = fail_with(tmp_path, "raise FileNotFoundError('no such file:\\n  s3://bucket/absent.jsonl.gz')")
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert message == "FileNotFoundError: no such file: s3://bucket/absent.jsonl.gz"


def test_credentials_in_the_error_are_hidden(tmp_path):
    proc, message = fail_with(tmp_path, "raise ValueError('cannot read s3://AKIAKEY:s3cr3t@store/set.jsonl')")
    assert "s3cr3t" not in message and "set.jsonl" in message, message


def test_a_long_error_is_cut_to_what_the_kubelet_keeps():
    assert len(termination_message(ValueError("x" * 10_000)).encode()) < TERMINATION_LIMIT


def test_an_error_without_text_is_named_by_its_type():
    assert termination_message(KeyboardInterrupt()) == "KeyboardInterrupt"


def test_outside_a_container_nothing_is_written_and_nothing_changes(tmp_path):
    proc, message = fail_with(tmp_path, "raise ValueError('boom')", mounted=False)
    assert proc.returncode == 1 and "ValueError: boom" in proc.stderr
    assert not (tmp_path / "termination-log").exists()


def test_a_clean_exit_leaves_no_message(tmp_path):
    proc, message = fail_with(tmp_path, "print('done')")
    assert proc.returncode == 0 and message == ""
