"""The data sets' files on disk: which exist, whether they parse, and their raw arrays (no torch).

Kept apart from `data.py` (tensors, preprocessing, augmentation) so that `sweeper.run` can check
a sweep's data before Ray starts without importing torch: a digits sweep needs nothing here, a
CIFAR/SVHN check imports torchvision's file readers only then. MNIST's two layouts (torchvision's
idx files, the classic mnist.pkl.gz) are read here with numpy alone; torchvision only downloads.
The pickled formats (CIFAR's batches, mnist.pkl.gz) are read with trainables/safe_pickle.py, which
admits numpy arrays and plain data only: a planted pickle in a data folder or bucket runs nothing.

    check_available("cifar10", "./data")   # files there? (no parsing) DataError with the fix if not
    check_readable("cifar10", "./data")    # ... and every file parses (about a second for CIFAR)
    read_raw("svhn", "./data")             # ((x uint8 (N,3,32,32), y int64 (N,)), (x_test, y_test))
    read_raw("mnist", "./data")            # ((x float32 (60000,1,28,28) in [0,1], y), (x_test, y_test))
"""
from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path

import numpy as np

from trainables import remote, safe_pickle
from trainables.files import one_line
from trainables.remote import is_uri

NAMES = ("digits", "mnist", "cifar10", "cifar100", "svhn")

# MNIST, in either of two layouts under data_dir (the first complete one is read):
#   torchvision's  MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte, each plain or .gz;
#   the classic    mnist.pkl.gz: pickled ((x (50000, 784) float32 in [0,1], y), valid (10000), test (10000)).
# Training set = the idx training file in its order = the pickle's train then valid, so that in both
# layouts the LAST 10,000 training images are the classic validation split (config.VAL_SIZE["mnist"]).
MNIST_FOLDER = "MNIST/raw"
MNIST_IDX = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
MNIST_PICKLE = "mnist.pkl.gz"
IDX_MAGIC = {"images": 2051, "labels": 2049}  # 0x00000803: uint8, 3 dims; 0x00000801: uint8, 1 dim


class DataError(ValueError):
    """Data set missing, corrupt or unusable; the one-line message names the fix."""


# How to ask for a download, in the words of both command lines (sweeper.run and trainables.trainer).
DOWNLOAD = "pass --set download=true (trainer: --download)"


def _check_name(name: str) -> None:
    if name not in NAMES:
        raise DataError(f"unknown data set {name!r}; choose one of {list(NAMES)}")


def check_available(name: str, data_dir="./data", download: bool = False) -> None:
    """Cheap pre-flight check (no parsing, no preprocessing): DataError with the fix if the files
    of `name` are not in `data_dir`. With download=True the files are fetched here, once, so
    that parallel trials do not all download them."""
    _check_name(name)
    if name == "digits":
        return
    if is_uri(data_dir):  # in a bucket: names and sizes checked there; read_raw copies them to this node
        check_dataset(name, str(data_dir), download)
        return
    root = _root(name, data_dir, download)
    if name == "mnist":
        _mnist_files(root, download)
        return
    if name == "svhn":
        svhn = _readers()["svhn"]
        if download:
            for split in ("train", "test"):
                _download("svhn", root, lambda: svhn(str(root), split=split, download=True),
                          svhn.split_list[split][0])
        _require_files("svhn", root, [svhn.split_list[s][1] for s in ("train", "test")], _svhn_fix(root))
        return
    cls = _readers()[name]
    if download:
        _download(name, root, lambda: cls(str(root), train=True, download=True), cls.url)
    files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    _require_files(name, root / cls.base_folder, files, _cifar_fix(cls, root))


def check_readable(name: str, data_dir="./data", download: bool = False) -> None:
    """check_available, then parse every file: a truncated or corrupt file fails now with its name."""
    _check_name(name)
    if is_uri(data_dir):  # not parsed here: that would copy the whole data set to this machine
        return check_available(name, data_dir, download)
    if name != "digits":
        read_raw(name, data_dir, download)  # check_available first, then every file parsed


def read_raw(name: str, data_dir="./data", download: bool = False):
    """Raw CIFAR-10/100 or SVHN (SVHN label 10 -> 0), as numpy:
    ((x uint8 (N, 3, 32, 32), y int64 (N,)), (x_test, y_test)). DataError with the fix on any problem.
    MNIST: x float32 (N, 1, 28, 28) in [0, 1] (idx bytes / 255, or the pickle's floats as stored),
    60,000 training images whose last 10,000 are the classic validation split (see MNIST_FOLDER)."""
    _check_name(name)
    if name == "digits":
        raise DataError("digits come from scikit-learn, not from files; use data.load_dataset('digits')")
    if is_uri(data_dir):  # this node's copy, made once by the first trial here (trainables/remote.py)
        data_dir, download = local_dataset(name, str(data_dir), download), False
    check_available(name, data_dir, download)  # fetches with download, then the files must be there
    root = Path(data_dir).expanduser()
    if name == "mnist":
        return _read_mnist(root)
    return _read_svhn(root) if name == "svhn" else _read_cifar(name, root)


def _root(name: str, data_dir, download: bool) -> Path:
    root = Path(data_dir).expanduser()
    if not download and not root.is_dir():
        raise DataError(f"data folder {root} does not exist; create it and put the {name} files in it, "
                        f"or {DOWNLOAD} to fetch them there")
    return root


@functools.cache
def _readers() -> dict:
    """torchvision's readers, imported on first use. torchvision checks each file's MD5 against the
    real release, which tiny test files (and re-pickled copies) fail; these subclasses only require
    the files to exist, and read_raw reports a file that does not parse. download=True still runs
    torchvision's download, which checks the MD5 of what it fetches."""
    import torchvision.datasets as tvd

    def no_md5(base):
        return type(base.__name__, (base,), {
            "train_list": [[f, None] for f, _ in base.train_list],
            "test_list": [[f, None] for f, _ in base.test_list],
            "meta": {**base.meta, "md5": None}})

    class SVHN(tvd.SVHN):
        def _check_integrity(self) -> bool:
            return os.path.isfile(os.path.join(self.root, self.filename))

        def download(self) -> None:
            if not self._check_integrity():
                super().download()  # torchvision's download_url with the real MD5

    return {"cifar10": no_md5(tvd.CIFAR10), "cifar100": no_md5(tvd.CIFAR100), "svhn": SVHN}


def _cifar_fix(cls, root: Path) -> str:
    return f"{DOWNLOAD} to fetch them, or download {cls.url} and extract it into {root}"


def _svhn_fix(root: Path) -> str:
    svhn = _readers()["svhn"]
    return (f"{DOWNLOAD} to fetch them, or download "
            + " and ".join(svhn.split_list[s][0] for s in ("train", "test")) + f" into {root}")


def _read_cifar(name, root: Path):
    """CIFAR's pickled batches, each read with trainables/safe_pickle.py (never torchvision's reader,
    which unpickles with plain pickle.load: a planted batch would run code)."""
    cls = _readers()[name]
    folder = root / cls.base_folder
    fix = _cifar_fix(cls, root)
    meta = folder / cls.meta["filename"]
    try:
        entry = _unpickle(meta)
        if not isinstance(entry, dict) or cls.meta["key"] not in entry:
            raise KeyError(f"no {cls.meta['key']!r} in the meta file")
    except Exception as e:  # unpickling garbage raises many types: name the file, keep the cause
        raise DataError(f"cannot read {name} file {meta} ({one_line(e)}); it is corrupt or truncated: "
                        f"delete it and {fix}") from e
    splits = []
    for files in (cls.train_list, cls.test_list):
        xs, ys = [], []
        for f, _ in files:
            try:
                entry = _unpickle(folder / f)
                data = np.asarray(entry["data"])
                labels = entry["labels"] if "labels" in entry else entry["fine_labels"]
                if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data) or data.dtype != np.uint8:
                    raise ValueError(f"data {data.shape} {data.dtype} with {len(labels)} labels, "
                                     f"expected uint8 (n, 3072) with n labels")
            except Exception as e:
                raise DataError(f"cannot read {name} file {folder / f} ({one_line(e)}); it is corrupt or truncated: "
                                f"delete it and {fix}") from e
            xs.append(data.reshape(-1, 3, 32, 32))  # (N, 3072) row-major R, G, B planes -> (N, 3, 32, 32)
            ys.append(np.asarray(labels, dtype=np.int64))
        splits.append((np.ascontiguousarray(np.concatenate(xs)), np.concatenate(ys)))
    return splits


def _unpickle(path: Path):
    with open(path, "rb") as fh:
        return safe_pickle.load(fh)


def _read_svhn(root: Path):
    svhn = _readers()["svhn"]
    files = [svhn.split_list[s][1] for s in ("train", "test")]
    fix = _svhn_fix(root)
    splits = []
    for split, f in zip(("train", "test"), files):
        try:
            ds = svhn(str(root), split=split)  # data (N, 3, 32, 32) uint8, labels (N,)
            if ds.data.ndim != 4 or ds.data.shape[1:] != (3, 32, 32) or ds.labels.shape != (len(ds.data),):
                raise ValueError(f"X {ds.data.shape} and y {ds.labels.shape}, expected (32, 32, 3, N) and (N, 1)")
        except Exception as e:  # scipy raises IndexError, OSError, MatReadError, ... on bad bytes
            raise DataError(f"cannot read svhn file {root / f} ({one_line(e)}); it is corrupt or truncated: "
                            f"delete it and {fix}") from e
        splits.append((np.ascontiguousarray(ds.data), np.asarray(ds.labels, dtype=np.int64)))
    return splits


# ----------------------------------------------------------------------------- MNIST

def _mnist_fix(root: Path) -> str:
    return (f"{DOWNLOAD} to fetch torchvision's MNIST into {root / MNIST_FOLDER}, "
            f"or put {MNIST_PICKLE} (the classic ((train, valid, test)) pickle) in {root}")


def _mnist_idx_paths(root: Path) -> dict[str, Path | None]:
    """Each idx file's path in torchvision's layout (plain preferred, else .gz), None if neither exists."""
    folder = root / MNIST_FOLDER
    out = {}
    for f in MNIST_IDX["train"] + MNIST_IDX["test"]:
        out[f] = next((p for p in (folder / f, folder / f"{f}.gz") if p.is_file()), None)
    return out


def _mnist_files(root: Path, download: bool):
    """("idx", {file: path}) if torchvision's four files are there, else ("pickle", path); DataError
    naming what is missing if neither layout is complete. download=True fetches the idx files first."""
    idx = _mnist_idx_paths(root)
    if download and None in idx.values() and not (root / MNIST_PICKLE).is_file():
        import torchvision.datasets as tvd
        _download("mnist", root, lambda: tvd.MNIST(str(root), train=True, download=True), tvd.MNIST.mirrors[0])
        idx = _mnist_idx_paths(root)
    if None not in idx.values():
        return "idx", idx
    if (root / MNIST_PICKLE).is_file():
        return "pickle", root / MNIST_PICKLE
    missing = [f for f, p in idx.items() if p is None]
    raise DataError(f"mnist files missing in {root}: neither {MNIST_PICKLE} nor {MNIST_FOLDER}/"
                    f"{', '.join(missing)} (plain or .gz; expected all of {', '.join(idx)}); {_mnist_fix(root)}")


def _read_mnist(root: Path):
    layout, where = _mnist_files(root, download=False)
    if layout == "idx":
        splits = []
        for img, lab in (MNIST_IDX["train"], MNIST_IDX["test"]):
            x, y = _read_idx(where[img], "images", root), _read_idx(where[lab], "labels", root)
            if len(x) != len(y):
                raise DataError(f"mnist files {where[img]} and {where[lab]} hold {len(x)} images but {len(y)} "
                                f"labels; one of them is corrupt: delete both and {_mnist_fix(root)}")
            splits.append((x.astype(np.float32)[:, None] / 255, y.astype(np.int64)))  # (N, 1, 28, 28), (N,)
        return splits
    splits = _read_mnist_pickle(where, root)
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = splits
    # train then valid: the last 10,000 training images are the classic validation split
    return [(np.concatenate([x_tr, x_va]), np.concatenate([y_tr, y_va])), (x_te, y_te)]


def _read_idx(path: Path, kind: str, root: Path) -> np.ndarray:
    """One idx file (big-endian header: magic, then one int32 per dimension, then uint8 data):
    images (N, 28, 28) or labels (N,), uint8. DataError naming the file if it is not that."""
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            raw = f.read()
        ndim = 3 if kind == "images" else 1
        if len(raw) < 4 + 4 * ndim:
            raise ValueError(f"{len(raw)} bytes, shorter than an idx header")
        magic, *dims = (int(v) for v in np.frombuffer(raw, ">i4", count=1 + ndim))
        if magic != IDX_MAGIC[kind]:
            raise ValueError(f"magic number {magic}, expected {IDX_MAGIC[kind]} for idx {kind}")
        if kind == "images" and dims[1:] != [28, 28]:
            raise ValueError(f"images of {dims[1]}x{dims[2]} pixels, expected 28x28")
        data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
        if data.size != int(np.prod(dims)):
            raise ValueError(f"{data.size} data bytes, the header says {dims} = {int(np.prod(dims))}")
        return data.reshape(dims)
    except Exception as e:  # OSError, EOFError, zlib.error, ValueError: name the file, keep the cause
        raise DataError(f"cannot read mnist file {path} ({one_line(e)}); it is corrupt or truncated: "
                        f"delete it and {_mnist_fix(root)}") from e


def _read_mnist_pickle(path: Path, root: Path):
    """The classic mnist.pkl.gz: ((x (n, 784) float in [0, 1], y (n,)) for train, valid, test), with
    x as float32 (n, 1, 28, 28) and y as int64. DataError naming the file if it is not that."""
    try:
        with gzip.open(path, "rb") as f:
            splits = safe_pickle.load(f)  # pickled by Python 2; data only (trainables/safe_pickle.py)
        if not isinstance(splits, (tuple, list)) or len(splits) != 3:
            raise ValueError(f"a {type(splits).__name__}, expected a 3-tuple (train, valid, test)")
        out = []
        for split, pair in zip(("train", "valid", "test"), splits):
            x, y = (np.asarray(a) for a in pair)
            if x.ndim != 2 or x.shape[1] != 784 or y.shape != (len(x),) or x.dtype.kind != "f":
                raise ValueError(f"{split} x {x.shape} {x.dtype} and y {y.shape}, expected float (n, 784) and (n,)")
            if x.size and (x.min() < 0 or x.max() > 1):
                raise ValueError(f"{split} pixels in [{x.min()}, {x.max()}], expected [0, 1]")
            out.append((x.astype(np.float32).reshape(-1, 1, 28, 28), y.astype(np.int64)))
        return out
    except Exception as e:  # unpickling garbage raises many types: name the file, keep the cause
        raise DataError(f"cannot read mnist file {path} ({one_line(e)}); it is corrupt or not the classic "
                        f"((train, valid, test)) pickle: delete it and {_mnist_fix(root)}") from e


def _require_files(name, folder: Path, files, fix):
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise DataError(f"{name} files missing in {folder}: {', '.join(missing)} "
                        f"(expected {', '.join(files)}); {fix}")


def _download(name, root: Path, make, url):
    try:
        make()
    except (OSError, RuntimeError) as e:  # no network, HTTP error, MD5 mismatch of the download
        raise DataError(f"downloading {name} into {root} failed ({one_line(e)}); check the network, "
                        f"or download {url} by hand into {root} and load without download") from e


# ---------------------------------------------------------------- data sets behind a URI (trainables/remote.py copies them)

def dataset_layouts(name: str) -> list[list[tuple[str, ...]]]:
    """The layouts `name` may have under its data folder, in the order datafiles reads them: each a list
    of files, each file a tuple of acceptable names (first preferred), relative to the folder."""
    if name == "mnist":
        idx = MNIST_IDX["train"] + MNIST_IDX["test"]
        return [[(f"{MNIST_FOLDER}/{f}", f"{MNIST_FOLDER}/{f}.gz") for f in idx], [(MNIST_PICKLE,)]]
    if name == "svhn":
        svhn = _readers()["svhn"]
        return [[(svhn.split_list[s][1],) for s in ("train", "test")]]
    cls = _readers()[name]
    files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    return [[(f"{cls.base_folder}/{f}",) for f in files]]


def upload_hint(uri: str) -> str:
    return (f"`gcloud storage rsync -r ./data {uri}`" if remote.scheme(uri) in ("gs", "gcs")
            else f"`aws s3 sync ./data {uri}`" if remote.scheme(uri) == "s3" else f"copy a local data folder to {uri}")


def check_dataset(name: str, uri: str, download: bool = False) -> list[str]:
    """The files of `name` at `uri` (names and sizes checked, nothing read or copied), as paths relative
    to uri; DataError with the fix if a file is missing, the bucket cannot be read, or download is asked."""
    if download:
        raise DataError(f"download=true fetches into a local folder, not into {uri}; download once with a "
                        f"local --data-dir, upload that folder ({upload_hint(uri)}), then pass --data-dir {uri}")
    layouts = dataset_layouts(name)
    names = sorted({alt for layout in layouts for f in layout for alt in f})
    try:
        sizes = remote.stat(uri, names)
    except Exception as e:  # ArrowInvalid (unknown scheme), OSError (no bucket, refused credentials, network)
        raise DataError(f"cannot read the data folder {uri} ({one_line(e)}); check the URI, that the bucket "
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
    files = check_dataset(name, uri, download)
    try:
        return remote.fetch(uri, files)
    except OSError as e:
        raise DataError(f"copying {name} from {uri} to {remote.cache_folder(uri, 'data')} failed ({one_line(e)}); "
                        f"check the disk space and the credentials, then run again") from None
