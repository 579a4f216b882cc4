"""The data sets' files on disk: which exist, whether they parse, and their raw arrays (no torch).

Kept apart from `data.py` (tensors, preprocessing, augmentation) so that `sweeper.run` can check
a sweep's data before Ray starts without importing torch: a digits sweep needs nothing here, a
CIFAR/SVHN check imports torchvision's file readers only then.

    check_available("cifar10", "./data")   # files there? (no parsing) DataError with the fix if not
    check_readable("cifar10", "./data")    # ... and every file parses (about a second for CIFAR)
    read_raw("svhn", "./data")             # ((x uint8 (N,3,32,32), y int64 (N,)), (x_test, y_test))
"""
from __future__ import annotations

import functools
import os
import pickle
from pathlib import Path

import numpy as np

NAMES = ("digits", "cifar10", "cifar100", "svhn")


class DataError(ValueError):
    """Data set missing, corrupt or unusable; the one-line message names the fix."""


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
    root = _root(name, data_dir, download)
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
    if name != "digits":
        read_raw(name, data_dir, download)  # check_available first, then every file parsed


def read_raw(name: str, data_dir="./data", download: bool = False):
    """Raw CIFAR-10/100 or SVHN (SVHN label 10 -> 0), as numpy:
    ((x uint8 (N, 3, 32, 32), y int64 (N,)), (x_test, y_test)). DataError with the fix on any problem."""
    _check_name(name)
    if name == "digits":
        raise DataError("digits come from scikit-learn, not from files; use data.load_dataset('digits')")
    check_available(name, data_dir, download)  # fetches with download, then the files must be there
    root = Path(data_dir).expanduser()
    return _read_svhn(root) if name == "svhn" else _read_cifar(name, root)


def _root(name: str, data_dir, download: bool) -> Path:
    root = Path(data_dir).expanduser()
    if not download and not root.is_dir():
        raise DataError(f"data folder {root} does not exist; create it and put the {name} files in it, "
                        f"or pass --set download=true (download=True) to fetch them there")
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
    return f"pass --set download=true (download=True) to fetch them, or download {cls.url} and extract it into {root}"


def _svhn_fix(root: Path) -> str:
    svhn = _readers()["svhn"]
    return ("pass --set download=true (download=True) to fetch them, or download "
            + " and ".join(svhn.split_list[s][0] for s in ("train", "test")) + f" into {root}")


def _read_cifar(name, root: Path):
    cls = _readers()[name]
    folder = root / cls.base_folder
    train_files = [f for f, _ in cls.train_list]
    test_files = [f for f, _ in cls.test_list]
    meta_file = cls.meta["filename"]
    fix = _cifar_fix(cls, root)
    splits = []
    for train, files in ((True, train_files), (False, test_files)):
        try:
            ds = cls(str(root), train=train)
        except Exception as e:  # parsers raise many types; name the file, keep the cause
            bad, err = _find_bad_cifar_file(folder, files, meta_file, cls.meta["key"]) or (folder, e)
            raise DataError(f"cannot read {name} file {bad} ({_one_line(err)}); it is corrupt or truncated: "
                            f"delete it and {fix}") from e
        x = np.ascontiguousarray(np.asarray(ds.data).transpose(0, 3, 1, 2))  # (N,32,32,3) -> (N,3,32,32)
        splits.append((x, np.asarray(ds.targets, dtype=np.int64)))
    return splits


def _find_bad_cifar_file(folder: Path, data_files, meta_file, meta_key):
    """The first CIFAR pickle that does not unpickle into the expected dict, with its error."""
    for f in data_files + [meta_file]:
        try:
            with open(folder / f, "rb") as fh:
                entry = pickle.load(fh, encoding="latin1")
            if f == meta_file:
                if meta_key not in entry:
                    raise KeyError(f"no {meta_key!r} in the meta file")
                continue
            data = np.asarray(entry["data"])
            labels = entry["labels"] if "labels" in entry else entry["fine_labels"]
            if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
                raise ValueError(f"data {data.shape} with {len(labels)} labels, expected (n, 3072) with n labels")
        except Exception as e:
            return folder / f, e
    return None


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
            raise DataError(f"cannot read svhn file {root / f} ({_one_line(e)}); it is corrupt or truncated: "
                            f"delete it and {fix}") from e
        splits.append((np.ascontiguousarray(ds.data), np.asarray(ds.labels, dtype=np.int64)))
    return splits


def _require_files(name, folder: Path, files, fix):
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise DataError(f"{name} files missing in {folder}: {', '.join(missing)} "
                        f"(expected {', '.join(files)}); {fix}")


def _download(name, root: Path, make, url):
    try:
        make()
    except (OSError, RuntimeError) as e:  # no network, HTTP error, MD5 mismatch of the download
        raise DataError(f"downloading {name} into {root} failed ({_one_line(e)}); check the network, "
                        f"or download {url} by hand into {root} and load without download") from e


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg[:200]}"
