"""`invfold prep`: a summary on success, exit 2 and the InputError message (no traceback) on bad input."""

from __future__ import annotations

from invfold.cli import main
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set


def _invfold(*argv) -> int:
    return main([str(a) for a in argv])


def test_prep_cli_summary_and_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("INVFOLD_NO_PROGRESS", "1")
    written = write_synthetic_set(tmp_path / "in", SyntheticConfig(num_chains=30, seed=1, median_length=80))
    code = _invfold(
        "prep", written.chain_set, "--out", tmp_path / "out", "--split-file", written.splits, "--max-length", 400
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "read 30 records: kept 30, skipped 0" in out and "digest: sha256:" in out
    assert (tmp_path / "out" / "card.md").exists()

    broken = tmp_path / "broken.jsonl"
    broken.write_text(written.chain_set.read_text().splitlines()[0][:500] + "\n")
    code = _invfold("prep", broken, "--out", tmp_path / "out2", "--strict")
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("invfold prep: error: ") and "broken.jsonl:1" in err and "invalid JSON" in err
