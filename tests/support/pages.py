"""Kubeflow Pipelines' UI and MLflow's, driven as a person drives them: Playwright for Python on
Debian's Chromium (headless; Playwright's own browser download is never used). Everything a test
reads comes from the page. The selectors are the ones KFP 2.17's frontend renders (its source,
frontend/src, in ../shared/upstream's archive; files named below)."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from tests.support.browser import chromium

# components/graph/ExecutionNode.tsx: a task's state is the icon its node shows (no text)
STATE_ICONS = {
    "CheckCircleIcon": "succeeded",
    "CloudDownloadIcon": "cached",
    "ErrorIcon": "failed",
    "RefreshIcon": "running",
    "StopCircleIcon": "canceled",
}
TIMEOUT_MS = 90_000
MAX_PAGES = 20
CLICKS, PANEL_MS = 3, 15_000
FIT_MS = 1_000


@contextmanager
def browser_page(credentials: dict | None = None, width: int = 1600, height: int = 1000):
    """A fresh page of headless Chromium; `credentials` ({"username", "password"}) answer HTTP
    basic-auth, as a person types them into the browser's prompt."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": width, "height": height}, http_credentials=credentials)
            context.set_default_timeout(TIMEOUT_MS)
            yield context.new_page()
        finally:
            browser.close()


def screenshot(page, name: str) -> Path:
    """The page as it looks now, into $INVFOLD_SCREENSHOTS (`make screenshots` points it at
    docs/screenshots) or runs/screenshots."""
    folder = Path(os.environ.get("INVFOLD_SCREENSHOTS") or Path(__file__).resolve().parents[2] / "runs" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path))
    return path


class KfpRunPage:
    """A run's page in KFP's UI (pages/RunDetailsV2.tsx): its graph, one layer of sub-DAGs at a
    time (pages/v2/DagCanvas.tsx), and the side panel of the node last clicked
    (components/tabs/RuntimeNodeDetailsV2.tsx)."""

    def __init__(self, page, ui: str, run_id: str):
        self.page, self.ui, self.run_id = page, ui.rstrip("/"), run_id

    def open(self) -> KfpRunPage:
        # the side panel's content is read when a node is clicked: wait until ML Metadata's
        # states are on the graph, or a click shows "Content is not available yet."
        self.page.goto(f"{self.ui}/#/runs/details/{self.run_id}")
        self.page.get_by_test_id("page-title").wait_for()
        self._wait_for_states()
        return self

    def title(self) -> str:
        return self.page.get_by_test_id("page-title").get_attribute("title") or ""

    def _wait_for_states(self) -> None:
        icons = ", ".join(f'[data-testid^="rf__node-"] [data-testid="{icon}"]' for icon in STATE_ICONS)
        self.page.locator(icons).first.wait_for()

    def enter(self, sub_dag: str) -> None:
        """Into a sub-DAG (an exit handler, a condition) by its expand button."""
        self.page.locator(f'[data-testid="rf__node-task.{sub_dag}"] [data-testid="expand-button"]').click()
        self.page.locator(f'[data-testid="rf__node-task.{sub_dag}"]').wait_for(state="detached")
        self._wait_for_states()

    def fit(self) -> None:
        """The graph fitted to its pane, by React Flow's own control (as after a person's click)."""
        self.page.locator(".react-flow__controls-fitview").click()
        self.page.wait_for_timeout(FIT_MS)  # its zoom is animated

    def task_states(self) -> dict[str, str]:
        """Label -> state of every task and sub-DAG node of the layer shown."""
        states = {}
        for node in self.page.locator('[data-testid^="rf__node-task."]').all():
            shown = node.locator("svg[data-testid]").evaluate_all("els => els.map(e => e.dataset.testid)")
            known = [STATE_ICONS[icon] for icon in shown if icon in STATE_ICONS]
            states[node.inner_text().strip()] = known[0] if known else "none"
        return states

    def open_artifact(self, task: str, output: str, tab: str = "Visualization"):
        """The side panel of a task's output artifact, on `tab` ("Artifact Info" or "Visualization")."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        self.close_panel()
        node, button = self.page.get_by_test_id(f"rf__node-artifact.{task}.{output}"), None
        for _ in range(CLICKS):  # a click while the graph still fits itself to the view can miss
            node.click()
            try:
                button = self.page.get_by_role("button", name=tab, exact=True)
                button.wait_for(timeout=PANEL_MS)
                break
            except PlaywrightTimeout:
                button = None
        assert button is not None, f"no side panel for {task}'s {output} after {CLICKS} clicks"
        button.click()
        return self.page

    def close_panel(self) -> None:
        """Close the side panel if one is open (components/SidePanel.tsx): it covers the graph."""
        close = self.page.locator('button[aria-label="close"]')
        if close.count() and close.first.is_visible():
            close.first.click()
            close.first.wait_for(state="hidden")

    def scalar_metrics(self, name: str) -> dict[str, object]:
        """The table under "Scalar Metrics: <name>" (components/viewers/MetricsVisualizations.tsx):
        metric name -> value as the page shows it (JSON), every page of it (components/viewers/
        PagedTable.tsx shows 10 rows at a time) turned as a person turns them."""
        heading = self.page.get_by_text(f"Scalar Metrics: {name}", exact=True)
        heading.wait_for()
        table = self.page.locator("table", has=self.page.get_by_text("value", exact=True)).first
        turn = self.page.get_by_role("button", name="Go to next page")
        shown: dict[str, object] = {}
        for _ in range(MAX_PAGES):
            rows = table.locator("tbody tr").evaluate_all(
                "rows => rows.map(r => Array.from(r.querySelectorAll('td')).map(c => c.innerText.trim()))"
            )
            shown |= {row[0]: json.loads(row[1]) for row in rows if len(row) >= 2 and row[0]}
            if not turn.count() or turn.first.is_disabled():
                return shown
            turn.first.click()
        raise AssertionError(f"Scalar Metrics: {name}: more than {MAX_PAGES} pages")

    def confusion_matrix(self, name: str) -> tuple[list[str], list[list[int]]]:
        """The table under "Confusion Matrix: <name>" (components/viewers/ConfusionMatrix.tsx)
        as the artifact holds it: its labels, and counts[i][j] for true label i predicted as j.
        The page puts the artifact's rows (true labels) on the x axis and its columns (predicted)
        on the y axis, bottom-up: each row of the page is one predicted label, first label last."""
        self.page.get_by_text(f"Confusion Matrix: {name}", exact=True).wait_for()
        table = self.page.locator("table", has=self.page.get_by_text("True label")).first
        rows = table.locator("tr").evaluate_all(
            "rows => rows.map(r => Array.from(r.querySelectorAll('td,th')).map(c => c.innerText.trim()))"
        )
        labels, counts = [], []
        for row in rows:
            cells = [c for c in row if c and c not in ("True label", "Predicted label")]
            if len(cells) > 1 and all(c.isdigit() for c in cells[1:]):
                labels.append(cells[0])
                counts.append([int(c) for c in cells[1:]])
        predicted = counts[::-1]  # predicted[j][i]: true label i predicted as j
        return labels[::-1], [list(column) for column in zip(*predicted, strict=True)]

    def html_frame(self):
        """The HTML viewer's iframe (components/viewers/HTMLViewer.tsx: srcdoc, sandboxed)."""
        self.page.get_by_text("Static HTML", exact=True).wait_for()
        return self.page.frame_locator('iframe[sandbox="allow-scripts"]').first

    def markdown(self):
        """The rendered Markdown (components/viewers/MarkdownViewer.tsx)."""
        viewer = self.page.locator("div.markdown-viewer").first
        viewer.wait_for()
        return viewer
