"""Designs threaded onto the input backbone (--out-structure), read back with the project's reader."""

import gemmi
import numpy as np
import pytest
import torch

from invfold.components.design import DesignConfig, design
from invfold.components.design.thread import structure_paths, thread
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.structure import read_structure
from invfold.data import SAMPLE_CHAIN_SET
from tests.support.structures import sample_complex, write_structure

NAME = "1A8O.A"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("m") / "m.pt"
    save_model(path, InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval())
    return path


def observed(record):
    return [i for i in range(len(record)) if record.mask[i]]


@pytest.mark.parametrize("suffix", [".pdb", ".cif"])
def test_threaded_designs_read_back_as_designed_on_the_input_backbone(tmp_path, model, suffix):
    record = next(r for r in read_protein_set(str(SAMPLE_CHAIN_SET)) if r.name == NAME)
    out = tmp_path / f"designs{suffix}"
    designs = design(
        DesignConfig(
            model=str(model),
            structure=str(SAMPLE_CHAIN_SET),
            name=NAME,
            out=str(tmp_path / "d.fasta"),
            num_sequences=2,
            temperature=1.0,
            out_structure=str(out),
        )
    )
    keep = observed(record)
    assert len(keep) < len(record) or record.mask.all()
    for d, path in zip(designs, structure_paths(out, 2), strict=True):
        assert path.name == f"designs_{d.index}{suffix}"
        (back,) = list(read_structure(path))
        assert back.name.endswith(".A")
        letters = "".join(back.seq[i] for i in range(len(back)) if back.mask[i])
        assert letters == "".join(d.sequence[i] for i in keep)
        np.testing.assert_allclose(back.coords[back.mask], record.coords[keep], atol=1e-3)
        structure = gemmi.read_structure(str(path))
        assert all(len(r) == 4 and not r.find_atom("CB", "*") for r in structure[0]["A"])


def test_author_numbering_and_chain_ids_of_an_input_file_are_kept(tmp_path):
    """A two-chain entry of the sample written as a PDB (unobserved residues left out) and renumbered
    from 501 in chain D: the threaded file has the same chains and author numbers."""
    from invfold.components.design.thread import author_numbering

    record = sample_complex("1tii")
    chains = record.chain_positions()
    from invfold.components.protein.complexes import split_complex

    source = write_structure(tmp_path / "in.pdb", split_complex(record))
    renumbered = gemmi.read_structure(str(source))
    for residue in renumbered[0]["D"]:
        residue.seqid = gemmi.SeqId(residue.seqid.num + 500, residue.seqid.icode)
    renumbered.write_pdb(str(source))
    numbering = author_numbering(source, record)
    assert len(numbering) == int(record.mask.sum())
    sequence = "".join("W" if record.mask[i] else record.seq[i] for i in range(len(record)))
    made = thread(record, sequence, numbering)
    original = gemmi.read_structure(str(source))[0]
    assert [c.name for c in made[0]] == [c.name for c in original] == list(chains)
    for new, old in zip(made[0], original, strict=True):
        assert [r.seqid.num for r in new] == [r.seqid.num for r in old]
        assert {r.name for r in new} == {"TRP"}
    assert made[0]["D"][0].seqid.num > 500


def test_a_wrong_suffix_is_refused_before_sampling(tmp_path, model):
    cfg = DesignConfig(
        model=str(model), structure=str(SAMPLE_CHAIN_SET), name=NAME, out=str(tmp_path / "d.fa"), out_structure="x.pdbx"
    )
    with pytest.raises(ValueError, match=r"x\.pdbx: expected a \.pdb or \.cif"):
        design(cfg)
    assert not (tmp_path / "d.fa").exists()


def test_out_structure_in_batch_mode_is_refused(tmp_path, monkeypatch):
    """Judged once the model reference is (a missing model is refused first: tests/test_cli.py)."""
    import argparse

    from invfold.components.design import cli
    from invfold.components.model import reference

    monkeypatch.setattr(reference, "check_model", lambda *args, **kwargs: None)

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        ["design", "m.pt", str(SAMPLE_CHAIN_SET), "--out", str(tmp_path / "d/"), "--out-structure", "x.pdb"]
    )
    with pytest.raises(ValueError, match=r"--out-structure x\.pdb: .*not in batch mode"):
        args.func(args)
