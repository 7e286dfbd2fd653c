"""`invfold submit --package FILE` reads a file a person names: binary content, text that is not
YAML, and YAML nested past the parser's limit are one error line (exit 2) before anything is
sent, never a UnicodeDecodeError, a YAML error or a RecursionError traceback."""

from __future__ import annotations

import pytest

from invfold.cli import main


@pytest.mark.parametrize(
    "content, expected",
    [
        (bytes(range(256)) * 4, "not UTF-8 text"),
        ("a: [unclosed\n", "expected a compiled pipeline YAML"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than the parser's limit"),
    ],
)
def test_a_package_that_is_not_a_compiled_pipeline_is_one_line(tmp_path, capsys, content, expected):
    package = tmp_path / "package.yaml"
    package.write_bytes(content if isinstance(content, bytes) else content.encode())
    code = main(
        ["submit", "--host", "http://127.0.0.1:9", "--data", "s3://bucket/set.jsonl", "--package", str(package)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and str(package) in err and expected in err, err
