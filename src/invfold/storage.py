"""The one place that touches storage: local files or remote URIs (s3://, gs://, http(s)://,
file://) through fsspec, with gzip detected by its magic bytes rather than the file name.
Readers open inputs here; steps publish and fetch output folders here."""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import io
import json
import logging
import os
import re
import sys
import urllib.parse
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from invfold import errors
from invfold.errors import ConfigError, InputError

GZIP_MAGIC = b"\x1f\x8b"
# What a damaged or truncated gzip stream raises while it is being read.
GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


HIDDEN = "***"
# A URI inside free text: a scheme, "://", then anything up to whitespace or a quote.
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def display_uri(uri: str | os.PathLike) -> str:
    """The URI as it may be logged, recorded or printed: userinfo (`user:password@`) and every
    query value (presigned `X-Amz-Signature=`, `sig=`, `token=`, ... and anything else a query
    may carry) replaced by ***. Local paths come back unchanged. Use it wherever a URI leaves
    the process: MLflow params and tags, cards, log lines, error messages. What it hides is
    remembered, so `redact` also hides it where a library quotes it outside any URI."""
    text = os.fspath(uri)
    if "://" not in text:
        return text
    scheme = text.split("://", 1)[0]
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:  # an invalid IPv6 host: shown as is unless it may hold userinfo or a query
        after = text.split("://", 1)[1]
        if "@" not in after and "?" not in after:
            return text
        _remember(after)
        return scheme + "://" + HIDDEN
    netloc, path = parts.netloc, parts.path
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        netloc = HIDDEN + "@" + netloc
        _remember(userinfo)
    elif "@" in path and ":" in netloc and not netloc.startswith("["):
        # a password holding "/" (AWS secret keys do): urlsplit ends the authority at that "/";
        # the userinfo runs to the last "@" (hiding a path's "@" too is the safe mistake)
        rest, host_and_path = path.rsplit("@", 1)
        _remember(netloc + rest)
        host, slash, tail = host_and_path.partition("/")
        netloc, path = f"{HIDDEN}@{host}", slash + tail
    pieces = [piece for piece in parts.query.split("&") if piece]
    for piece in pieces:
        _remember(piece.split("=", 1)[-1], split=False)
    query = "&".join(f"{piece.split('=', 1)[0]}={HIDDEN}" if "=" in piece else HIDDEN for piece in pieces)
    # not urlunsplit: it drops the empty authority of `sqlite:///relative.db`, which then reads as absolute
    shown = f"{scheme}://{netloc}{path}"
    return shown + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


# Secrets display_uri has hidden (or remember_secrets was given), longest first: a library may
# quote them outside any URI (botocore: `Invalid bucket name "KEY:SECRET@bucket"`).
_SECRETS: list[str] = []
SECRET_MIN_CHARS = 6  # shorter pieces ("v=1", a user "bob") would hide ordinary words


def _remember(secret: str, split: bool = True) -> None:
    """Remember a hidden userinfo (and its user, password and `/`-separated pieces) or query value."""
    found = {secret}
    if split:  # s3fs takes `KEY:SEC` of `s3://KEY:SEC/RET@b/x` for the bucket: each part before a "/" too
        prefixes = [secret[:i] for i, c in enumerate(secret) if c == "/"]
        found.update([*secret.split(":", 1), *re.split(r"[:/]", secret), *prefixes])
    found.update(urllib.parse.unquote(s) for s in list(found))
    new = [s for s in found if len(s) >= SECRET_MIN_CHARS and s not in _SECRETS]
    if new:
        _SECRETS[:] = sorted([*_SECRETS, *new], key=len, reverse=True)


def remember_secrets(words: Iterable[object]) -> None:
    """Learn the secrets of every URI among `words` (a command line, a config's values) before
    anything can fail, so a message quoting them is redacted whoever raised it."""
    for word in words:
        if isinstance(word, str) and "://" in word:
            redact(word)


def redact(text: str) -> str:
    """Free text (a message, a parameter value, a traceback) with each URI in it passed through
    display_uri, and every secret display_uri has hidden so far replaced by *** wherever it is."""
    if "://" in text:
        text = _URI_IN_TEXT.sub(lambda m: display_uri(m.group()), text)
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    return text


def _redacting_factory(make):
    def factory(*args, **kwargs):
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is logging's own business
            return record
        shown = redact(message)
        if shown != message:
            record.msg, record.args = shown, ()
        if record.exc_info and record.exc_info[0] is not None:  # the traceback's text, formatted now
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    factory.invfold_redacts = True
    return factory


def redact_log_records() -> None:
    """Every log record, ours and libraries' (fsspec logs whole URLs at DEBUG), goes through
    `redact` when it is made, whatever handler later writes it. Installed when this module is
    first imported: every code path that opens a URI imports it."""
    make = logging.getLogRecordFactory()
    if not getattr(make, "invfold_redacts", False):
        logging.setLogRecordFactory(_redacting_factory(make))


def is_remote(uri: str | os.PathLike) -> bool:
    """True for any URI with a scheme other than file:// (those go through fsspec)."""
    text = str(uri)
    return "://" in text and not text.startswith("file://")


def _local_path(uri: str | os.PathLike) -> str:
    text = os.fspath(uri)
    return text[len("file://") :] if text.startswith("file://") else text


def invalid_uri(uri: str | os.PathLike, err: ValueError) -> InputError:
    """A URI urllib cannot split (`s3://[::1/x`, `http://[zz]/x`: a bracketed host that is not an
    IPv6 address): a one-line error naming it, never urllib's traceback."""
    return InputError(uri, None, None, "a URI with a valid host", f"{err}", reason="invalid_uri")


def filesystem(uri: str | os.PathLike):
    """(fsspec filesystem, path inside it) for a local path or any URI."""
    import fsspec

    text = os.fspath(uri)
    if "://" in text:
        try:
            urllib.parse.urlsplit(text)
        except ValueError as err:  # fsspec would fail later, or not at all (http: "no such file")
            raise invalid_uri(uri, err) from None
    return fsspec.core.url_to_fs(text)


def basename(uri: str | os.PathLike) -> str:
    """The last path component; an http(s) URL's query and fragment (a presigned signature) are
    not part of the file's name."""
    text = str(uri)
    if text.startswith(("http://", "https://")):
        try:
            text = urllib.parse.urlsplit(text).path
        except ValueError as err:
            raise invalid_uri(uri, err) from None
    return text.rstrip("/").rsplit("/", 1)[-1]


def strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


@contextlib.contextmanager
def _open_raw(uri: str | os.PathLike) -> Iterator[BinaryIO]:
    try:
        if is_remote(uri):
            fs, path = filesystem(uri)
            # buffered like a local file: fsspec's own readline takes no size (read_lines needs one)
            handle = io.BufferedReader(fs.open(path, "rb"))
        else:
            handle = open(_local_path(uri), "rb")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as err:
        raise InputError(uri, None, None, "an existing file", type(err).__name__, reason="missing_file") from None
    except OSError as err:  # a name too long, no permission, ...: the system's words, one line
        raise InputError(uri, None, None, "a readable file", err.strerror or type(err).__name__,
                         reason="unreadable_file") from None  # fmt: skip
    with handle:
        yield handle


@contextlib.contextmanager
def open_binary(uri: str | os.PathLike) -> Iterator[BinaryIO]:
    """A readable binary stream of the file's content, decompressed when it starts with the gzip
    magic bytes. Reading a damaged gzip raises one of GZIP_ERRORS (see `gzip_error`)."""
    with _open_raw(uri) as raw:
        head = raw.read(2)
        raw.seek(0)
        if head == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield stream
        else:
            yield raw


def gzip_error(uri: str | os.PathLike, err: Exception) -> InputError:
    return InputError(
        uri, None, None, "a complete, valid gzip stream", f"{type(err).__name__}: {err}", reason="corrupt_gzip"
    )


def read_bytes(uri: str | os.PathLike, limit: int | None = None, limit_name: str = "max_file_bytes") -> bytes:
    """The whole (decompressed) content; a damaged gzip becomes an InputError. With `limit`, a
    content longer than that many bytes is refused (InputError `too_large`, naming the limit)
    after reading at most limit + 1 of them, so a small gzip cannot expand into all memory."""
    with open_binary(uri) as stream:
        try:
            data = stream.read() if limit is None else stream.read(limit + 1)
        except GZIP_ERRORS as err:
            raise gzip_error(uri, err) from None
        except MemoryError:
            raise out_of_memory(uri, None) from None
    if limit is not None and len(data) > limit:
        raise too_large(uri, None, limit, limit_name, "a file")
    return data


def too_large(uri: str | os.PathLike, line: int | None, limit: int, limit_name: str, what: str) -> InputError:
    """An input over a size bound (src/invfold's readers and components/protein/limits.py): a
    lower-case `limit_name` is a prep option, named with its flag; an upper-case one a constant."""
    flag = f"; prep: --{limit_name.replace('_', '-')}" if limit_name.islower() else ""
    return InputError(
        uri,
        line,
        None,
        f"{what} of at most {limit:,} bytes (limit {limit_name}{flag})",
        f"more than {limit:,} bytes",
        reason="too_large" if line is None else "line_too_long",
    )


def out_of_memory(uri: str | os.PathLike, line: int | str | None, name: str | None = None) -> InputError:
    """Reading one file or record ran out of memory: a counted skip or a one-line error, never a
    MemoryError traceback that ends the whole step."""
    return InputError(
        uri, line, None, "an input that fits in this process's memory", "MemoryError", reason="out_of_memory", name=name
    )


def read_lines(stream: BinaryIO, limit: int) -> Iterator[bytes | None]:
    """Each line of a binary stream (newline kept), or None for a line longer than `limit` bytes:
    such a line is read past in chunks of at most `limit` bytes, never held whole."""
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        if len(raw) <= limit:
            yield raw
            continue
        while raw and not raw.endswith(b"\n"):
            raw = stream.readline(limit + 1)
        yield None


def is_dir(uri: str | os.PathLike) -> bool:
    if not is_remote(uri):
        return os.path.isdir(_local_path(uri))
    fs, path = filesystem(uri)
    try:
        return fs.isdir(path)
    except (FileNotFoundError, OSError):
        return False


def require_local(uri: str | os.PathLike | None, expected: str = "an existing file or folder") -> None:
    """Raise InputError when a local path does not exist (a URI is judged when it is read): the
    CLIs check their inputs with it before importing the code that reads them."""
    if uri is not None and not is_remote(uri) and not os.path.exists(_local_path(uri)):
        raise InputError(uri, None, None, expected, "no such file or folder", reason="missing_file")


def exists(uri: str | os.PathLike) -> bool:
    if not is_remote(uri):
        return os.path.exists(_local_path(uri))
    fs, path = filesystem(uri)
    return fs.exists(path)


def list_files(uri: str | os.PathLike, patterns: Iterable[str]) -> list[str]:
    """Files directly inside folder `uri` whose name matches any glob pattern (case-insensitive),
    in sorted order so that every run reads them in the same order. Not recursive."""
    patterns = [p.lower() for p in patterns]
    if is_remote(uri):
        fs, path = filesystem(uri)
        entries = [e for e in fs.ls(path, detail=True) if e.get("type") != "directory"]
        names = [e["name"] for e in entries]
        protocol = str(uri).split("://", 1)[0]
        prefix = f"{protocol}://" if protocol not in ("http", "https") else ""
        found = [n if "://" in n else prefix + n for n in names]
    else:
        root = _local_path(uri)
        if not os.path.isdir(root):
            raise InputError(uri, None, None, "an existing folder", "no such folder", reason="missing_file")
        found = [os.path.join(root, n) for n in os.listdir(root) if os.path.isfile(os.path.join(root, n))]
    return sorted(f for f in found if any(fnmatch.fnmatch(basename(f).lower(), p) for p in patterns))


def too_deep(path: str | os.PathLike, line: int | None) -> InputError:
    """Arrays or objects nested past the parser's recursion limit (no real record comes close):
    invalid JSON, counted or reported like any other, never a RecursionError traceback."""
    return InputError(
        path, line, None, "valid JSON", "invalid JSON (nested deeper than the parser's limit)", reason="invalid_json"
    )


def load_json(path: str | os.PathLike, limit: int | None = None, limit_name: str = "max_file_bytes"):
    """The whole file decoded (gzip detected, BOM tolerated); empty or invalid JSON raises, and so
    does a file over `limit` bytes (see read_bytes) or one whose decoding runs out of memory."""
    return parse_json(read_bytes(path, limit, limit_name), path)


def parse_json(data: bytes, path: str | os.PathLike):
    """`data` (the content of `path`) decoded as load_json does."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise InputError(path, None, None, "a JSON document", "an empty file", reason="empty_file")
    try:
        return json.loads(data)
    except RecursionError:
        raise too_deep(path, None) from None
    except MemoryError:
        raise out_of_memory(path, None) from None
    except ValueError as err:
        where = err.lineno if isinstance(err, json.JSONDecodeError) else None
        detail = err.msg if isinstance(err, json.JSONDecodeError) else str(err)
        raise InputError(path, where, None, "valid JSON", f"invalid JSON ({detail})", reason="invalid_json") from None


def upload_folder(local: str | os.PathLike, uri: str, skip_top: Iterable[str] = ()) -> None:
    """Copy every file under `local` to folder `uri`, keeping relative paths; top-level folders
    named in `skip_top` stay behind. Object stores have no atomic rename, so callers write a
    marker last when readers need to know the copy is complete."""
    fs, root = filesystem(uri)
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    for folder, dirs, files in os.walk(local):
        rel = os.path.relpath(folder, local)
        dirs[:] = sorted(d for d in dirs if not (rel == "." and d in skip_top))
        for filename in sorted(files):
            target = "/".join(p for p in (root, "" if rel == "." else rel, filename) if p)
            fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            fs.put_file(os.path.join(folder, filename), target)


def download_folder(uri: str, local: str | os.PathLike) -> None:
    """Copy folder `uri` (recursively) into local folder `local`."""
    fs, path = filesystem(uri)
    if not fs.exists(path):
        raise InputError(uri, None, None, "an existing folder", "no such folder", reason="missing_file")
    fs.get(path.rstrip("/") + "/", os.fspath(local).rstrip("/") + "/", recursive=True)


# KFP's object store by version (kubeflow/pipelines manifests/kustomize/third-party/): MinIO behind
# `minio-service` up to 2.15 (SeaweedFS 2.15 kept that Service name for compatibility); from 2.16 on
# SeaweedFS alone, Service `seaweedfs` (S3 on 8333, and 9000 -> 8333 for old configurations).
SEAWEEDFS_ENDPOINT = "http://seaweedfs.kubeflow:8333"
MINIO_ENDPOINT = "http://minio-service.kubeflow:9000"
ENDPOINT_HINT = (
    f"KFP 2.16 and later serve their object store as {SEAWEEDFS_ENDPOINT} (Service seaweedfs), "
    f"earlier releases as {MINIO_ENDPOINT}; `kubectl -n kubeflow get svc seaweedfs minio-service` shows which exists"
)


def use_endpoint(endpoint: str | None) -> None:
    """Point this process's S3 client (s3fs/botocore read AWS_ENDPOINT_URL) at an S3-compatible
    endpoint, as every pod of a run gets it (pipeline parameter storage_endpoint); empty: AWS S3."""
    if not endpoint:
        return
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"storage_endpoint: expected an http(s) URL, got {endpoint!r}; {ENDPOINT_HINT}")
    if os.environ.get("AWS_ENDPOINT_URL") != endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        forget_s3_clients()


def forget_s3_clients() -> None:
    """Drop this process's cached s3fs filesystems: fsspec reuses one per set of arguments, and its
    client keeps the endpoint and keys it was made with, whatever AWS_* says now."""
    s3fs = sys.modules.get("s3fs")
    if s3fs is not None:
        s3fs.S3FileSystem.clear_instance_cache()


# On first import, for every process that touches a URI: log records and error messages are redacted.
redact_log_records()
errors.redact_text = redact
