"""Files behind a URI (s3://, gs://, any scheme pyarrow's file systems accept), copied to this node.

A trial whose `data_dir` is a URI loads its data set from a local copy: the first trial on a node
copies the data set's files into a cache folder (one file at a time: a temporary file, its size
checked against the source's, then renamed into place) under a file lock, so trials that start
together on one node download once; later trials only compare sizes. Endpoint and credentials come
from the standard settings of the file system (AWS: environment, profile, instance role, and
AWS_ENDPOINT_URL_S3 for an S3-compatible server; GCS: application default credentials).
No torch and no Ray here: `sweeper.storage` uses the same helpers in the driver.

    VBI_MUR_CACHE=/tmp/c python -c "from trainables.remote import fetch; print(fetch('s3://b/data', ['x.bin']))"

The cache folder: $VBI_MUR_CACHE, else ~/.cache/vbi-mur-sweeper; data under data/<scheme>/<bucket>/<prefix>.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from pathlib import Path

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
CHUNK = 8 << 20  # bytes copied at a time


class RemoteError(OSError):
    """A file behind a URI is missing, unreadable or arrived short; the message names it."""


def is_uri(s) -> bool:
    """True for `scheme://...` (s3://, gs://, file://, ...); False for a plain local path."""
    return bool(_SCHEME.match(str(s)))


def scheme(uri: str) -> str:
    m = _SCHEME.match(uri)
    return m.group(1).lower() if m else ""


def resolve(uri: str):
    """(pyarrow file system, path in it) of a URI: `s3://bucket/prefix` -> (S3FileSystem, 'bucket/prefix').
    Raises pyarrow's errors (ArrowInvalid for a scheme it does not know, OSError for others)."""
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(uri)


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
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with fs.open_input_stream(src) as i, open(tmp, "wb") as o:
            shutil.copyfileobj(i, o, CHUNK)
        got = tmp.stat().st_size
        if size is not None and got != size:
            raise RemoteError(f"{src}: copied {got} bytes, the source has {size}")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


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


# ---------------------------------------------------------------- data sets behind a URI (datafiles calls these)

def dataset_layouts(name: str) -> list[list[tuple[str, ...]]]:
    """The layouts `name` may have under its data folder, in the order datafiles reads them: each a list
    of files, each file a tuple of acceptable names (first preferred), relative to the folder."""
    from trainables import datafiles as df

    if name == "mnist":
        idx = df.MNIST_IDX["train"] + df.MNIST_IDX["test"]
        return [[(f"{df.MNIST_FOLDER}/{f}", f"{df.MNIST_FOLDER}/{f}.gz") for f in idx], [(df.MNIST_PICKLE,)]]
    if name == "svhn":
        svhn = df._readers()["svhn"]
        return [[(svhn.split_list[s][1],) for s in ("train", "test")]]
    cls = df._readers()[name]
    files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    return [[(f"{cls.base_folder}/{f}",) for f in files]]


def upload_hint(uri: str) -> str:
    return (f"`gcloud storage rsync -r ./data {uri}`" if scheme(uri) in ("gs", "gcs")
            else f"`aws s3 sync ./data {uri}`" if scheme(uri) == "s3" else f"copy a local data folder to {uri}")


def check_dataset(name: str, uri: str, download: bool = False) -> list[str]:
    """The files of `name` at `uri` (names and sizes checked, nothing read or copied), as paths relative
    to uri; DataError with the fix if a file is missing, the bucket cannot be read, or download is asked."""
    from trainables.datafiles import DataError, _one_line

    if download:
        raise DataError(f"download=true fetches into a local folder, not into {uri}; download once with a "
                        f"local --data-dir, upload that folder ({upload_hint(uri)}), then pass --data-dir {uri}")
    layouts = dataset_layouts(name)
    names = sorted({alt for layout in layouts for f in layout for alt in f})
    try:
        sizes = stat(uri, names)
    except Exception as e:  # ArrowInvalid (unknown scheme), OSError (no bucket, refused credentials, network)
        raise DataError(f"cannot read the data folder {uri} ({_one_line(e)}); check the URI, that the bucket "
                        f"exists and that this machine's credentials may read it") from None
    for layout in layouts:
        chosen = [next((alt for alt in f if sizes[alt] is not None), None) for f in layout]
        if None not in chosen:
            return chosen
    missing = [f[0] for f in layouts[0] if all(sizes[alt] is None for alt in f)]
    raise DataError(f"{name} files missing in {uri}: {', '.join(missing)}; upload a data folder that holds "
                    f"them ({upload_hint(uri)})")


def local_dataset(name: str, uri: str, download: bool = False) -> Path:
    """This node's copy of `name` from `uri` (copied on first use, sizes checked); its local data folder."""
    from trainables.datafiles import DataError, _one_line

    files = check_dataset(name, uri, download)
    try:
        return fetch(uri, files)
    except OSError as e:
        raise DataError(f"copying {name} from {uri} to {cache_folder(uri, 'data')} failed ({_one_line(e)}); "
                        f"check the disk space and the credentials, then run again") from None
