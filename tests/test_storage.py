"""URIs urllib cannot split: a bracketed host that is no IPv6 address (`s3://[::1/x`,
`http://[zz]/x`) is the user's mistake, refused by a real `invfold` in one line naming the URI
(exit 2), wherever the URI is read (prep's input, design's model and structures)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from invfold import storage
from invfold.errors import InputError

BAD = ["s3://[::1/x", "http://[zz]/x", "https://[::1/model.pt"]


@pytest.mark.parametrize("uri", BAD)
def test_storage_refuses_an_unsplittable_uri_naming_it(uri):
    readers = (storage.read_bytes, storage.is_dir, storage.exists)
    for read in (*readers, storage.basename) if uri.startswith("http") else readers:  # an http name drops the query
        with pytest.raises(InputError, match=r"expected a URI with a valid host") as refused:
            read(uri)
        assert str(refused.value).startswith(f"{uri}: ")


@pytest.mark.parametrize(
    "args",
    [["prep", "s3://[::1/x"], ["prep", "http://[zz]/x"], ["design", "https://[::1/model.pt", "http://[zz]/x"]],
    ids=["prep-s3", "prep-http", "design"],
)
def test_invfold_refuses_an_unsplittable_uri_in_one_line(args, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "invfold", *args, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[0].startswith(f"invfold {args[0]}: error: {args[1]}: expected a URI with a valid host")
