"""An unknown residue (UNK in a structure file, X in a chain set) that has a backbone stays in the
model's graph as structural context and out of the loss: its neighbours' features see its atoms,
the decoder never sees a letter for it, and losses, metrics and recovery never count it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from invfold.components.design.design import DesignConfig, design
from invfold.components.evaluate.metrics import score_batch
from invfold.components.model.config import ModelConfig
from invfold.components.model.io import save_model
from invfold.components.model.network import InverseFoldingModel, unknown_last
from invfold.components.protein.alphabet import ALPHABET, THREE_TO_ONE
from invfold.components.protein.batch import collate
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.structure import read_structures
from invfold.components.train.trainer import sequence_loss
from invfold.data import SAMPLE_CHAIN_SET
from tests.support.builders import pdb_text

ONE_TO_THREE = {v: k for k, v in THREE_TO_ONE.items()}


@pytest.fixture(scope="module")
def with_unk(tmp_path_factory):
    """(record read from a PDB file whose residue `at` is UNK, the same chain with every letter
    known, at, the PDB file)."""
    for native in read_chain_set(SAMPLE_CHAIN_SET):
        if 60 <= len(native) <= 150 and native.mask.all() and set(native.seq) <= set(ALPHABET):
            break
    at = len(native) // 2
    residues = [
        ("UNK" if i == at else ONE_TO_THREE[letter], i + 1, " ", xyz)
        for i, (letter, xyz) in enumerate(zip(native.seq, native.coords, strict=True))
    ]
    path = tmp_path_factory.mktemp("unk") / "unk.pdb"
    path.write_text(pdb_text({"A": residues}))
    (record,) = read_structures(path)
    return record, native, at, path


def _model(decoding: str) -> InverseFoldingModel:
    torch.manual_seed(0)
    return InverseFoldingModel(ModelConfig.preset("tiny", decoding=decoding, dropout=0.0)).eval()


def test_unknown_residue_keeps_its_backbone_in_the_structure_mask_not_in_the_loss_mask(with_unk):
    record, native, at, _ = with_unk
    assert record.seq[at] == "X" and record.extra["unknown"] == {"UNK": 1}
    assert record.mask[at], "the reader keeps the UNK residue's backbone"
    batch = collate([record])
    assert batch.structure_mask[0, at] == 1 and batch.mask[0, at] == 0
    assert batch.mask.sum() == len(record) - 1 and batch.structure_mask.sum() == len(record)
    torch.testing.assert_close(batch.X, collate([native]).X)


@pytest.mark.parametrize("decoding", ["one_shot", "autoregressive"])
def test_neighbours_see_the_unknown_residues_structure(with_unk, decoding):
    record, _, at, _ = with_unk
    model = _model(decoding)
    batch = collate([record])
    order = unknown_last(torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(1)), batch)
    with torch.no_grad():
        context = model(batch.X, batch.S, batch.structure_mask, batch.residue_index, order)
        cut = batch.structure_mask.clone()
        cut[0, at] = 0
        without = model(batch.X, batch.S, cut, batch.residue_index, order)
    known = batch.mask[0] > 0
    changed = (context[0] - without[0]).abs().amax(-1)[known]
    assert changed.max() > 1e-3, "removing the UNK residue's backbone changes nothing: it was not in the graph"


def test_decoder_never_sees_a_letter_for_the_unknown_residue(with_unk):
    record, _, at, _ = with_unk
    model = _model("autoregressive")
    batch = collate([record])
    order = unknown_last(torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(2)), batch)
    assert int(torch.argsort(order[0])[-1]) == at, "the unknown residue is decoded last"
    known = batch.mask[0] > 0
    outs = []
    for letter in (0, 7, 19):
        S = batch.S.clone()
        S[0, at] = letter
        with torch.no_grad():
            outs.append(model(batch.X, S, batch.structure_mask, batch.residue_index, order)[0, known])
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    torch.testing.assert_close(outs[0], outs[2], rtol=0, atol=0)


def test_loss_and_metrics_count_only_known_letters(with_unk):
    record, _, at, _ = with_unk
    model = _model("autoregressive")
    batch = collate([record])
    logits = model(
        batch.X, batch.S, batch.structure_mask, batch.residue_index, unknown_last(torch.rand(1, len(record)), batch)
    )
    _, sums = sequence_loss(logits, batch.S, batch.mask, smoothing=0.0)
    assert sums[2] == len(record) - 1  # count
    scores = score_batch(model, batch, seed=0)
    assert scores["count"].item() == len(record) - 1
    assert scores["designed"][0, at] in range(20), "the unknown residue is designed like the others"


def test_design_designs_the_unknown_residue_and_leaves_it_out_of_recovery(tmp_path, with_unk):
    record, _, at, pdb = with_unk
    model_path = tmp_path / "model.pt"
    save_model(model_path, _model("autoregressive"))
    known = np.array([c != "X" for c in record.seq])
    for designed in design(DesignConfig(str(model_path), str(pdb), out=str(tmp_path / "d.fasta"), num_sequences=2)):
        assert designed.sequence[at] in ALPHABET
        same = np.array([a == b for a, b in zip(designed.sequence, record.seq, strict=True)])
        assert designed.recovery == pytest.approx(same[known].mean(), abs=1e-6)
    with pytest.raises(Exception, match="no known native letter"):
        design(DesignConfig(str(model_path), str(pdb), out=str(tmp_path / "e.fasta"), fixed_positions=str(at + 1)))
