"""Complexes: several chains of one entry as one ChainRecord (chain_index, chain_names).

A complex is what the model sees when it should condition on every chain of a structure, as
ProteinMPNN does: one record, chains in order, and residue_index continued from chain to chain with
a jump of CHAIN_OFFSET (100, ProteinMPNN adds 100 per chain), so the model's relative-position
features (features.segment_ids) put every cross-chain pair in their "different chain" bucket. No
extra model input: a model trained on single chains reads complexes, and the ONNX graph is the same.

Readers build complexes when asked (`complexes=True`): PDB/mmCIF -> all protein chains of a file;
chain-set jsonl -> the lines of one entry ("1abc.A", "1abc.B") wherever they are in the file;
ProteinMPNN's parse_multiple_chains.py lines are complexes as written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from invfold.components.protein.errors import Skip
from invfold.components.protein.record import CHAIN_OFFSET, ChainRecord


def entry_of(name: str) -> str:
    """ "1abc.A" -> "1abc" (a name without a chain part is its own entry)."""
    return name.rsplit(".", 1)[0] if "." in name else name


def chain_id_of(name: str) -> str:
    """ "1abc.A" -> "A" ("A" when the name has no chain part)."""
    return name.rsplit(".", 1)[-1] if "." in name else "A"


def join_chains(
    name: str, chains: Sequence[ChainRecord], chain_names: Sequence[str] | None = None, source: str = ""
) -> ChainRecord:
    """One complex record from single-chain records, in the given order.

    residue_index: each chain's own numbering shifted so that chain k+1 starts CHAIN_OFFSET after
    the last residue of chain k. cath: the chains' CATH nodes (first occurrence order); cluster: the
    first chain's; num_chains: the largest of the chains' (the entry's chain count where the reader
    knows it) and at least len(chains); extra: the chains' counters summed ("modified", "unknown",
    "gap_filled"), other keys from the first chain; the chains' own extras under "chains".
    """
    if not chains:
        raise ValueError("a complex needs at least one chain")
    ids = tuple(chain_names) if chain_names is not None else tuple(chain_id_of(c.name) for c in chains)
    if len(ids) != len(chains) or len(set(ids)) != len(ids):
        raise ValueError(f"complex {name!r}: need one distinct chain id per chain, got {ids}")
    pieces, start = [], 0
    for chain in chains:
        index = np.asarray(chain.residue_index, dtype=np.int64)
        pieces.append(index - index[0] + start)
        start = int(pieces[-1][-1]) + CHAIN_OFFSET
    cath: list[str] = []
    for chain in chains:
        cath.extend(c for c in chain.cath if c not in cath)
    extra: dict = {}
    for chain in chains:
        for key, value in chain.extra.items():
            if key in ("modified", "unknown"):
                extra[key] = dict(sorted((Counter(extra.get(key, {})) + Counter(value)).items()))
            elif key == "gap_filled":
                extra[key] = extra.get(key, 0) + value
            else:
                extra.setdefault(key, value)
    extra["chains"] = {cid: dict(chain.extra) for cid, chain in zip(ids, chains, strict=True) if chain.extra}
    if not extra["chains"]:
        del extra["chains"]
    return ChainRecord(
        name=name,
        seq="".join(c.seq for c in chains),
        coords=np.concatenate([c.coords for c in chains]).astype(np.float32, copy=False),
        mask=np.concatenate([c.mask for c in chains]),
        residue_index=np.concatenate(pieces).astype(np.int32),
        num_chains=max(len(chains), *(c.num_chains for c in chains)),
        cath=tuple(cath),
        cluster=chains[0].cluster,
        source=source or chains[0].source,
        extra=extra,
        chain_index=np.repeat(np.arange(len(chains), dtype=np.int32), [len(c) for c in chains]),
        chain_names=ids,
        residue_ids=sum((c.residue_ids for c in chains), ()) if all(c.residue_ids for c in chains) else (),
    )


def split_complex(record: ChainRecord) -> list[ChainRecord]:
    """A complex's chains as single-chain records named "<entry>.<chain id>" (numbering from 0)."""
    if record.chain_index is None:
        return [record]
    out = []
    for cid, index in record.chain_positions().items():
        residue_index = record.residue_index[index]
        out.append(
            ChainRecord(
                name=f"{record.name}.{cid}",
                seq="".join(record.seq[i] for i in index),
                coords=record.coords[index],
                mask=record.mask[index],
                residue_index=(residue_index - residue_index[0]).astype(np.int32),
                num_chains=record.num_chains,
                cath=record.cath,
                cluster=record.cluster,
                source=f"{record.source}#{cid}" if record.source else "",
                extra=dict(record.extra.get("chains", {}).get(cid, {})),
                residue_ids=tuple(record.residue_ids[i] for i in index) if record.residue_ids else (),
            )
        )
    return out


def group_chain_set(items: Iterable[ChainRecord | Skip]) -> Iterator[ChainRecord | Skip]:
    """Chain-set records of one entry (names "<entry>.<id>") joined into one complex named
    "<entry>", wherever in the file its lines are: real sets list an entry's chains apart, and a
    docking set's receptor and ligand files each count only their own chains in num_chains.
    Skips and complexes already made pass through at once; the rest comes at the end of the input,
    in order of each entry's first line (so the reader holds the set's chains in memory). An entry
    with one line stays that single-chain record; a chain id seen twice in one entry starts a new
    group (prep drops the second as a duplicate name)."""
    groups: dict[str, list[list[ChainRecord]]] = {}
    for item in items:
        if not isinstance(item, ChainRecord) or item.chain_index is not None:
            yield item
            continue
        entry = entry_of(item.name) if "." in item.name else item.name
        runs = groups.setdefault(entry, [[]])
        if chain_id_of(item.name) in {chain_id_of(c.name) for c in runs[-1]}:
            runs.append([])
        runs[-1].append(item)
    for entry, runs in groups.items():
        for group in runs:
            yield group[0] if len(group) == 1 else join_chains(entry, group, source=group[0].source)
