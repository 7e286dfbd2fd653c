"""docs/cluster-contract.md holds: every Kubeflow Pipelines row cites its upstream files at the tags
it was read at (2.16.0 and 2.17.0, the KFP releases kubeflow/manifests 26.03 and the newest ship),
and every test a row names exists, down to the test function."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import REPO

CONTRACT = REPO / "docs" / "cluster-contract.md"


def section_rows(title: str) -> list[list[str]]:
    """The table rows (cells) of the section `## <title>`, header and rule left out."""
    text = CONTRACT.read_text()
    body = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[1:] if "Assumption" not in row]


def kfp_rows() -> list[list[str]]:
    rows = section_rows("Kubeflow Pipelines")
    return [r for r in rows if len(r) == 3]


@pytest.mark.parametrize("row", kfp_rows(), ids=lambda r: r[0][:60])
def test_each_kfp_row_cites_its_upstream_files_at_2_16_and_2_17(row):
    source = row[1]
    if not re.search(r"`(manifests|backend)/", source):
        return  # an SDK (kfp, kfp-kubernetes) or helm source: versioned in its own words
    assert "2.16.0" in source and "2.17.0" in source, source


def test_the_rows_found_partly_true_say_what_upstream_says():
    text = CONTRACT.read_text()
    assert "2.16 and 2.17 alike" not in text
    assert "copied into every profile namespace" not in text
    istio = next(r for r in kfp_rows() if "sidecar.istio.io/inject" in r[0])
    assert "backend/src/apiserver/template/v2_template.go" in istio[1]
    security = next(r for r in kfp_rows() if "security context" in r[0])
    assert "2.15.0's driver has no security-context field" in security[0]


def test_every_test_a_row_names_exists():
    text = CONTRACT.read_text()
    named = set(re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?", text))
    assert named
    missing = []
    for path, function in named:
        file = REPO / path
        if not file.exists():
            missing.append(path)
        elif function and not re.search(rf"^(async )?def {function}\b", file.read_text(), re.MULTILINE):
            missing.append(f"{path}::{function}")
    assert not missing, missing
