"""Prepared datasets on disk: one Arrow IPC file per dataset, an index, and their reader.

Why Arrow IPC (the uncompressed file format): a file is memory-mapped and its columns are read
zero-copy, so opening a dataset costs nothing and a row costs only its own pages; the `length`
column alone gives the trainer what it needs to bucket by length without touching coordinates;
it is written in bounded record batches (memory follows the batch size, not the dataset size);
and pyarrow, already a dependency of the MLflow/KFP stack, reads it everywhere. The bytes depend
only on the rows (no timestamps or host data in schema metadata or footer), so equal inputs give
equal files and equal digests.

Columns: name, seq (string); coords (list<float32>, N/CA/C/O x/y/z flattened, L*12, NaN where
missing); residue_index (list<int32>); num_chains, length (int32); cath (list<string>); cluster
(string, null when absent); chain_index (list<int32>, which chain each residue is in; null for a
single chain) and chain_names (list<string>, empty for a single chain) for complexes
(protein/complexes.py). Files written before those two columns existed read as single chains.
The mask is not stored: it is `isfinite(coords)` over each residue.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from invfold import storage
from invfold.components.prep.card import CARD_JSON, CARD_MD
from invfold.components.protein.record import ChainRecord, observed_mask
from invfold.errors import InputError

FORMAT = "invfold-prep/1"
INDEX_FILE = "index.json"
# What an index may name: a digest is exactly a sha256 (it becomes a cache folder name), and a
# dataset is one plain file name component whose file is `<dataset>.arrow` (never a path).
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
DATASET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
# What reading a prepared folder's JSON may cost, whoever wrote it: the index lists every chain's
# length (about 5 bytes a chain per dataset, so 32 MiB is over 6 million chains); the card's size
# follows its drop examples and split figures, not the set's size (16 MiB: one longest
# chain-set line, `PrepConfig.max_line_bytes`, quoted in an example).
MAX_INDEX_BYTES = 32 * 2**20
MAX_CARD_BYTES = 16 * 2**20

SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("seq", pa.string()),
        ("coords", pa.list_(pa.float32())),
        ("residue_index", pa.list_(pa.int32())),
        ("num_chains", pa.int32()),
        ("length", pa.int32()),
        ("cath", pa.list_(pa.string())),
        ("cluster", pa.string()),
        ("chain_index", pa.list_(pa.int32())),
        ("chain_names", pa.list_(pa.string())),
    ],
    metadata={"format": FORMAT},
)


def dataset_file(name: str) -> str:
    return f"{name}.arrow"


class DatasetWriter:
    """Appends records to one Arrow IPC file, flushing a record batch every `batch_rows` rows or
    `batch_bytes` of coordinates, whichever comes first."""

    def __init__(self, path: Path, batch_rows: int, batch_bytes: int):
        self.path = path
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_file(self._sink, SCHEMA)
        self._batch_rows, self._batch_bytes = batch_rows, batch_bytes
        self._rows: list[ChainRecord] = []
        self._bytes = 0
        self.lengths: list[int] = []

    def add(self, record: ChainRecord) -> None:
        self._rows.append(record)
        self._bytes += record.coords.nbytes
        self.lengths.append(len(record.seq))
        if len(self._rows) >= self._batch_rows or self._bytes >= self._batch_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        rows = self._rows
        lengths = np.array([len(r.seq) for r in rows], dtype=np.int32)
        coord_offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(lengths * 12, out=coord_offsets[1:])
        index_offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(lengths, out=index_offsets[1:])
        coords = np.concatenate([np.ascontiguousarray(r.coords, dtype=np.float32).reshape(-1) for r in rows])
        residue_index = np.concatenate([np.asarray(r.residue_index, dtype=np.int32) for r in rows])
        batch = pa.record_batch(
            [
                pa.array([r.name for r in rows], pa.string()),
                pa.array([r.seq for r in rows], pa.string()),
                pa.ListArray.from_arrays(pa.array(coord_offsets), pa.array(coords, pa.float32())),
                pa.ListArray.from_arrays(pa.array(index_offsets), pa.array(residue_index, pa.int32())),
                pa.array([r.num_chains for r in rows], pa.int32()),
                pa.array(lengths),
                pa.array([list(r.cath) for r in rows], pa.list_(pa.string())),
                pa.array([r.cluster for r in rows], pa.string()),
                pa.array(
                    [None if r.chain_index is None else np.asarray(r.chain_index, np.int32) for r in rows],
                    pa.list_(pa.int32()),
                ),
                pa.array([list(r.chain_names) for r in rows], pa.list_(pa.string())),
            ],
            schema=SCHEMA,
        )
        self._writer.write_batch(batch)
        self._rows, self._bytes = [], 0

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._sink.close()


def content_digest(root: Path, names: list[str]) -> str:
    """sha256 over (name, size, bytes) of each dataset file, in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(names):
        path = root / dataset_file(name)
        h.update(f"{name}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    return "sha256:" + h.hexdigest()


class ShardedDataset(Sequence):
    """Rows of one dataset as ChainRecords, read on demand from the memory-mapped file.

    `lengths` (int32) comes from the length column alone. Picklable (reopens the file), so it can
    go to DataLoader workers.
    """

    def __init__(self, path: str | os.PathLike, name: str):
        self.path, self.name = Path(path), name
        self._open()

    def _open(self) -> None:
        try:
            self._map = pa.memory_map(str(self.path), "r")
            reader = pa.ipc.open_file(self._map)
            self._batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            counts = np.array([b.num_rows for b in self._batches], dtype=np.int64)
            self._starts = np.concatenate([[0], np.cumsum(counts)])
            self.lengths = np.concatenate(
                [b.column("length").to_numpy() for b in self._batches] or [np.zeros(0, np.int32)]
            ).astype(np.int32)
        except DAMAGED as err:
            raise damaged(self.path, None, err) from None
        self._views: dict[int, tuple] = {}

    def __getstate__(self):
        return {"path": self.path, "name": self.name}

    def __setstate__(self, state):
        self.path, self.name = state["path"], state["name"]
        self._open()

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _batch_views(self, b: int) -> tuple:
        views = self._views.get(b)
        if views is None:
            batch = self._batches[b]
            # offsets and UTF-8 checked once per batch: a damaged list or string column would make
            # pyarrow read past its buffers and abort the process, not raise
            batch.validate(full=True)
            coords, ridx = batch.column("coords"), batch.column("residue_index")
            views = (
                coords.offsets.to_numpy(),
                coords.values.to_numpy(),
                ridx.offsets.to_numpy(),
                ridx.values.to_numpy(),
                batch,
            )
            self._views[b] = views
        return views

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"row {index} out of range for dataset '{self.name}' of {n} rows")
        try:
            return self._row(index)
        except DAMAGED as err:
            raise damaged(self.path, f"row {index}", err) from None

    def _row(self, index: int) -> ChainRecord:
        b = int(np.searchsorted(self._starts, index, side="right") - 1)
        j = index - int(self._starts[b])
        coord_off, coord_val, ridx_off, ridx_val, batch = self._batch_views(b)
        coords = coord_val[coord_off[j] : coord_off[j + 1]].reshape(-1, 4, 3).copy()
        cluster = batch.column("cluster")[j].as_py()
        chain_index, chain_names = None, ()
        if "chain_index" in batch.schema.names:
            value = batch.column("chain_index")[j]
            if value.is_valid:
                chain_index = value.values.to_numpy().astype(np.int32)
                chain_names = tuple(batch.column("chain_names")[j].as_py())
        return ChainRecord(
            name=batch.column("name")[j].as_py(),
            seq=batch.column("seq")[j].as_py(),
            coords=coords,
            mask=observed_mask(coords),
            residue_index=ridx_val[ridx_off[j] : ridx_off[j + 1]].copy(),
            num_chains=int(batch.column("num_chains")[j].as_py()),
            cath=tuple(batch.column("cath")[j].as_py()),
            cluster=cluster,
            source=f"{self.path.name}#{index}",
            chain_index=chain_index,
            chain_names=chain_names,
        )


# What reading a damaged Arrow file raises (pyarrow's errors are ValueError/OSError subclasses;
# a missing column is a KeyError, inconsistent lengths a reshape ValueError or an IndexError).
DAMAGED = (pa.ArrowException, OSError, ValueError, KeyError, IndexError, TypeError)


def damaged(path, where: str | None, err: Exception) -> InputError:
    """A prepared dataset file that is not what prep writes (truncated, overwritten, edited)."""
    detail = (str(err).splitlines() or [""])[0][:200]
    return InputError(
        path, where, None, "an Arrow file as invfold prep writes it", f"{type(err).__name__}: {detail}",
        reason="damaged_dataset",
    )  # fmt: skip


@dataclass
class PreparedData:
    """A prepared folder: its card, digest, datasets (name -> index entry) and their readers."""

    root: Path
    index: dict
    card: dict

    @property
    def digest(self) -> str:
        return self.index["digest"]

    @property
    def datasets(self) -> list[str]:
        return list(self.index["datasets"])

    def open(self, name: str) -> ShardedDataset:
        if name not in self.index["datasets"]:
            raise InputError(
                str(self.root), None, "datasets", f"one of {self.datasets}", repr(name), reason="missing_dataset"
            )
        return ShardedDataset(self.root / dataset_file(name), name)  # check_index: file == this name


def default_cache_dir() -> Path:
    return Path(os.environ.get("INVFOLD_CACHE_DIR") or Path.home() / ".cache" / "invfold") / "prepared"


def check_index(index, where) -> dict:
    """The index of a prepared folder, checked before any of its names touches a path: the
    format, a `sha256:<64 hex>` digest, and datasets whose names are plain file names and whose
    files are exactly `<dataset>.arrow`. Anything else is an InputError naming `where`."""
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        found = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise InputError(where, None, "format", f"{FORMAT!r} (an invfold prep output)", repr(found))
    digest = index.get("digest")
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise InputError(where, None, "digest", "'sha256:' and 64 lowercase hex digits", repr(digest)[:100])
    datasets = index.get("datasets")
    if not isinstance(datasets, dict):
        raise InputError(where, None, "datasets", "an object of dataset entries", type(datasets).__name__)
    for name, entry in datasets.items():
        if not DATASET_NAME.match(name) or name in (".", ".."):
            expected = f"dataset names matching {DATASET_NAME.pattern}"
            raise InputError(where, None, "datasets", expected, repr(name)[:100], reason="unsafe_path")
        file = entry.get("file") if isinstance(entry, dict) else None
        if file != dataset_file(name):
            raise InputError(
                where, None, f"datasets.{name}.file", repr(dataset_file(name)), repr(file)[:100], reason="unsafe_path"
            )
    return index


def _inside(folder: Path, name: str, where) -> Path:
    """`folder/name`, refused unless it resolves inside `folder` (a second line behind the name
    checks: a symlink planted in the folder cannot lead a write elsewhere)."""
    path = (folder / name).resolve()
    if path.parent != folder.resolve():
        raise InputError(where, None, "file", f"a file inside {folder}", repr(name), reason="unsafe_path")
    return path


def load_index(path: str | os.PathLike) -> dict:
    """A prepared folder's index.json, read (at most MAX_INDEX_BYTES) and checked (check_index)."""
    return check_index(storage.load_json(path, MAX_INDEX_BYTES, "MAX_INDEX_BYTES"), path)


def check_card(card, index: dict, where) -> dict:
    """A card, checked against its index before anything trusts it: an object in prep's format
    naming the index's digest and exactly the index's datasets with their chain and residue
    counts (which check_counts holds to the data the digest covers)."""
    if not isinstance(card, dict):
        raise InputError(where, None, None, "a JSON object (the dataset card)", type(card).__name__, reason="bad_card")
    if card.get("format") != FORMAT:
        raise InputError(where, None, "format", repr(FORMAT), repr(card.get("format"))[:100], reason="bad_card")
    if card.get("digest") != index["digest"]:
        got = repr(card.get("digest"))[:100]
        raise InputError(where, None, "digest", f"the index's {index['digest']}", got, reason="bad_card")
    datasets = card.get("datasets")
    expected = {name: (entry.get("rows"), entry.get("residues")) for name, entry in index["datasets"].items()}
    got = (
        {name: (d.get("chains"), d.get("residues")) if isinstance(d, dict) else d for name, d in datasets.items()}
        if isinstance(datasets, dict)
        else datasets
    )
    if got != expected:
        raise InputError(
            where,
            None,
            "datasets",
            f"the index's datasets, chains and residues {expected}"[:300],
            repr(got)[:300],
            reason="bad_card",
        )
    return card


def check_counts(root: Path, index: dict, card: dict, where) -> None:
    """The index's rows, residues and lengths and the card's median lengths, held to the Arrow
    files themselves (what the digest covers): a downloaded folder whose JSON describes other
    data is refused."""
    for name, entry in index["datasets"].items():
        lengths = ShardedDataset(root / dataset_file(name), name).lengths
        median = float(np.median(lengths)) if len(lengths) else 0.0
        found = {"rows": len(lengths), "residues": int(lengths.sum(dtype=np.int64)), "lengths": lengths.tolist()}
        for field, value in found.items():
            if entry.get(field) != value:
                got = repr(entry.get(field))[:100]
                raise InputError(where, None, f"datasets.{name}.{field}", f"{value} (the file's)"[:100], got)
        if card["datasets"][name].get("median_length") != median:
            got = repr(card["datasets"][name].get("median_length"))[:100]
            raise InputError(where, None, f"card datasets.{name}.median_length", f"{median} (the file's)", got)


def open_prepared(root: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> PreparedData:
    """Open a prep output folder; a remote one (s3://, http(s)://, ...) is downloaded once into
    `cache_dir`/<digest> and verified against its digest."""
    if storage.is_remote(root):
        root = _cached_copy(str(root).rstrip("/"), Path(cache_dir) if cache_dir else default_cache_dir())
    root = Path(str(root).removeprefix("file://"))
    index = load_index(root / INDEX_FILE)  # missing or invalid: an InputError naming the file
    card_path = root / CARD_JSON
    card = {}
    if card_path.exists():
        card = check_card(storage.load_json(card_path, MAX_CARD_BYTES, "MAX_CARD_BYTES"), index, card_path)
    return PreparedData(root, index, card)


def _cached_copy(uri: str, cache_dir: Path) -> Path:
    """Download a remote prepared folder into `cache_dir/<digest hex>`. Every name is checked
    (check_index) before it becomes a path and the card against the index (check_card) before
    any file is written; files land in a private staging folder, published (one rename) only
    once the datasets match the digest and the index's and card's counts (check_counts). The
    digest covers the datasets only, so a cached copy is used only while its index and cards are
    byte for byte the remote's: any other entry (a bad card an older invfold cached, or the same
    data under another card) is replaced by this download, never served in its place."""
    where = f"{uri}/{INDEX_FILE}"
    meta = {INDEX_FILE: storage.read_bytes(where, MAX_INDEX_BYTES, "MAX_INDEX_BYTES")}
    index = check_index(storage.parse_json(meta[INDEX_FILE], where), where)
    for name in (CARD_JSON, CARD_MD):
        meta[name] = storage.read_bytes(f"{uri}/{name}", MAX_CARD_BYTES, "MAX_CARD_BYTES")
    card = check_card(storage.parse_json(meta[CARD_JSON], f"{uri}/{CARD_JSON}"), index, f"{uri}/{CARD_JSON}")
    target = cache_dir / index["digest"].split(":", 1)[1]
    if _holds(target, meta):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=cache_dir))
    try:
        for name in [dataset_file(n) for n in index["datasets"]]:
            dest = _inside(staging, name, where)
            if _linked(target / name, dest):  # the same digest's data, verified again below
                continue
            with storage.open_binary(f"{uri}/{name}") as src, open(dest, "xb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        got = content_digest(staging, list(index["datasets"]))
        if got != index["digest"]:
            raise InputError(
                uri, None, "digest", f"the index's {index['digest']}", f"{got} for the downloaded datasets"
            )
        check_counts(staging, index, card, uri)
        for name in sorted(meta, key=lambda n: n == INDEX_FILE):  # index.json last: a complete entry
            _inside(staging, name, where).write_bytes(meta[name])
        _publish_entry(staging, target, meta)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _linked(cached: Path, dest: Path) -> bool:
    """Hard-link a cached dataset file instead of downloading it again, where it exists."""
    try:
        if cached.is_file() and not cached.is_symlink():
            os.link(cached, dest)
            return True
    except OSError:
        pass
    return False


def _holds(folder: Path, meta: dict[str, bytes]) -> bool:
    """Whether a cache entry's index and cards are exactly `meta` (the remote's bytes)."""
    try:
        return all((folder / name).read_bytes() == data for name, data in meta.items())
    except OSError:
        return False


def _publish_entry(staging: Path, target: Path, meta: dict[str, bytes]) -> None:
    """Rename the verified download into place; an entry already there that is not the same
    download (another card, a bad one) is moved aside and removed, never served."""
    try:
        staging.rename(target)
        return
    except OSError:
        if _holds(target, meta):  # another process finished the same download first
            return
    aside = Path(tempfile.mkdtemp(prefix=".stale-", dir=target.parent))
    try:
        target.rename(aside / "old")
        staging.rename(target)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
