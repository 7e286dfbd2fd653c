import pytest
import torch

from invfold.components.model import InverseFoldingModel, ModelConfig
from invfold.components.model import features as ft
from invfold.components.protein.batch import collate
from tests.support.records import synthetic_records

MODES = ["one_shot", "autoregressive"]


def tiny(decoding="one_shot", **overrides):
    return InverseFoldingModel(ModelConfig.preset("tiny", decoding=decoding, **overrides)).eval()


def run(model, b, S=None, order=None, X=None, mask=None, ridx=None):
    order = torch.rand(b.S.shape) if order is None else order
    return model(
        b.X if X is None else X,
        b.S if S is None else S,
        b.mask if mask is None else mask,
        b.residue_index if ridx is None else ridx,
        order,
    )


@pytest.mark.parametrize("decoding", MODES)
def test_logits_shape_and_finite(batch, decoding):
    logits = run(tiny(decoding), batch)
    assert logits.shape == (*batch.S.shape, 20)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("decoding", MODES)
@pytest.mark.parametrize("length", [1, 3, 8, 9])  # shorter than, equal to and longer than k = 8
def test_chains_shorter_than_k(decoding, length):
    b = collate(synthetic_records(1, seed=3, min_length=20, max_length=40))
    logits = tiny(decoding)(
        b.X[:, :length], b.S[:, :length], b.mask[:, :length], b.residue_index[:, :length], torch.rand(1, length)
    )
    assert logits.shape == (1, length, 20) and torch.isfinite(logits).all()


@pytest.mark.parametrize("decoding", MODES)
def test_masked_residue_coordinates_do_not_reach_other_residues(batch, decoding):
    model = tiny(decoding)
    order = torch.rand(batch.S.shape)
    mask = batch.mask.clone()
    mask[0, 5] = 0
    X2 = batch.X.clone()
    X2[0, 5] += torch.randn(4, 3) * 5.0
    before = run(model, batch, order=order, mask=mask)
    after = run(model, batch, order=order, mask=mask, X=X2)
    keep = torch.ones_like(mask, dtype=torch.bool)
    keep[0, 5] = False
    torch.testing.assert_close(before[keep], after[keep], atol=1e-5, rtol=0)
    # an observed residue moved the same way does change its neighbours
    moved = run(model, batch, order=order, X=X2)
    assert (moved[0, 4] - run(model, batch, order=order)[0, 4]).abs().max() > 1e-4


def test_padding_does_not_change_logits(records):
    model = tiny("autoregressive")
    shortest = min(records, key=len)
    alone = collate([shortest])
    padded = collate([shortest, max(records, key=len)])
    n = alone.S.shape[1]
    assert padded.S.shape[1] > n
    order = torch.rand(padded.S.shape)
    a = model(alone.X, alone.S, alone.mask, alone.residue_index, order[:1, :n])
    p = model(padded.X, padded.S, padded.mask, padded.residue_index, order)
    torch.testing.assert_close(a[0], p[0, :n], atol=1e-5, rtol=0)


def test_chain_break_changes_relative_position_buckets():
    ridx = torch.arange(10).unsqueeze(0)
    E_idx = torch.arange(10).expand(1, 10, 10)
    joined = ft.relative_position_buckets(ridx, E_idx, max_relative=32)
    broken_ridx = ridx.clone()
    broken_ridx[0, 5:] += 3  # residues missing between 4 and 5
    broken = ft.relative_position_buckets(broken_ridx, E_idx, max_relative=32)
    assert joined[0, 4, 5] == 33 and joined[0, 5, 4] == 31
    assert broken[0, 4, 5] == broken[0, 5, 4] == 65  # the break bucket
    assert broken[0, 6, 5] == 31 and broken[0, 1, 0] == 31  # same segment: plain offsets
    assert torch.equal(ft.segment_ids(broken_ridx), torch.tensor([[0] * 5 + [1] * 5]))


@pytest.mark.parametrize("decoding", MODES)
def test_chain_break_changes_logits(batch, decoding):
    model = tiny(decoding)
    order = torch.rand(batch.S.shape)
    ridx = batch.residue_index.clone()
    ridx[0, 10:] += 5
    diff = (run(model, batch, order=order) - run(model, batch, order=order, ridx=ridx)).abs()
    assert diff[0, 8:12].max() > 1e-4
    torch.testing.assert_close(diff[1:], torch.zeros_like(diff[1:]))


def test_one_shot_ignores_sequence_and_order(batch):
    model = tiny("one_shot")
    a = run(model, batch)
    b = run(model, batch, S=torch.randint(0, 20, batch.S.shape), order=torch.rand(batch.S.shape))
    torch.testing.assert_close(a, b)


def test_autoregressive_causality(batch):
    """Logits at i depend only on letters decoded before i."""
    model = tiny("autoregressive", encoder_layers=2, decoder_layers=2)
    order = torch.rand(batch.S.shape)
    base = run(model, batch, order=order)
    for i in (0, 7, 15):
        S2 = batch.S.clone()
        later = order[0] > order[0, i]
        S2[0, later] = (S2[0, later] + 1 + torch.randint(0, 19, S2[0, later].shape)) % 20
        changed = run(model, batch, S=S2, order=order)
        torch.testing.assert_close(changed[0, i], base[0, i], atol=1e-5, rtol=0)
    # changing the letters decoded earlier does change position i: the decoder reads S
    i = int(order[0].argmax())
    S2 = batch.S.clone()
    S2[0, order[0] < order[0, i]] = (S2[0, order[0] < order[0, i]] + 1) % 20
    assert (run(model, batch, S=S2, order=order)[0, i] - base[0, i]).abs().max() > 1e-4


@pytest.mark.parametrize("decoding", MODES)
def test_activation_checkpointing_gives_the_same_gradients(batch, decoding):
    plain = tiny(decoding).train()
    ckpt = tiny(decoding, activation_checkpointing=True).train()
    ckpt.load_state_dict(plain.state_dict())
    order = torch.rand(batch.S.shape)
    for m in (plain, ckpt):
        run(m, batch, order=order).logsumexp(-1).sum().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        assert a.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4)


# ProteinMPNN-compatible featurization (ModelConfig.featurization = "proteinmpnn"): the end-to-end
# parity with upstream is tests/model/test_upstream_parity.py; these check its contract on any model.


@pytest.mark.parametrize("length", [1, 3, 8, 9])  # shorter than, equal to and longer than k = 8
def test_proteinmpnn_featurization_on_chains_shorter_than_k(length):
    b = collate(synthetic_records(1, seed=3, min_length=20, max_length=40))
    model = tiny("autoregressive", featurization="proteinmpnn")
    logits = model(
        b.X[:, :length], b.tokens[:, :length], b.mask[:, :length], b.residue_index[:, :length], torch.rand(1, length)
    )
    assert logits.shape == (1, length, 20) and torch.isfinite(logits).all()


def test_proteinmpnn_featurization_padding_does_not_change_logits(records):
    model = tiny("autoregressive", featurization="proteinmpnn")
    shortest = min(records, key=len)
    alone, padded = collate([shortest]), collate([shortest, max(records, key=len)])
    n = alone.S.shape[1]
    order = torch.rand(padded.S.shape)
    a = model(alone.X, alone.tokens, alone.structure_mask, alone.residue_index, order[:1, :n])
    p = model(padded.X, padded.tokens, padded.structure_mask, padded.residue_index, order)
    torch.testing.assert_close(a[0], p[0, :n], atol=1e-5, rtol=0)


def test_proteinmpnn_featurization_keeps_a_break_inside_its_chain():
    """A C-N break (residue_index +2) stays in its chain with sequence-position offsets; a chain jump
    (>= 100) and padding (>= 1000) start new chains; padding is not part of the record."""
    ridx = torch.tensor([[0, 1, 2, 4, 5, 105, 106, 1106, 1107]])
    assert ft.chain_ids(ridx).tolist() == [[0, 0, 0, 0, 0, 1, 1, 2, 2]]
    assert ft.record_mask(ridx).tolist() == [[True] * 7 + [False] * 2]
    E_idx = torch.arange(9).expand(1, 9, 9)
    buckets = ft.relative_position_buckets_by_chain(ridx, E_idx, max_relative=32)
    assert buckets[0, 2, 3] == 32 + 1  # across the break: offset 1 (positions), same chain
    assert buckets[0, 4, 5] == 65 and buckets[0, 5, 6] == 33  # across chains; inside the second
    segments = ft.relative_position_buckets(ridx, E_idx, max_relative=32)
    assert segments[0, 2, 3] == 65  # our own rule: a break starts a segment


def test_proteinmpnn_featurization_lets_unobserved_residues_in(records):
    """Upstream's neighbour rule: fewer than k observed residues -> unobserved ones of the record
    fill the list (masked in the encoder, read by the decoder); ours keeps only observed ones."""
    b = collate([min(records, key=len)])
    mask = b.structure_mask.clone()
    mask[0, 6:] = 0  # 6 observed < k = 8
    CA = b.X[:, :, 1]
    E_idx, enc, dec, distance = ft.knn_graph_proteinmpnn(CA, mask, b.residue_index, k=8)
    assert E_idx.shape == (1, mask.shape[1], 8)
    row = 0
    observed = int(mask[0].sum())
    unobserved = mask[0, E_idx[0, row]] == 0
    # every observed residue but perhaps the farthest (tied with the unobserved ones) is in the list
    assert int(unobserved.sum()) in (8 - observed, 8 - observed + 1)
    assert (enc[0, row][unobserved] == 0).all() and (dec[0, row] == 1).all()
    farthest = (CA[0, :observed] - CA[0, row]).norm(dim=-1).max()
    torch.testing.assert_close(distance[0, row][unobserved], farthest.expand(int(unobserved.sum())))
    _, nb_mask = ft.knn_graph(CA, mask, k=8)
    assert int(nb_mask[0, row].sum()) == 6


def test_proteinmpnn_featurization_embeds_x():
    model = tiny("autoregressive", featurization="proteinmpnn")
    assert model.seq_embed.num_embeddings == 21
    own = tiny("autoregressive")
    assert own.seq_embed.num_embeddings == 20
    S = torch.tensor([[0, 20, 5]])
    assert own.tokens(S).tolist() == [[0, 0, 5]] and model.tokens(S).tolist() == [[0, 20, 5]]
