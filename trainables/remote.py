"""Files behind a URI (s3://, gs://, any scheme pyarrow's file systems accept), copied to this node.

A trial whose `data_dir` is a URI loads its data set from a local copy: the first trial on a node
copies the data set's files into a cache folder (one file at a time: a temporary file, its size
checked against the source's, then renamed into place) under a file lock, so trials that start
together on one node download once; later trials only compare sizes. Endpoint and credentials come
from the standard settings of the file system (AWS: environment, profile, instance role, and
AWS_ENDPOINT_URL_S3 for an S3-compatible server; GCS: application default credentials).
An S3 file system retries each request that fails (no answer, refused, 5xx) with doubling waits
for at least $VBI_MUR_STORAGE_RETRY_S seconds (`RetryingS3FileSystem`), on the driver and, since it
keeps its retries when pickled, in every trial process Tune ships it to.
No torch and no Ray here: `sweeper.storage` uses the same helpers in the driver.

    VBI_MUR_CACHE=/tmp/c python -c "from trainables.remote import fetch; print(fetch('s3://b/data', ['x.bin']))"

The cache folder: $VBI_MUR_CACHE, else ~/.cache/vbi-mur-sweeper; data under data/<scheme>/<bucket>/<prefix>.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
from pathlib import Path

from trainables.files import atomic_write

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
CHUNK = 8 << 20  # bytes copied at a time
RETRY_S = 100.0  # default of $VBI_MUR_STORAGE_RETRY_S: a bucket unreachable for a minute costs no request
RETRY_FIRST_WAIT_S = 0.05  # the SDK's default strategy waits 50 ms, 100 ms, 200 ms, ... between attempts


class RemoteError(OSError):
    """A file behind a URI is missing, unreadable or arrived short; the message names it."""


def is_uri(s) -> bool:
    """True for `scheme://...` (s3://, gs://, file://, ...); False for a plain local path."""
    return bool(_SCHEME.match(str(s)))


# the schemes of pyarrow's file systems and of tracking servers: "s3:/b" or "s3:b" is a URI mistyped, not
# a local folder named "s3:" (a folder name with another word before a colon stays a folder)
_URI_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "az", "file", "http", "https")
_HALF_URI = re.compile(rf"^({'|'.join(_URI_SCHEMES)}):(?!//)", re.IGNORECASE)


def half_uri(s) -> str | None:
    """The scheme of a string that starts like a URI but lacks its "//" (s3:/bucket, gs:bucket), else None."""
    m = _HALF_URI.match(str(s))
    return m.group(1) if m else None


# a URI's authority up to "@": userinfo, unless it is only host[:port] followed by a path that holds "@"
_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^@]*)@")
_HOST_PORT_PATH = re.compile(r"[^:/?#]*(:\d+)?([/?#].*)?")
# object stores: whatever their URI carries as userinfo is an access key (pyarrow: s3://KEY:SECRET@bucket)
_KEY_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "az", "hdfs")


# a query parameter whose name says it holds a credential (?password=, ?token=, ?secret_key=, ?X-Amz-Signature=, ...)
_SECRET_PARAM = re.compile(r"pass|pwd|token|secret|key|credential|auth|sig", re.IGNORECASE)
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")


def _secret_params(s: str) -> list[str]:
    """The names of the query parameters of URI `s` whose name says they hold a credential."""
    query = s.split("?", 1)[1].split("#", 1)[0] if "?" in s else ""
    return [m.group(2) for m in _QUERY_PARAM.finditer("?" + query) if _SECRET_PARAM.search(m.group(2))]


def _userinfo_secret(s: str) -> bool:
    m = _USERINFO.match(s)
    if not m or _HOST_PORT_PATH.fullmatch(m.group(1)) and "/" in m.group(1):
        return False  # no "@", or it lies in the path (https://host:5000/a@b)
    return ":" in m.group(1) or scheme(s) in _KEY_SCHEMES


def secret_in_uri(s) -> bool:
    """True when the URI `s` carries credentials: in its userinfo, a password (https://user:pw@host,
    postgresql://user:pw@host/db, s3://KEY:SECRET@bucket, also with an unescaped "/" in the secret) or any
    userinfo of an object store (a user name alone, https://user@host, is no secret); in its query string,
    any parameter whose name says it holds one (?password=, ?token=, ?access_key=, ?X-Amz-Signature=)."""
    s = str(s)
    return is_uri(s) and (_userinfo_secret(s) or bool(_secret_params(s)))


def redact(s: str) -> str:
    """The URI with its userinfo and the values of its secret query parameters replaced by "***" (for
    messages): s3://***@bucket/path, postgresql://db/x?user=u&password=***."""
    s = str(s)
    if not is_uri(s):
        return s
    m = _USERINFO.match(s)
    if m and not (_HOST_PORT_PATH.fullmatch(m.group(1)) and "/" in m.group(1)):
        s = f"{scheme(s)}://***@{s[m.end():]}"
    if "?" not in s:
        return s
    head, query = s.split("?", 1)
    masked = _QUERY_PARAM.sub(
        lambda q: f"{q.group(1)}{q.group(2)}=***" if _SECRET_PARAM.search(q.group(2)) else q.group(0), "?" + query)
    return head + masked


def scheme(uri: str) -> str:
    m = _SCHEME.match(uri)
    return m.group(1).lower() if m else ""


def resolve(uri: str):
    """(pyarrow file system, path in it) of a URI: `s3://bucket/prefix` -> (S3FileSystem, 'bucket/prefix').
    Raises pyarrow's errors (ArrowInvalid for a scheme it does not know, OSError for others)."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    if type(fs) is pafs.S3FileSystem:
        fs = retrying_s3(fs.__reduce__()[1][0], retry_attempts(retry_budget()))
    return fs, path


def retry_budget() -> float:
    """Seconds an S3 request is retried for: $VBI_MUR_STORAGE_RETRY_S, else RETRY_S."""
    raw = os.environ.get("VBI_MUR_STORAGE_RETRY_S", "")
    try:
        budget = float(raw) if raw else RETRY_S
    except ValueError:
        budget = math.nan
    if not budget >= 0:
        raise ValueError(f"VBI_MUR_STORAGE_RETRY_S={raw!r} is not a number of seconds >= 0; "
                         f"unset it for the default {RETRY_S:g}")
    return budget


def retry_attempts(budget_s: float) -> int:
    """Attempts per request such that the waits between them (50 ms, doubling) add up to >= budget_s:
    attempt n + 1 starts 0.05 * (2**n - 2) s of waiting after the first (plus each attempt's own time)."""
    n = 1
    while RETRY_FIRST_WAIT_S / 2 * (2 ** n - 2) < budget_s:
        n += 1
    return n


def with_retry_budget(fs, budget_s: float):
    """A copy of a RetryingS3FileSystem that retries for budget_s instead; any other file system as it is."""
    if not hasattr(fs, "attempts"):
        return fs
    return retrying_s3(fs.__reduce__()[1][0], retry_attempts(budget_s))


def retrying_s3(options: dict, attempts: int):
    """An S3FileSystem with `options` (S3FileSystem's keyword arguments) that makes up to `attempts`
    attempts per request. pyarrow's own pickling drops the retry strategy (3 attempts again after
    unpickling), and Tune pickles the run's file system to every trial, so this subclass pickles
    itself through this function."""
    import pyarrow.fs as pafs

    class RetryingS3FileSystem(pafs.S3FileSystem):
        def __reduce__(self):
            return retrying_s3, (options, attempts)

    fs = RetryingS3FileSystem(**options, retry_strategy=pafs.AwsDefaultS3RetryStrategy(max_attempts=attempts))
    fs.attempts = attempts
    return fs


def cache_root() -> Path:
    return Path(os.environ.get("VBI_MUR_CACHE") or "~/.cache/vbi-mur-sweeper").expanduser()


def cache_folder(uri: str, kind: str) -> Path:
    """This node's folder for the files of `uri`: <cache>/<kind>/<scheme>/<bucket>/<prefix> (no query)."""
    rest = uri.split("://", 1)[1].split("?", 1)[0]
    parts = [p for p in rest.split("/") if p not in ("", ".", "..")]
    return cache_root() / kind / scheme(uri) / Path(*parts) if parts else cache_root() / kind / scheme(uri)


def download(fs, src: str, dest: Path, size: int | None) -> Path:
    """Copy fs:src to dest through a temporary file beside it, checked against `size`, then renamed."""
    dest.parent.mkdir(parents=True, exist_ok=True)

    def copy(tmp):
        with fs.open_input_stream(src) as i, open(tmp, "wb") as o:
            shutil.copyfileobj(i, o, CHUNK)
        got = os.path.getsize(tmp)
        if size is not None and got != size:
            raise RemoteError(f"{src}: copied {got} bytes, the source has {size}")

    return atomic_write(dest, copy)


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on `path` (created), held for the block: one process of this node at a time."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def stat(uri: str, names: list[str]) -> dict[str, int | None]:
    """{name: size in bytes, or None if uri/name is not a file}, one listing call for all names."""
    import pyarrow.fs as pafs

    fs, base = resolve(uri)
    infos = fs.get_file_info([f"{base.rstrip('/')}/{n}" for n in names])
    return {n: (i.size if i.type == pafs.FileType.File else None) for n, i in zip(names, infos)}


def fetch(uri: str, names: list[str], dest: Path | None = None) -> Path:
    """Local copies of uri/<name> for every name (relative paths), in `dest` (default: this node's
    cache folder of uri); returns that folder. A file already there with the source's size is kept.
    RemoteError names the files that are missing at the source or that arrived short."""
    import pyarrow.fs as pafs

    fs, base = resolve(uri)
    dest = dest or cache_folder(uri, "data")
    infos = fs.get_file_info([f"{base.rstrip('/')}/{n}" for n in names])
    missing = [n for n, i in zip(names, infos) if i.type != pafs.FileType.File]
    if missing:
        raise RemoteError(f"missing in {uri}: {', '.join(missing)}")
    with locked(dest / ".lock"):  # the other trials of this node wait, then find the files in place
        for n, info in zip(names, infos):
            local = dest / n
            if not (local.is_file() and local.stat().st_size == info.size):
                download(fs, info.path, local, info.size)
    return dest
