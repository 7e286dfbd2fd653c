"""Chains and positions of a record as users write them: ProteinMPNN's 1-based per-chain positions
and LigandMPNN's residue IDs (chain + author number + insertion code: "A23", "B42C").

A multi-chain record says which chain each residue is in (ChainRecord.chain_positions()); a
record without that is one chain named by the part of its name after the last "." ("1abc.A" -> A).
A 1-based position counts the record's residues (the deposited sequence's fill where the file has
one, structure.py); a residue ID names the residue the file numbers so (record.residue_ids), which
differ where the numbering has insertion codes or skips (Kabat).

Light on purpose (numpy imported where used): config.py parses --fixed through parse_positions.
"""

from __future__ import annotations

import bisect
import re
from typing import TYPE_CHECKING

from invfold.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from invfold.components.protein.record import ChainRecord

# LigandMPNN's residue ID: chain id (starting with a letter), author number, optional insertion code
RESIDUE_ID = re.compile(r"([A-Za-z][A-Za-z0-9]*?)(-?\d+)([A-Za-z]?)")
# the same without the chain, where the chain is already named (a JSON list under its chain key)
AUTHOR_NUMBER = re.compile(r"(-?\d+)([A-Za-z]?)")


def parse_positions(text: str, max_position: int | None = None) -> list[int | str]:
    """ "1-3,7" -> [1, 2, 3, 7] (1-based, sorted); "A23 A24 B42C" -> ["A23", "A24", "B42C"]
    (residue IDs, in the order given); both kinds may be mixed, separated by commas or spaces.
    max_position: the highest position any record can have (the caller's max_length): a range
    past it is refused before it is expanded ("1-10000000000000000000" would fill memory)."""
    numbers: list[int] = []
    ids: list[str] = []
    for part in text.replace(",", " ").split():
        if RESIDUE_ID.fullmatch(part):
            if part not in ids:
                ids.append(part)
            continue
        try:
            lo, _, hi = part.partition("-")
            start, end = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(
                f"fixed positions: {part!r} is not a position, a range like 5-12 or a residue ID like A23 or B42C"
            ) from None
        if start < 1 or end < start:
            raise ConfigError(f"fixed positions: {part!r}: expected 1-based positions, start <= end")
        if max_position is not None and end > max_position:
            raise ConfigError(
                f"fixed positions: {part!r}: expected positions <= {max_position:,} (records longer than "
                "DesignConfig.max_length are not designed)"
            )
        numbers.extend(range(start, end + 1))
    return [*sorted(set(numbers)), *ids]


def fixed_indices(record: ChainRecord, items: list[int | str], what: str = "fixed positions") -> list[int]:
    """--fixed's items -> indices into record.seq: an int is a 1-based position of the whole record
    (chains concatenated in record order), a string a residue ID ("A23")."""
    length = len(record)
    bad = [p for p in items if isinstance(p, int) and p > length]
    if bad:
        raise ConfigError(
            f"{what} {bad[:5]} lie beyond the chain's {length} residues "
            f"({record.name}; positions are 1-based sequence positions)"
        )
    chains = chain_positions(record)
    out = []
    for item in items:
        if isinstance(item, int):
            out.append(item - 1)
            continue
        match = RESIDUE_ID.fullmatch(item)
        if match is None:
            raise ConfigError(f"{what}: {item!r} is not a residue ID like A23 or B42C")
        chain = match.group(1)
        if chain not in chains:
            raise ConfigError(
                f"{what}: residue ID {item!r}: chain {chain!r} is not in {record.name} (chains: {', '.join(chains)})"
            )
        out.append(resolve_id(record, chains, chain, match.group(2) + match.group(3), what))
    return out


def index_of(record: ChainRecord, chains: dict[str, np.ndarray], chain: str, item, what: str) -> int:
    """One position of a JSON list under `chain`: an int is 1-based; a string a residue ID, with
    or without the chain ("42C" or "B42C"). ConfigError if it names no residue."""
    if isinstance(item, str):
        match = AUTHOR_NUMBER.fullmatch(item)
        label = match.group(1) + match.group(2) if match else None
        full = RESIDUE_ID.fullmatch(item)
        if label is None and full is not None:
            if full.group(1) != chain:
                raise ConfigError(f"{what}: residue ID {item!r} is not in chain {chain!r}, the key it is listed under")
            label = full.group(2) + full.group(3)
        if label is None:
            raise ConfigError(f"{what}: {item!r} is not a residue ID like 23, 42C or {chain}42C")
        return resolve_id(record, chains, chain, label, what)
    return resolve(chains, chain, item, what)


def resolve_id(record: ChainRecord, chains: dict[str, np.ndarray], chain: str, label: str, what: str) -> int:
    """Author number + insertion code ("42C") of `chain` -> index into record.seq; ConfigError
    naming the ID, the chain and the nearest IDs the chain has."""
    ids = record.residue_ids if len(record.residue_ids) == len(record) else ()
    if not ids:
        raise ConfigError(
            f"{what}: residue ID {chain}{label}: {record.name} has no author numbering (a chain-set record); "
            "give 1-based positions, or design from the PDB/mmCIF file"
        )
    index = chains[chain]
    labels = [ids[i] for i in index]
    if label in labels:
        return int(index[labels.index(label)])
    present = sorted((_id_key(x), x) for x in labels if x)
    at = bisect.bisect_left(present, (_id_key(label), label))
    nearest = [f"{chain}{x}" for _, x in present[max(0, at - 2) : at + 2]]
    span = f"{chain}{present[0][1]}..{chain}{present[-1][1]}" if present else "none"
    raise ConfigError(
        f"{what}: residue ID {chain}{label} names no residue of chain {chain!r} of {record.name} "
        f"(its residues {span}; nearest: {', '.join(nearest) or 'none'})"
    )


def _id_key(label: str) -> tuple[int, str]:
    match = AUTHOR_NUMBER.fullmatch(label)
    return (int(match.group(1)), match.group(2)) if match else (0, label)


def chain_positions(record: ChainRecord) -> dict[str, np.ndarray]:
    """chain id -> 0-based indices into record.seq, in the record's chain order."""
    if hasattr(record, "chain_positions"):
        return dict(record.chain_positions())
    import numpy as np

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
    import numpy as np

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
