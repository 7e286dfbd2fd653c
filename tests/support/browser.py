"""Pages as a person's browser renders them: headless Chromium (Debian's `chromium`, installed by
`scripts/setup.sh test`) loads a URL, runs its scripts until the page settles and hands back the
DOM, which the tests read the way a person reads the screen: by what the page shows."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from html.parser import HTMLParser

# virtual time: the page's timers and requests run to completion without waiting on the wall clock
SETTLE_MS = 30_000
TRIES = 3


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "headless Chromium is missing: `bash scripts/setup.sh test` installs Debian's chromium"
    return found


def rendered_dom(url: str, wait_for: str, width: int = 1600, height: int = 1000) -> str:
    """The DOM of `url` after its scripts ran; loaded again (up to TRIES times) while `wait_for`
    is not in it yet, since a busy machine can leave data requests unanswered within the budget."""
    dom = ""
    for _ in range(TRIES):
        with tempfile.TemporaryDirectory() as profile:
            dom = subprocess.run(
                [chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
                + [f"--window-size={width},{height}", f"--virtual-time-budget={SETTLE_MS}", "--dump-dom", url],
                check=True,
                capture_output=True,
                text=True,
                timeout=180,
            ).stdout
        if wait_for in dom:
            return dom
        time.sleep(2)
    raise AssertionError(f"{url}: {wait_for!r} never appeared on the page ({len(dom)} characters rendered)")


class _GridRow(HTMLParser):
    """Text of each grid cell (by its `col-id`) inside the elements whose `row-id` is `row`:
    ag-grid, which MLflow's run list uses, splits a row into pinned and scrolled parts."""

    def __init__(self, row: str):
        super().__init__()
        self.row, self.cells = row, {}
        self._row_depth = self._cell_depth = 0
        self._depth, self._cell = 0, None

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "input", "meta", "link", "hr", "wbr", "col", "source"):
            return
        self._depth += 1
        attrs = dict(attrs)
        if not self._row_depth and attrs.get("row-id") == self.row:
            self._row_depth = self._depth
        elif self._row_depth and self._cell is None and attrs.get("role") == "gridcell" and "col-id" in attrs:
            self._cell, self._cell_depth = attrs["col-id"], self._depth
            self.cells.setdefault(self._cell, "")

    def handle_endtag(self, tag):
        if tag in ("br", "img", "input", "meta", "link", "hr", "wbr", "col", "source"):
            return
        if self._cell is not None and self._depth == self._cell_depth:
            self._cell = None
        if self._row_depth and self._depth == self._row_depth:
            self._row_depth = 0
        self._depth -= 1

    def handle_data(self, data):
        if self._cell is not None:
            self.cells[self._cell] += data.strip()


def run_list_cells(dom: str, run_id: str) -> dict[str, str]:
    """Column id (`metrics.\\`test/recovery\\``, `params.\\`strategy\\``, ...) -> the text MLflow's
    run list shows in the row of run `run_id`."""
    parser = _GridRow(run_id)
    parser.feed(dom)
    return parser.cells
