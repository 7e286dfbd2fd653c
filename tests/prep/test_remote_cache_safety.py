"""A remote prepared folder is untrusted: its index.json names files and a digest that become
local paths in the download cache. A `memory://` folder (fsspec's in-process filesystem, so the
remote side can hold any name an attacker likes) must never lead a write outside the cache, nor
return a folder other than `cache/<sha256 hex>`; each bad index is one clear InputError."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pytest

from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import INDEX_FILE, MAX_CARD_BYTES, MAX_INDEX_BYTES, open_prepared
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set
from invfold.errors import InputError


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A real, small prep output to copy to the remote side."""
    root = tmp_path_factory.mktemp("prepared")
    data = write_synthetic_set(root / "in", SyntheticConfig(num_chains=24, seed=3, median_length=60))
    run_prep(PrepConfig(input=str(data.chain_set), out=str(root / "out"), identity_tool="kmer"))
    return root / "out"


def _remote(files: dict[str, bytes]) -> str:
    """A fresh memory:// folder holding `files` at exactly the URIs a reader would ask for."""
    uri = f"memory://invfold-{uuid.uuid4().hex}/prepared"
    fs = fsspec.filesystem("memory")
    for name, data in files.items():
        with fs.open(f"{uri}/{name}", "wb") as fh:
            fh.write(data)
    return uri


def _copy_of(prepared: Path, **index_changes) -> tuple[dict, dict[str, bytes]]:
    index = json.loads((prepared / INDEX_FILE).read_text())
    index.update(index_changes)
    files = {p.name: p.read_bytes() for p in prepared.iterdir() if p.name != INDEX_FILE}
    return index, files


def _everything_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize(
    "bad_file", ["../../escaped.arrow", "../escaped.arrow", "/ABS/escaped.arrow", "sub/train.arrow"]
)
def test_a_dataset_file_outside_the_cache_is_refused_before_anything_is_written(tmp_path, prepared, bad_file):
    work = tmp_path / "work"
    cache = work / "cache"
    bad_file = bad_file.replace("/ABS", str(tmp_path))
    index, files = _copy_of(prepared)
    index["datasets"]["train"]["file"] = bad_file
    files[bad_file] = b"attacker bytes"
    uri = _remote({**files, INDEX_FILE: json.dumps(index).encode()})
    before = _everything_under(tmp_path)
    with pytest.raises(InputError, match=r"index\.json.*datasets\.train\.file.*'train\.arrow'"):
        open_prepared(uri, cache_dir=cache)
    assert _everything_under(tmp_path) - before <= {"work", "work/cache"}  # no file appeared anywhere
    assert not (cache.exists() and any(cache.iterdir()))  # no staging folder left behind


@pytest.mark.parametrize("name", ["../train", "..", "a/b", ""])
def test_a_dataset_name_that_is_not_a_plain_file_name_is_refused(tmp_path, prepared, name):
    index, files = _copy_of(prepared)
    index["datasets"][name] = {**index["datasets"].pop("train"), "file": f"{name}.arrow"}
    files[f"{name}.arrow"] = b"attacker bytes"
    uri = _remote({**files, INDEX_FILE: json.dumps(index).encode()})
    with pytest.raises(InputError, match="dataset names matching"):
        open_prepared(uri, cache_dir=tmp_path / "cache")
    assert _everything_under(tmp_path) <= {"cache"}


@pytest.mark.parametrize("digest", ["sha256:../..", "sha256:..", "sha256:/etc", "sha256:" + "A" * 64, "md5:00"])
def test_a_digest_that_is_not_a_sha256_never_picks_a_folder(tmp_path, prepared, digest):
    """On the old code `sha256:../..` returned whatever folder sat two levels above the cache
    when it held an index.json: here one does, and it must not be opened."""
    decoy = tmp_path / "decoy"
    (decoy / "cache").mkdir(parents=True)
    (decoy / INDEX_FILE).write_text((prepared / INDEX_FILE).read_text())
    index, files = _copy_of(prepared, digest=digest)
    uri = _remote({**files, INDEX_FILE: json.dumps(index).encode()})
    with pytest.raises(InputError, match=r"field 'digest': expected 'sha256:' and 64 lowercase hex digits"):
        open_prepared(uri, cache_dir=decoy / "cache" / "x")
    assert not (decoy / "cache" / "x").exists()


def test_content_that_does_not_match_the_digest_is_never_published(tmp_path, prepared):
    index, files = _copy_of(prepared)
    files["train.arrow"] = files["train.arrow"][:-1] + bytes([files["train.arrow"][-1] ^ 1])
    uri = _remote({**files, INDEX_FILE: json.dumps(index).encode()})
    cache = tmp_path / "cache"
    with pytest.raises(InputError, match="field 'digest'"):
        open_prepared(uri, cache_dir=cache)
    assert list(cache.iterdir()) == []  # neither the digest folder nor a staging folder


def test_a_well_formed_remote_folder_still_opens(tmp_path, prepared):
    index, files = _copy_of(prepared)
    uri = _remote({**files, INDEX_FILE: json.dumps(index).encode()})
    remote = open_prepared(uri, cache_dir=tmp_path / "cache")
    assert remote.root == tmp_path / "cache" / index["digest"].split(":")[1]
    local = open_prepared(prepared)
    assert [r.name for r in remote.open("train")] == [r.name for r in local.open("train")]


def test_prep_refuses_a_subset_name_that_cannot_be_a_dataset_file_name(tmp_path, prepared):
    """Prep writes only names that open_prepared accepts: a subset file whose name holds a space
    is refused with the file named, not written and then refused at open."""
    subset = tmp_path / "test_split_L 100.json"
    subset.write_text(json.dumps({"test": ["anything"]}))
    data = write_synthetic_set(tmp_path / "in", SyntheticConfig(num_chains=12, seed=5, median_length=60))
    cfg = PrepConfig(input=str(data.chain_set), out=str(tmp_path / "out"), subset_files=[str(subset)])
    with pytest.raises(InputError, match=r"test_split_L 100\.json: expected a subset name matching"):
        run_prep(cfg)
    assert not (tmp_path / "out").exists()


# The card: the digest covers the datasets only, so the card is checked against the index and
# the data (check_card, check_counts) before a download enters the cache, and a cached copy is
# served only while its index and cards are the remote's bytes.


def _cards_of(prepared: Path) -> tuple[dict, dict]:
    return json.loads((prepared / INDEX_FILE).read_text()), json.loads((prepared / "card.json").read_text())


def _with(prepared: Path, card=None, index=None) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in prepared.iterdir()}
    if card is not None:
        files["card.json"] = card if isinstance(card, bytes) else json.dumps(card).encode()
    if index is not None:
        files[INDEX_FILE] = json.dumps(index).encode()
    return files


def _forged_counts(card: dict) -> dict:
    card["datasets"]["train"]["chains"] += 1
    return card


def _forged_median(card: dict) -> dict:
    card["datasets"]["train"]["median_length"] += 7.0
    return card


def _other_digest(card: dict) -> dict:
    card["digest"] = "sha256:" + "0" * 64
    return card


@pytest.mark.parametrize(
    "forge, match",
    [
        (lambda card: [], "expected a JSON object"),
        (lambda card: b"null", "expected a JSON object"),
        (_other_digest, "field 'digest': expected the index's sha256:"),
        (_forged_counts, "field 'datasets': expected the index's datasets"),
        (_forged_median, r"median_length': expected \d"),
    ],
    ids=["list", "null", "other-digest", "chain-count", "median-length"],
)
def test_a_broken_or_forged_card_never_enters_the_cache(tmp_path, prepared, forge, match):
    index, card = _cards_of(prepared)
    cache = tmp_path / "cache"
    uri = _remote(_with(prepared, card=forge(card)))
    with pytest.raises(InputError, match=match):
        open_prepared(uri, cache_dir=cache)
    assert not cache.exists() or list(cache.iterdir()) == []
    good = open_prepared(_remote(_with(prepared)), cache_dir=cache)  # the same digest, a good card
    assert good.card == json.loads((prepared / "card.json").read_text())


def test_index_counts_that_do_not_match_the_data_are_refused(tmp_path, prepared):
    index, card = _cards_of(prepared)
    index["datasets"]["train"]["lengths"][0] += 1
    index["datasets"]["train"]["residues"] += 1
    card["datasets"]["train"]["residues"] += 1  # consistent with the forged index, not with the data
    cache = tmp_path / "cache"
    with pytest.raises(InputError, match=r"datasets\.train\.residues"):
        open_prepared(_remote(_with(prepared, card=card, index=index)), cache_dir=cache)
    assert list(cache.iterdir()) == []


def test_a_bad_entry_an_older_invfold_cached_is_replaced_by_a_good_download(tmp_path, prepared, http_server):
    """Before the card was checked, a remote card of `[]` was cached under the digest and every
    later open failed, from a good remote too, until the folder was deleted by hand."""
    index, _ = _cards_of(prepared)
    cache = tmp_path / "cache"
    poisoned = cache / index["digest"].split(":")[1]
    poisoned.mkdir(parents=True)
    for name, data in _with(prepared, card=b"[]").items():
        (poisoned / name).write_bytes(data)
    for name, data in _with(prepared).items():  # the good folder, served over loopback HTTP
        (http_server.root / "good" / name).parent.mkdir(parents=True, exist_ok=True)
        (http_server.root / "good" / name).write_bytes(data)
    opened = open_prepared(f"{http_server.url}/good", cache_dir=cache)
    assert opened.root == poisoned and opened.card["digest"] == index["digest"]
    assert [p.name for p in cache.iterdir()] == [poisoned.name]  # no staging or stale folder left


def test_a_cached_copy_is_served_only_for_the_card_it_came_with(tmp_path, prepared):
    """Two remotes with the same data and different (valid) cards: each open gets its own card."""
    _, card = _cards_of(prepared)
    other = json.loads(json.dumps(card))
    other["options"]["seed"] = 12345
    first, second = _remote(_with(prepared)), _remote(_with(prepared, card=other))
    cache = tmp_path / "cache"
    assert open_prepared(first, cache_dir=cache).card["options"]["seed"] == card["options"]["seed"]
    assert open_prepared(second, cache_dir=cache).card["options"]["seed"] == 12345
    assert open_prepared(first, cache_dir=cache).card == card


@pytest.mark.parametrize("name, limit", [(INDEX_FILE, MAX_INDEX_BYTES), ("card.json", MAX_CARD_BYTES)])
def test_index_and_card_reads_are_bounded(tmp_path, prepared, name, limit):
    """Valid JSON padded past the bound: refused after reading the bound, naming the limit."""
    files = _with(prepared)
    files[name] = files[name][:1] + b" " * limit + files[name][1:]
    with pytest.raises(InputError, match=rf"{name}: expected a file of at most {limit:,} bytes \(limit MAX_"):
        open_prepared(_remote(files), cache_dir=tmp_path / "cache")
    local = tmp_path / "local"
    local.mkdir()
    for file, data in files.items():
        (local / file).write_bytes(data)
    with pytest.raises(InputError, match=rf"at most {limit:,} bytes"):
        open_prepared(local)
