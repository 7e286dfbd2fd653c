import pytest
import torch

from invfold.components.model import InverseFoldingModel, ModelConfig, load_model, save_model
from invfold.components.protein.alphabet import ALPHABET

MODES = ["one_shot", "autoregressive"]


def tiny(decoding):
    return InverseFoldingModel(ModelConfig.preset("tiny", decoding=decoding)).eval()


def sample(model, b, **kw):
    return model.sample(b.X, b.mask, b.residue_index, **kw)


@pytest.mark.parametrize("decoding", MODES)
def test_sample_is_seed_deterministic(batch, decoding):
    model = tiny(decoding)
    a = sample(model, batch, temperature=1.0, seed=7)
    assert torch.equal(a, sample(model, batch, temperature=1.0, seed=7))
    assert not torch.equal(a, sample(model, batch, temperature=1.0, seed=8))
    assert a.shape == batch.S.shape and a.min() >= 0 and a.max() < 20


@pytest.mark.parametrize("decoding", MODES)
def test_sample_keeps_fixed_positions_and_excludes_letters(batch, decoding):
    model = tiny(decoding)
    fixed = torch.zeros_like(batch.mask, dtype=torch.bool)
    fixed[:, :6] = True
    excluded = "ACDEFGHIKL"
    S = sample(model, batch, temperature=2.0, seed=3, fixed_mask=fixed, fixed_S=batch.S, excluded=excluded)
    assert torch.equal(S[fixed], batch.S[fixed])
    banned = torch.tensor([ALPHABET.index(c) for c in excluded])
    assert not torch.isin(S[~fixed], banned).any()


def test_excluding_every_letter_is_an_error(batch):
    with pytest.raises(ValueError, match="all 20"):
        sample(tiny("one_shot"), batch, excluded=ALPHABET)
    with pytest.raises(ValueError, match="'B'"):
        sample(tiny("one_shot"), batch, excluded="B")


def test_autoregressive_sampling_matches_teacher_forced_forward(batch):
    """Incremental decoding sees what forward() sees: at a near-zero temperature every sampled
    letter is the argmax of forward() on the final sequence in the same order."""
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive", decoder_layers=2)).eval()
    order = torch.rand(batch.S.shape)
    S = sample(model, batch, temperature=1e-4, seed=0, decoding_order=order)
    logits = model(batch.X, S, batch.mask, batch.residue_index, order)
    real = batch.mask > 0
    assert torch.equal(S[real], logits.argmax(-1)[real])


def test_one_shot_low_temperature_is_argmax(batch):
    model = tiny("one_shot")
    S = sample(model, batch, temperature=1e-4, seed=0)
    logits = model(batch.X, batch.S, batch.mask, batch.residue_index)
    assert torch.equal(S, logits.argmax(-1))


@pytest.mark.parametrize("decoding", MODES)
def test_save_load_roundtrip(tmp_path, batch, decoding):
    model = tiny(decoding)
    path = tmp_path / "sub" / "model.pt"
    save_model(path, model)
    loaded = load_model(path)
    assert loaded.cfg == model.cfg and not loaded.training
    order = torch.rand(batch.S.shape)
    torch.testing.assert_close(
        loaded(batch.X, batch.S, batch.mask, batch.residue_index, order),
        model(batch.X, batch.S, batch.mask, batch.residue_index, order),
    )
    save_model(f"file://{tmp_path}/uri.pt", model)
    assert load_model(f"file://{tmp_path}/uri.pt").cfg == model.cfg


def test_load_rejects_foreign_files(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="expected an invfold model file"):
        load_model(tmp_path / "other.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="junk.pt"):
        load_model(tmp_path / "junk.pt")
