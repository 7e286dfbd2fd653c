"""Chains and 1-based per-chain positions of a record, as ProteinMPNN's JSON inputs name them.

A multi-chain record says which chain each residue is in (ChainRecord.chain_positions()); a
record without that is one chain named by the part of its name after the last "." ("1abc.A" -> A).
"""

from __future__ import annotations

import numpy as np

from invfold.components.protein.record import ChainRecord
from invfold.errors import ConfigError


def chain_positions(record: ChainRecord) -> dict[str, np.ndarray]:
    """chain id -> 0-based indices into record.seq, in the record's chain order."""
    if hasattr(record, "chain_positions"):
        return dict(record.chain_positions())
    return {record.name.rsplit(".", 1)[-1] if "." in record.name else "A": np.arange(len(record))}


def entry_name(record: ChainRecord) -> str:
    """The key ProteinMPNN's dictionaries use for a structure: the name without its chain part
    ("1BD2.A" -> "1BD2"; a multi-chain record's name as it is)."""
    if hasattr(record, "chain_names") and len(getattr(record, "chain_names", ())) > 1:
        return record.name
    return record.name.rsplit(".", 1)[0] if "." in record.name else record.name


def resolve(chains: dict[str, np.ndarray], chain: str, position: int, what: str) -> int:
    """A 1-based position of `chain` -> index into the record's sequence; ConfigError if absent."""
    if chain not in chains:
        raise ConfigError(f"{what}: chain {chain!r} is not in the structure (chains: {', '.join(chains)})")
    index = chains[chain]
    if not isinstance(position, int) or isinstance(position, bool) or not 1 <= position <= len(index):
        raise ConfigError(
            f"{what}: position {position!r} of chain {chain!r}: expected 1..{len(index)} (1-based, per chain)"
        )
    return int(index[position - 1])


def chain_of(chains: dict[str, np.ndarray], length: int) -> np.ndarray:
    """object [L]: the chain id of every residue."""
    out = np.empty(length, dtype=object)
    for cid, index in chains.items():
        out[index] = cid
    return out


def selected_chains(chains: dict[str, np.ndarray], text: str, what: str) -> list[str]:
    """'A,B' -> ["A", "B"] checked against the structure's chains; '' -> all chains."""
    wanted = [c.strip() for c in text.split(",") if c.strip()]
    missing = [c for c in wanted if c not in chains]
    if missing:
        raise ConfigError(f"{what}: chains {missing} are not in the structure (chains: {', '.join(chains)})")
    return wanted or list(chains)
