"""Making a split that keeps related chains on one side, and measuring train-test identity.

Groups: CATH topologies (C.A.T) when every chain is labelled, chains that share any topology (a
multi-domain chain has several) merged into one group (union-find); else
the record's `cluster` field when every chain has one; else clusters at `threshold` sequence
identity from MMseqs2 (`mmseqs easy-cluster`, one step, when on PATH) or a k-mer estimate. The method is
chosen for the whole set, never per chain, so a labelled and an unlabelled homolog cannot end up
grouped by different rules. Then the groups of chains of one entry ("1abc.A", "1abc.B" with
num_chains > 1: one structure) are merged (`merge_entries`), so a structure's chains are never split apart; a complex
record ("1abc", several chains in one record) is whole by construction.

Groups are assigned whole to splits in the order of a seeded hash of their id, filling test,
then validation, to their fractions of the chains, the rest to train: deterministic, independent of
input order, and close to the asked fractions even with few groups (a per-group coin flip can
leave a small test split empty).

The k-mer fallback (4-mers, see `_kmer_identity`) is an estimate: on the real 833-chain set it
finds 591 groups where 40%-identity clusters give 655, and it over-reads the highest train-test
identity (0.50 where MMseqs2 aligns 0.40); short chains (under ~80 residues) near the threshold
can be missed. Prefer MMseqs2; the fallback keeps prep working where it is not installed.

Identity is "identical aligned residues / length of the shorter chain", so a short chain copied
inside a long one counts as the leak it is. MMseqs2 clusters with target coverage 0.5
(`--cov-mode 1`: members, including fragments, must be half covered by their representative).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from invfold.components.protein.complexes import entry_of
from invfold.errors import ConfigError, InvfoldError

log = logging.getLogger(__name__)

KMER = 4
MMSEQS_COVERAGE = 0.5
# k=5 halves MMseqs2's fixed start-up cost (its k-mer table; 0.9 -> 0.4 GB) at the same results on
# protein-sized sets; sensitivity 5.7 is easy-search's default, applied to clustering too.
MMSEQS_SPEED = ("-k", "5", "-s", "5.7")
SEQ_ALPHABET = "ACDEFGHIKLMNPQRSTVWY"


@dataclass
class IdentityHit:
    """The most similar (test, train) pair found; identity over the shorter chain's length.
    identity 0.0 with no names: no pair aligned (MMseqs2, e-value 1e-3) or shared k-mers beyond chance."""

    identity: float
    test: str | None
    train: str | None
    tool: str


def resolve_tool(preferred: str) -> str:
    """ "mmseqs" when asked for or available, else "kmer"; asking for mmseqs without it is an error."""
    found = shutil.which("mmseqs") is not None
    if preferred == "mmseqs" and not found:
        raise ConfigError("identity_tool='mmseqs' but no `mmseqs` on PATH (Debian: apt-get install mmseqs2)")
    if preferred == "kmer":
        return "kmer"
    return "mmseqs" if found else "kmer"


def cath_topologies(cath: tuple[str, ...]) -> tuple[str, ...]:
    """C.A.T of every CATH node, first seen first ("1.10.490.10" -> "1.10.490")."""
    return tuple(dict.fromkeys(".".join(node.split(".")[:3]) for node in cath if node))


def merge_groups(labels: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Chain name -> group id, chains sharing any label in one group (union-find over labels; the id
    is the group's smallest label, so it does not depend on input order)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for chain_labels in labels.values():
        for label in chain_labels:
            parent.setdefault(label, label)
        for label in chain_labels[1:]:
            a, b = find(chain_labels[0]), find(label)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {name: find(chain_labels[0]) for name, chain_labels in labels.items()}


def merge_entries(groups: dict[str, str], multi_chain: set[str] | None = None) -> dict[str, str]:
    """Chain name -> group with the groups of chains of one entry ("1abc.A", "1abc.B": one
    structure) merged, so the chains of one structure never land in different splits (a model
    trained on 1abc.A would otherwise be tested on its binding partner's interface). Only chains in
    `multi_chain` (records saying num_chains > 1; None: every name) are merged: a record that calls
    itself the only chain of its entry is left alone. Group ids stay the existing labels (the
    smallest of a merged set), so entries of one chain keep their groups."""
    by_entry: dict[str, list[str]] = {}
    for name in groups:
        if multi_chain is None or name in multi_chain:
            by_entry.setdefault(entry_of(name), []).append(name)
    labels: dict[str, tuple[str, ...]] = {name: (group,) for name, group in groups.items()}
    for names in by_entry.values():
        if len(names) > 1:
            shared = tuple(sorted({groups[n] for n in names}))
            for name in names:
                labels[name] = shared
    return merge_groups(labels)


def topology_overlap(assignment: dict[str, str], topologies: dict[str, tuple[str, ...]]) -> dict:
    """CATH topologies found in train and in a held-out split: the count per split pair, and a few."""
    by_split: dict[str, set[str]] = {}
    for name, split in assignment.items():
        by_split.setdefault(split, set()).update(topologies.get(name, ()))
    train = by_split.get("train", set())
    out = {}
    for split in sorted(set(by_split) - {"train"}):
        shared = sorted(train & by_split[split])
        out[split] = {"topologies": len(shared), "examples": shared[:5]}
    return out


def choose_method(split_by: str, labels: list[tuple[str | None, str | None]]) -> str:
    """Resolve "auto" from (topology, cluster) labels of the kept chains; a forced method whose
    label some chain lacks is an error naming how many."""
    if split_by == "auto":
        if labels and all(t for t, _ in labels):
            return "cath"
        if labels and all(c for _, c in labels):
            return "cluster"
        return "identity"
    column = {"cath": 0, "cluster": 1}.get(split_by)
    if column is not None:
        missing = sum(1 for label in labels if not label[column])
        if missing:
            raise ConfigError(f"split_by={split_by!r} but {missing} chain(s) have no {split_by} label")
    return split_by


def _hash_unit(seed: int, group: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\0{group}".encode()).digest()[:8], "big")


def assign_groups(group_sizes: dict[str, int], fractions: tuple[float, float, float], seed: int) -> dict[str, str]:
    """Group id -> split name (see the module docstring)."""
    total = sum(group_sizes.values())
    targets = {"test": fractions[2] * total, "validation": fractions[1] * total}
    needed = 1 + sum(1 for f in fractions[1:] if f > 0)
    if len(group_sizes) < needed:
        raise ConfigError(
            f"cannot split {len(group_sizes)} group(s) of related chains into {needed} non-empty "
            "splits; give a split file or more chains"
        )
    filled = Counter()
    out = {}
    ordered = sorted(group_sizes, key=lambda g: (_hash_unit(seed, g), g))
    for i, group in enumerate(ordered):
        left = len(ordered) - i
        if left == 1 and "train" not in filled:
            out[group] = "train"  # train is never left empty
            break
        split = next((s for s in ("test", "validation") if filled[s] < targets[s]), "train")
        out[group] = split
        filled[split] += group_sizes[group]
    return out


def cluster_sequences(seqs: dict[str, str], threshold: float, tool: str) -> dict[str, str]:
    """Chain name -> cluster id (a member's name) at `threshold` identity."""
    if tool == "mmseqs":
        return _mmseqs_cluster(seqs, threshold)
    return _kmer_cluster(seqs, threshold)


def best_hits(test: dict[str, str], train: dict[str, str], tool: str) -> dict[str, IdentityHit]:
    """Test chain -> its most similar train chain, for every test chain that aligns to one."""
    if not test or not train:
        return {}
    return _mmseqs_best(test, train) if tool == "mmseqs" else _kmer_best(test, train)


def highest(hits: dict[str, IdentityHit], tool: str) -> IdentityHit:
    """The highest of `best_hits` (ties: the first test, then train name); identity 0 when none."""
    if not hits:
        return IdentityHit(0.0, None, None, tool)
    return min(hits.values(), key=lambda h: (-h.identity, h.test or "", h.train or ""))


def highest_identity(test: dict[str, str], train: dict[str, str], tool: str) -> IdentityHit | None:
    """The test chain most similar to any train chain (None when either side is empty)."""
    if not test or not train:
        return None
    return highest(best_hits(test, train, tool), tool)


# ---------------------------------------------------------------- MMseqs2


def _write_fasta(path: Path, seqs: dict[str, str]) -> list[str]:
    """FASTA with index ids (names may hold characters MMseqs2 treats as separators)."""
    names = list(seqs)
    with open(path, "w") as fh:
        for i, name in enumerate(names):
            fh.write(f">{i}\n{seqs[name]}\n")
    return names


def _mmseqs(*args: str, cwd: Path) -> None:
    # one thread: MMseqs2's results are then independent of the machine's core count
    cmd = ["mmseqs", *args, "--threads", "1", "-v", "1"]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise InvfoldError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _mmseqs_cluster(seqs: dict[str, str], threshold: float) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="invfold-mmseqs-") as tmp:
        tmp = Path(tmp)
        names = _write_fasta(tmp / "in.fasta", seqs)
        _mmseqs(
            "easy-cluster",
            "in.fasta",
            "res",
            "tmp",
            "--min-seq-id",
            str(threshold),
            "-c",
            str(MMSEQS_COVERAGE),
            "--cov-mode",
            "1",
            "--single-step-clustering",
            "1",
            *MMSEQS_SPEED,
            cwd=tmp,
        )
        out = {}
        for line in (tmp / "res_cluster.tsv").read_text().splitlines():
            rep, member = line.split("\t")
            out[names[int(member)]] = names[int(rep)]
    missing = set(seqs) - set(out)
    if missing:
        raise InvfoldError(f"mmseqs easy-cluster left {len(missing)} sequence(s) unassigned")
    return out


def _mmseqs_best(test: dict[str, str], train: dict[str, str]) -> dict[str, IdentityHit]:
    with tempfile.TemporaryDirectory(prefix="invfold-mmseqs-") as tmp:
        tmp = Path(tmp)
        test_names = _write_fasta(tmp / "test.fasta", test)
        train_names = _write_fasta(tmp / "train.fasta", train)
        _mmseqs(
            "easy-search",
            "test.fasta",
            "train.fasta",
            "hits.m8",
            "tmp",
            "--format-output",
            "query,target,fident,alnlen,qlen,tlen",
            *MMSEQS_SPEED,
            cwd=tmp,
        )
        best: dict[str, IdentityHit] = {}
        for line in (tmp / "hits.m8").read_text().splitlines():
            # nident reads 0 without backtraces in MMseqs2 14; fident * alnlen is the same count
            q, t, fident, alnlen, qlen, tlen = line.split("\t")
            identity = min(round(float(fident) * int(alnlen)) / min(int(qlen), int(tlen)), 1.0)
            query, target = test_names[int(q)], train_names[int(t)]
            old = best.get(query)
            if old is None or identity > old.identity or (identity == old.identity and target < old.train):
                best[query] = IdentityHit(identity, query, target, "mmseqs")
    return best


# ---------------------------------------------------------------- k-mer estimate


def _kmer_matrix(seqs: list[str]):
    """Sparse 0/1 matrix [chains, 20^k]: which k-mers (of standard letters) each chain holds."""
    from scipy import sparse

    lookup = np.full(256, -1, dtype=np.int64)
    for i, letter in enumerate(SEQ_ALPHABET):
        lookup[ord(letter)] = i
    rows, cols = [], []
    for row, seq in enumerate(seqs):
        codes = lookup[np.frombuffer(seq.encode("ascii", "replace"), dtype=np.uint8)]
        if len(codes) < KMER:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(codes, KMER)
        windows = windows[(windows >= 0).all(axis=1)]
        kmers = np.unique(windows @ (20 ** np.arange(KMER - 1, -1, -1)))
        rows.append(np.full(len(kmers), row))
        cols.append(kmers)
    data_rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    data_cols = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    return sparse.csr_matrix(
        (np.ones(len(data_rows), dtype=np.float32), (data_rows, data_cols)), shape=(len(seqs), 20**KMER)
    )


def _kmer_identity(shared: np.ndarray, n: np.ndarray, chance: np.ndarray) -> np.ndarray:
    """Identity estimated from shared distinct k-mers.

    Two chains at identity p (ungapped) conserve a k-mer with probability p^k, so the shorter one
    (n k-mers) shares about n p^k of them with the other, on top of what unrelated chains of the
    same composition share by chance. The excess must also stand 4 standard deviations (+2) above the
    chance count (a Poisson count), so noise does not link unrelated chains; inverting gives p.
    """
    excess = shared - chance
    significant = excess > 4.0 * np.sqrt(chance) + 2.0
    conserved = np.clip(excess / np.maximum(n, 1.0), 0.0, 1.0)
    return np.where(significant, conserved ** (1.0 / KMER), 0.0)


def _kmer_pairs(a: list[str], b: list[str], block: int = 2048):
    """Yields (i, j, identity) blocks for every pair sharing at least one k-mer.

    Chance sharing uses the k-mer frequencies of the sequences at hand: a chain whose k-mers are
    common (low complexity, biased composition) is expected to share more with anything.
    """
    ma, mb = _kmer_matrix(a), _kmer_matrix(b)
    counts = np.asarray(ma.sum(axis=0)).ravel() + np.asarray(mb.sum(axis=0)).ravel()
    freq = counts / max(counts.sum(), 1.0)
    kmers_a = np.asarray(ma.sum(axis=1)).ravel()
    kmers_b = np.asarray(mb.sum(axis=1)).ravel()
    # expected chance hits of a's k-mers among b's, and of b's among a's
    common_a, common_b = ma @ freq, mb @ freq
    mbt = mb.T.tocsc()
    for start in range(0, len(a), block):
        shared = (ma[start : start + block] @ mbt).tocoo()
        i, j = shared.row + start, shared.col
        chance = 0.5 * (common_a[i] * kmers_b[j] + common_b[j] * kmers_a[i])
        n = np.minimum(kmers_a[i], kmers_b[j])
        yield i, j, _kmer_identity(shared.data, n, chance)


def _kmer_cluster(seqs: dict[str, str], threshold: float) -> dict[str, str]:
    """Single-linkage clusters over pairs whose estimated identity reaches `threshold` (single
    linkage errs towards larger groups, i.e. towards less leakage)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    names = list(seqs)
    values = list(seqs.values())
    rows, cols = [], []
    for i, j, identity in _kmer_pairs(values, values):
        keep = (identity >= threshold) & (i != j)
        rows.append(i[keep])
        cols.append(j[keep])
    r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    graph = coo_matrix((np.ones(len(r)), (r, c)), shape=(len(names), len(names)))
    _, labels = connected_components(graph, directed=False)
    first = {}
    for name, label in zip(names, labels, strict=True):
        first.setdefault(label, name)
    return {name: first[label] for name, label in zip(names, labels, strict=True)}


def _kmer_best(test: dict[str, str], train: dict[str, str]) -> dict[str, IdentityHit]:
    test_names, train_names = list(test), list(train)
    best: dict[str, IdentityHit] = {}
    for i, j, identity in _kmer_pairs(list(test.values()), list(train.values())):
        for a, b, value in zip(
            i[identity > 0].tolist(), j[identity > 0].tolist(), identity[identity > 0].tolist(), strict=True
        ):
            query, target = test_names[a], train_names[b]
            old = best.get(query)
            if old is None or value > old.identity or (value == old.identity and target < old.train):
                best[query] = IdentityHit(float(value), query, target, "kmer")
    return best
