"""What the design tests write and read: a record as a PDB file, and design FASTA parsed by its header."""

from __future__ import annotations

import re

from tests.support.structures import ChainSpec, write_chains

HEADER = re.compile(r"^>(\S+) sample=(\d+) T=(\S+) seed=(\d+) mean_nll=(\S+) recovery=(\S+) model=(\S+)$")


def read_fasta(path):
    lines = path.read_text().splitlines()
    assert len(lines) % 2 == 0
    return [(HEADER.match(h), s) for h, s in zip(lines[::2], lines[1::2], strict=True)]


def write_pdb(path, record):
    """The record's observed backbone as a PDB file, chain B numbered from 10."""
    return write_chains(path, [ChainSpec("B", record, number_from=10)])
