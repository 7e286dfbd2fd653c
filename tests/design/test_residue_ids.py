"""Residue IDs as LigandMPNN users write them ("H100K", "L27A") beside ProteinMPNN's 1-based positions,
on a real antibody whose Kabat numbering has insertion codes and a skip.

The antibody: chains I (heavy) and M (lambda light) of PDB 7CTH, real coordinates from the bundled
sample chain set (src/invfold/data/sample_chain_set.jsonl.gz, records mmcif_7cth.I and
mmcif_7cth.M). No antibody structure file ships in any package installed here (no .pdb/.cif file
in the environment; ANARCI/abnumber are not installed), and the chain set keeps no author
numbering, so the chains are written as a PDB file (chains H and L, with SEQRES) numbered by a
Kabat numbering assigned by hand from the Kabat rules, not by ANARCI: heavy 1-35, 36-49,
50-52, 52A, 53-65, 66-82, 82A-C, 83-100, 100A-K, 101-112; light (its first modelled residue
is Kabat 3) 3-9, the lambda skip at L10, 11-27, 27A-C, 28-95, 95A, 96-106, 106A, 107. The
conserved residues land where Kabat puts them (H22/H92/L23/L88 Cys, H36/H103/L35 Trp), which the
tests check.
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import pytest
import torch

from invfold.components.design import DesignConfig, cli, design, parse_positions
from invfold.components.design.constraints import ConstraintFiles, load_constraints
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.structure import read_structure
from invfold.data import SAMPLE_CHAIN_SET
from invfold.errors import ConfigError
from tests.support.antibody import HEAVY, LIGHT
from tests.support.design_files import read_fasta
from tests.support.parity_cases import sample_records
from tests.support.structures import ChainSpec, write_chains


def position(chain: str, label: str) -> int:
    """1-based position in the complex H then L (127 + 109 residues)."""
    return HEAVY.index(label) + 1 if chain == "H" else len(HEAVY) + LIGHT.index(label) + 1


@pytest.fixture(scope="module")
def antibody(tmp_path_factory):
    records = sample_records()
    heavy, light = records["mmcif_7cth.I"], records["mmcif_7cth.M"]
    assert (len(heavy), len(light)) == (len(HEAVY), len(LIGHT)) == (127, 109)
    folder = tmp_path_factory.mktemp("antibody")
    chains = [ChainSpec("H", heavy, residue_ids=HEAVY), ChainSpec("L", light, residue_ids=LIGHT)]
    return write_chains(folder / "7cth.pdb", chains, seqres=True), write_chains(folder / "7cth_noseqres.pdb", chains)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "m.pt"
    save_model(path, InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval())
    return path


def test_reader_keeps_kabat_ids_and_warns_once_where_the_fills_disagree(antibody, caplog):
    with_seqres, without = antibody
    with caplog.at_level(logging.WARNING, logger="invfold.components.protein.structure"):
        heavy, light = list(read_structure(with_seqres))
    warnings = [r.getMessage() for r in caplog.records]
    # the heavy chain's insertion codes shift both fills alike; the light chain's skip at L10 does not
    assert len(warnings) == 1 and "chain 'L'" in warnings[0], warnings
    assert "1-based positions follow the deposited sequence (position 1 = residue L3)" in warnings[0]
    assert "109 modelled residues in 109 positions" in warnings[0] and "in 110" in warnings[0]
    assert heavy.residue_ids == tuple(HEAVY) and light.residue_ids == tuple(LIGHT)
    letter = {f"H{i}": heavy.seq[k] for k, i in enumerate(heavy.residue_ids)}
    letter |= {f"L{i}": light.seq[k] for k, i in enumerate(light.residue_ids)}
    assert [letter[i] for i in ("H22", "H92", "L23", "L88", "H36", "H103", "L35")] == list("CCCCWWW")
    # without SEQRES the numbering fill inserts an unobserved X at L10: position 8 is then L10, not L11
    caplog.clear()
    _, light_numbered = list(read_structure(without))
    assert not caplog.records
    assert len(light_numbered) == 110 and light_numbered.seq[7] == "X" and light_numbered.residue_ids[7] == ""
    assert light_numbered.residue_ids[8] == "11" and light.residue_ids[7] == "11"


def test_parse_positions_takes_residue_ids_beside_positions():
    assert parse_positions("A23 A24 B42C") == ["A23", "A24", "B42C"]
    assert parse_positions("3,1-2 H100K, L-3") == [1, 2, 3, "H100K", "L-3"]
    with pytest.raises(ConfigError, match="'A23-A30' is not a position, a range like 5-12 or a residue ID"):
        parse_positions("A23-A30")


def test_fixed_residue_ids_design_as_their_positions_and_keep_native(tmp_path, antibody, model):
    pdb, _ = antibody
    cdr_l1 = [f"L{i}" for i in LIGHT[LIGHT.index("24") : LIGHT.index("34") + 1]]  # 14 residues, 27A-C included
    ids = ["H52A", "H100K", *cdr_l1]
    as_positions = [position(i[0], i[1:]) for i in ids]
    out = {}
    for kind, fixed in (("ids", " ".join(ids)), ("positions", ",".join(map(str, as_positions)))):
        cfg = DesignConfig(
            model=str(model), structure=str(pdb), out=str(tmp_path / f"{kind}.fasta"), design_chains="H,L",
            fixed_positions=fixed, num_sequences=3,
        )  # fmt: skip
        design(cfg)
        out[kind] = [s.replace("/", "") for _, s in read_fasta(tmp_path / f"{kind}.fasta")]
    assert out["ids"] == out["positions"]
    native = next(read_structure(pdb, complexes=True)).seq
    for seq in out["ids"]:
        assert len(seq) == len(native) == 236
        assert [seq[p - 1] for p in as_positions] == [native[p - 1] for p in as_positions]
        assert seq != native  # the others are designed


def test_cli_fixed_takes_residue_ids(tmp_path, antibody, model):
    pdb, _ = antibody
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    out = tmp_path / "cli.fasta"
    fixed = " ".join(f"L{i}" for i in LIGHT[LIGHT.index("89") : LIGHT.index("97") + 1])  # CDR-L3, 95A included
    args = parser.parse_args(
        ["design", str(model), str(pdb), "--out", str(out), "-n", "2", "--chain", "L", "--fixed", fixed]
    )
    assert args.func(args) == 0
    native = next(r for r in read_structure(pdb) if r.name.endswith(".L")).seq
    cdr = slice(LIGHT.index("89"), LIGHT.index("97") + 1)
    designs = [s for _, s in read_fasta(out)]
    assert len(designs) == 2 and all(s[cdr] == native[cdr] == "SSHTSRGTWV" for s in designs)


def write(path, obj):
    path.write_text(json.dumps(obj))
    return str(path)


def test_json_inputs_take_residue_ids_as_their_positions(tmp_path, antibody):
    pdb, _ = antibody
    record = next(read_structure(pdb, complexes=True))
    entry = record.name
    h, lp = (lambda label: HEAVY.index(label) + 1), (lambda label: LIGHT.index(label) + 1)
    row = [0.0] * 21
    row[4] = 2.5  # F
    by_id = ConstraintFiles(
        fixed_positions=write(tmp_path / "f_id.json", {entry: {"H": ["100K", "H103"], "L": ["27A"]}}),
        omit_aa=write(tmp_path / "o_id.json", {entry: {"L": [[["95A", 3], "CW"]]}}),
        bias_by_res=write(tmp_path / "b_id.json", {entry: {"H": {"52A": row, "H82C": row}}}),
        tied_positions=write(tmp_path / "t_id.json", {entry: [{"H": ["52A"], "L": ["L95A"]}, {"L": ["27B", "27C"]}]}),
    )
    rows = [[0.0] * 21 for _ in HEAVY]
    rows[HEAVY.index("52A")] = rows[HEAVY.index("82C")] = row
    by_position = ConstraintFiles(
        fixed_positions=write(tmp_path / "f.json", {entry: {"H": [h("100K"), h("103")], "L": [lp("27A")]}}),
        omit_aa=write(tmp_path / "o.json", {entry: {"L": [[[lp("95A"), 3], "CW"]]}}),
        bias_by_res=write(tmp_path / "b.json", {entry: {"H": rows}}),
        tied_positions=write(tmp_path / "t.json", {entry: [{"H": [h("52A")], "L": [lp("95A")]}, {"L": [26, 27]}]}),
    )
    a, b = load_constraints(by_id, record), load_constraints(by_position, record)
    assert a.fixed.sum() == 3 and a.omit.sum() == 4 and (a.bias != 0).sum() == 2 and len(a.tied) == 2
    np.testing.assert_array_equal(a.fixed, b.fixed)
    np.testing.assert_array_equal(a.omit, b.omit)
    np.testing.assert_array_equal(a.bias, b.bias)
    assert a.tied == b.tied == [([HEAVY.index("52A"), 127 + LIGHT.index("95A")], [1.0, 1.0]), ([152, 153], [1.0, 1.0])]


@pytest.mark.parametrize(
    "fixed, message",
    [
        ("L10", r"ID L10 names no residue of chain 'L' of 7cth \(its residues L3..L107; nearest: L8, L9, L11, L12"),
        ("H100L", r"residue ID H100L names no residue of chain 'H' .*nearest: H100J, H100K, H101, H102\)"),
        ("Q5", r"residue ID 'Q5': chain 'Q' is not in 7cth \(chains: H, L\)"),
        ("300", r"fixed positions \[300\] lie beyond the chain's 236 residues"),
    ],
)  # fmt: skip
def test_a_residue_id_that_names_no_residue_is_refused_with_the_nearest(tmp_path, antibody, model, fixed, message):
    pdb, _ = antibody
    cfg = DesignConfig(
        model=str(model), structure=str(pdb), out=str(tmp_path / "x.fasta"), design_chains="H,L", fixed_positions=fixed
    )
    with pytest.raises(ConfigError, match=message):
        design(cfg)
    assert not (tmp_path / "x.fasta").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ({"H": ["L27A"]}, r"chain 'H': residue ID 'L27A' is not in chain 'H', the key it is listed under"),
        ({"L": ["10"]}, r"chain 'L': residue ID L10 names no residue of chain 'L'"),
        ({"L": ["27a b"]}, r"'27a b' is not a residue ID like 23, 42C or L42C"),
        ({"L": [True]}, r"expected a list of 1-based positions or residue IDs"),
    ],
)
def test_json_residue_ids_that_name_no_residue_are_refused(tmp_path, antibody, content, message):
    pdb, _ = antibody
    record = next(read_structure(pdb, complexes=True))
    files = ConstraintFiles(fixed_positions=write(tmp_path / "f.json", {record.name: content}))
    with pytest.raises(ConfigError, match=message):
        load_constraints(files, record)


def test_a_chain_set_record_has_no_author_numbering_to_name(tmp_path, model):
    record = next(r for r in read_protein_set(str(SAMPLE_CHAIN_SET)) if r.name == "1A8O.A")
    assert record.residue_ids == ()
    cfg = DesignConfig(
        model=str(model), structure=str(SAMPLE_CHAIN_SET), name="1A8O.A", out=str(tmp_path / "x.fasta"),
        fixed_positions="A5",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="residue ID A5: 1A8O.A has no author numbering .*give 1-based positions"):
        design(cfg)
