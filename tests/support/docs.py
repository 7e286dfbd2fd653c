"""Read the tables and lists the documents state, so tests can hold them to the code."""

from __future__ import annotations

import glob
import re
from pathlib import Path

from tests.support.paths import REPO

ARCHITECTURE = REPO / "ARCHITECTURE.md"


def section(path: Path, heading: str) -> str:
    """The text under a `## heading` (up to the next heading of that level)."""
    text = path.read_text()
    marker = f"\n## {heading}\n"
    assert marker in text, f"{path.name} has no '## {heading}' section"
    return text.split(marker, 1)[1].split("\n## ", 1)[0]


def table(path: Path, heading: str) -> list[dict[str, str]]:
    """The first Markdown table under `## heading`: one dict per row, keyed by the header cells."""
    lines = [line for line in section(path, heading).splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"{path.name}, '{heading}': no table"
    header, rows = _cells(lines[0]), lines[2:]
    return [dict(zip(header, _cells(row), strict=True)) for row in rows]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def expand(pattern: str, root: Path = REPO) -> list[Path]:
    """A path as the docs write it (`{a,b}` alternatives, `*` globs) -> the files it names."""
    braces = re.search(r"\{([^}]*)\}", pattern)
    if braces:
        return [
            found
            for choice in braces.group(1).split(",")
            for found in expand(pattern[: braces.start()] + choice + pattern[braces.end() :], root)
        ]
    return sorted(Path(p) for p in glob.glob(str(root / pattern)))


def unmatched(pattern: str, root: Path = REPO) -> list[str]:
    """The alternatives of a path as the docs write it that name no file (each `{a,b}` choice on
    its own)."""
    braces = re.search(r"\{([^}]*)\}", pattern)
    if braces:
        choices = [
            pattern[: braces.start()] + choice + pattern[braces.end() :] for choice in braces.group(1).split(",")
        ]
        return [missing for choice in choices for missing in unmatched(choice, root)]
    return [] if glob.glob(str(root / pattern)) else [pattern]


def generated_files() -> dict[Path, dict[str, str]]:
    """ARCHITECTURE.md's generated-files table: each file it names -> its row."""
    return {
        path: row
        for row in table(ARCHITECTURE, "Generated files: do not edit by hand")
        for pattern in code_spans(row["file"])
        for path in expand(pattern)
    }


def where_things_land() -> list[tuple[str, bool]]:
    """ARCHITECTURE.md's "Where things land": (a glob under the runs folder, kept after the run)
    per row; `<name>` placeholders become `*`, and a trailing `/` means a folder."""
    rows = []
    for row in table(ARCHITECTURE, "Where things land"):
        (store,) = code_spans(row["store"])
        assert store.startswith("runs/"), f"ARCHITECTURE.md's 'Where things land': {store} is not under runs/"
        rows.append((re.sub(r"<[^>]+>", "*", store.removeprefix("runs/")), not row["kept"].startswith("removed")))
    return rows


def stores_found(runs: Path, pattern: str) -> list[Path]:
    """What a `where_things_land` glob names in a runs folder (folders only for a trailing `/`)."""
    found = runs.glob(pattern.rstrip("/"))
    return sorted(p for p in found if p.is_dir() or not pattern.endswith("/"))
