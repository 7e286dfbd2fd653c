"""The repository speaks to its users about the project: no document, comment or test points at
the tracker's numbering ("issue N", "stop N"), which nothing in the repository resolves. Every
tracked text file is read as committed (git ls-files), so a new one is covered as it lands."""

from __future__ import annotations

import re
import subprocess

from tests.support.paths import REPO

# built from pieces, so this file does not match itself
WORD = "|".join(["iss" + "ue", "st" + "op", "tick" + "et"])
TRACKER_REFERENCE = re.compile(rf"\b(?:{WORD})s? ?#?\d+(?:\.\d+)?\b", re.IGNORECASE)
NOT_TEXT = {".png", ".gz", ".arrow", ".onnx", ".pt", ".tgz", ".whl", ".npz", ".ico"}
RECORDS = {"tests/durations.json"}  # test ids and seconds, written by make test


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if p not in RECORDS and not any(p.endswith(s) for s in NOT_TEXT)]


def test_no_file_refers_to_the_trackers_numbering():
    found = []
    for path in tracked_text_files():
        try:
            text = (REPO / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if TRACKER_REFERENCE.search(line):
                found.append(f"{path}:{number}: {line.strip()[:120]}")
    assert not found, "say what the text means, not which tracker entry it came from:\n" + "\n".join(found)


def test_the_check_finds_what_it_is_for():
    issue, stop = "iss" + "ue", "st" + "op"
    for text in (f"({issue} 23, item 4)", f"{issue.title()} 22.12: a quota", f"{stop} 33", f"see {issue} #7"):
        assert TRACKER_REFERENCE.search(text), text
    for text in ("a non-issue", "stop the cluster", "the 2 issues below", "step 3"):
        assert not TRACKER_REFERENCE.search(text), text
