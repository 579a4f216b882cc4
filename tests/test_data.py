"""Tests of trainables/data.py: loaders on tiny files in the real on-disk formats, ZCA,
labeled split, augmentation and the Batcher.

    pytest tests/test_data.py -q
"""
import gzip
import io
import json
import pickle
import struct
import subprocess
import sys
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.linalg
import torch
import torchvision

from trainables.data import (Batcher, augment, fit_zca, apply_zca, labeled_split, label_counts, load_dataset,
                             validation_indices, ZCA_EPS)
from trainables.datafiles import DataError

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- real on-disk formats

class _Py2Pickler(pickle._Pickler):
    """Writes str and bytes as Python 2 byte strings, as in the CIFAR releases (pickled by Python 2)."""
    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj):
        b = obj.encode("latin1") if isinstance(obj, str) else bytes(obj)
        if len(b) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(b)]) + b)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(b)) + b)

    dispatch[str] = _save_py2_str
    dispatch[bytes] = _save_py2_str


def _py2_dump(obj, path):
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    path.write_bytes(buf.getvalue())


def _write_cifar10(root, rng, per_batch=2, n_test=3, labels_max=10):
    """cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}; returns the rows written."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rows, labels = [], []
    for i in range(1, 6):
        d = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)  # 1024 R, 1024 G, 1024 B, row-major
        y = rng.integers(0, labels_max, per_batch).tolist()
        _py2_dump({"batch_label": f"training batch {i} of 5", "labels": y, "data": d,
                   "filenames": [f"img_{i}_{j}.png" for j in range(per_batch)]}, folder / f"data_batch_{i}")
        rows.append(d)
        labels += y
    d_te = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    y_te = rng.integers(0, labels_max, n_test).tolist()
    _py2_dump({"batch_label": "testing batch 1 of 1", "labels": y_te, "data": d_te,
               "filenames": [f"test_{j}.png" for j in range(n_test)]}, folder / "test_batch")
    _py2_dump({"num_cases_per_batch": per_batch, "num_vis": 3072,
               "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                               "ship", "truck"]}, folder / "batches.meta")
    return np.concatenate(rows), np.array(labels), d_te, np.array(y_te)


def _write_cifar100(root, rng, n_train=6, n_test=2):
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    out = []
    for split, n in (("train", n_train), ("test", n_test)):
        d = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = [99] + rng.integers(0, 100, n - 1).tolist()
        _py2_dump({"filenames": [f"{split}_{j}.png" for j in range(n)], "batch_label": f"{split} batch 1 of 1",
                   "fine_labels": fine, "coarse_labels": [f // 5 for f in fine], "data": d}, folder / split)
        out += [d, np.array(fine)]
    _py2_dump({"fine_label_names": [f"class_{i}" for i in range(100)],
               "coarse_label_names": [f"super_{i}" for i in range(20)]}, folder / "meta")
    return out


def _write_svhn(root, rng, n_train=5, n_test=3):
    """{train,test}_32x32.mat: X uint8 (32, 32, 3, N), y uint8 (N, 1) with 10 for the digit 0."""
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for split, n in (("train", n_train), ("test", n_test)):
        X = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        X[..., 0] = 77  # a constant image: zeros, no NaN
        X[..., 1] = 77
        X[5, 6, 1, 1] = 78  # nearly constant: std just below the floor 1/sqrt(3072) of raw 0..255 units
        y = np.array([[10]] + [[v] for v in rng.integers(1, 11, n - 1)], dtype=np.uint8)
        scipy.io.savemat(root / f"{split}_32x32.mat", {"X": X, "y": y})
        out += [X, y]
    return out


MNIST_RAW = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _idx_bytes(a, magic):
    """The idx format: big-endian int32 magic (2051 images, 2049 labels), one int32 per dimension, uint8 data."""
    return struct.pack(">i", magic) + struct.pack(f">{a.ndim}i", *a.shape) + np.ascontiguousarray(a, np.uint8).tobytes()


def _mnist_pixels(rng, n):
    """n 28x28 uint8 images with a black (0) margin like real digits, and labels 0..9 (9 included)."""
    x = np.zeros((n, 28, 28), np.uint8)
    x[:, 4:24, 4:24] = rng.integers(0, 256, (n, 20, 20), dtype=np.uint8)
    y = rng.integers(0, 10, n).astype(np.uint8)
    y[0] = 9
    return x, y


def _write_mnist_idx(root, x_tr, y_tr, x_te, y_te, gz=(False, True, True, False)):
    """MNIST/raw/ in torchvision's layout; gz[i]: write file i of MNIST_RAW gzipped (.gz) instead."""
    folder = root / "MNIST" / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    for f, a, magic, z in zip(MNIST_RAW, (x_tr, y_tr, x_te, y_te), (2051, 2049, 2051, 2049), gz):
        data = _idx_bytes(a, magic)
        if z:
            (folder / f"{f}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / f).write_bytes(data)
    return folder


def _write_mnist_pickle(root, splits):
    """mnist.pkl.gz as the classic file: a Python 2 pickle, gzipped, of ((x float32 (n, 784) = pixel / 256,
    y int64 (n,)) for train, valid, test); splits: three (uint8 (n, 28, 28), labels) pairs."""
    root.mkdir(parents=True, exist_ok=True)
    data = tuple((x.reshape(len(x), 784).astype(np.float32) / 256, y.astype(np.int64)) for x, y in splits)
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(data)
    (root / "mnist.pkl.gz").write_bytes(gzip.compress(buf.getvalue()))
    return root / "mnist.pkl.gz"


def _mnist_reference(x_tr, x_te, scale):
    """Independent MNIST preprocessing: pixels / scale, zero-pad 2 per side to 32x32, then minus the padded
    training images' global mean, over their global std (ddof 0), in float64: (N, 1, 32, 32) each."""
    pad = lambda x: np.pad(x.astype(np.float64) / scale, ((0, 0), (2, 2), (2, 2)))[:, None]
    a, b = pad(x_tr), pad(x_te)
    return (a - a.mean()) / a.std(), (b - a.mean()) / a.std()


def _zca_reference(train_rows, test_rows, eps):
    """Whitening by (C + eps I)^(-1/2) via the thin SVD of the centred training rows (float64)."""
    mean = train_rows.mean(0)
    xc = train_rows - mean
    _, s, Vt = np.linalg.svd(xc, full_matrices=False)
    lam = s ** 2 / len(train_rows)
    keep = lam > 1e-10 * lam.max()
    V, lam = Vt[keep].T, lam[keep]  # (D, k), (k,)

    def whiten(a):
        a = a - mean
        p = a @ V  # components in the spanned subspace; the rest has eigenvalue 0
        return (p * (lam + eps) ** -0.5) @ V.T + (a - p @ V.T) * eps ** -0.5
    return whiten(train_rows), whiten(test_rows)


def _assert_one_line_fix(err, *needles):
    msg = str(err.value)
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ----------------------------------------------------------------------------- CIFAR

def test_fixture_pickles_have_python2_byte_string_keys(tmp_path, rng):
    _write_cifar10(tmp_path, rng)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        entry = pickle.load(f, encoding="bytes")  # how Python 3 sees the real files without latin1
    assert set(entry) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert entry[b"data"].dtype == np.uint8 and entry[b"data"].shape == (2, 3072)


def test_cifar10_pixels_labels_and_zca_match_what_was_written(tmp_path, rng):
    x_tr, y_tr, x_te, y_te = _write_cifar10(tmp_path, rng)
    ds = load_dataset("cifar10", tmp_path)
    assert ds.name == "cifar10" and ds.num_classes == 10
    assert ds.x_train.shape == (10, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.y_train.tolist() == y_tr.tolist() and ds.y_test.tolist() == y_te.tolist()
    ref_tr, ref_te = _zca_reference(x_tr / 255.0, x_te / 255.0, ZCA_EPS)  # fitted on train only
    # NCHW flattened is the CIFAR row layout (R plane, G plane, B plane), so rows compare directly
    scale = np.abs(ref_te).max()
    np.testing.assert_allclose(ds.x_train.flatten(1).numpy(), ref_tr, atol=1e-4 * scale)
    np.testing.assert_allclose(ds.x_test.flatten(1).numpy(), ref_te, atol=1e-4 * scale)
    # the comparison can fail: a B,G,R channel order gives other numbers
    bgr = lambda r: r.reshape(-1, 3, 1024)[:, ::-1].reshape(-1, 3072)
    ref_bgr, _ = _zca_reference(bgr(x_tr / 255.0), bgr(x_te / 255.0), ZCA_EPS)
    assert np.abs(ds.x_train.flatten(1).numpy() - ref_bgr).max() > 1e-2


def test_cifar100_fine_labels_and_zca(tmp_path, rng):
    x_tr, y_tr, x_te, y_te = _write_cifar100(tmp_path, rng)
    ds = load_dataset("cifar100", tmp_path)
    assert ds.num_classes == 100 and ds.x_train.shape == (6, 3, 32, 32) and ds.x_test.shape == (2, 3, 32, 32)
    assert ds.y_train.tolist() == y_tr.tolist() and ds.y_test.tolist() == y_te.tolist()
    assert ds.y_train[0] == 99
    ref_tr, ref_te = _zca_reference(x_tr / 255.0, x_te / 255.0, ZCA_EPS)
    scale = np.abs(ref_te).max()
    np.testing.assert_allclose(ds.x_train.flatten(1).numpy(), ref_tr, atol=1e-4 * scale)
    np.testing.assert_allclose(ds.x_test.flatten(1).numpy(), ref_te, atol=1e-4 * scale)


def _outside(dataset, n_train, n_val):
    """Boolean mask of the training images outside the validation split: what a run may train on."""
    keep = np.ones(n_train, bool)
    keep[validation_indices(dataset, n_train, n_val).numpy()] = False
    assert keep.sum() == n_train - n_val
    return keep


def test_cifar10_zca_is_fitted_outside_the_validation_split(tmp_path, rng):
    x_tr, _, x_te, _ = _write_cifar10(tmp_path, rng, per_batch=4)  # 20 training images
    ds = load_dataset("cifar10", tmp_path, n_val=6)
    keep = _outside("cifar10", 20, 6)
    ref = _zca_reference(x_tr[keep] / 255.0, np.concatenate([x_tr, x_te]) / 255.0, ZCA_EPS)[1]
    scale = np.abs(ref).max()
    np.testing.assert_allclose(ds.x_train.flatten(1).numpy(), ref[:20], atol=1e-4 * scale)
    np.testing.assert_allclose(ds.x_test.flatten(1).numpy(), ref[20:], atol=1e-4 * scale)
    # the fit can tell: with the validation images included the numbers differ
    assert not np.allclose(load_dataset("cifar10", tmp_path).x_test.flatten(1).numpy(), ref[20:], atol=1e-2 * scale)


class _PlaneRng:
    """np.random.Generator whose (n, 3072) pixel draws have another range per colour plane (R 0..63, G 0..127,
    B 0..255), so that a channel mix-up changes the per-channel statistics."""

    def __init__(self, rng):
        self.rng = rng

    def integers(self, low, high, size, dtype=np.int64):
        x = self.rng.integers(low, high, size, dtype=dtype)
        if isinstance(size, tuple) and size[-1] == 3072:
            x = (x.reshape(-1, 3, 1024) // np.array([4, 2, 1], dtype=x.dtype)[:, None]).reshape(size)
        return x


def _channel_reference(train_rows, rows):
    """Per-channel standardisation in float64: each colour plane of the CIFAR rows (1024 values) minus that
    plane's mean over every training image and pixel, over its std (ddof 0)."""
    planes = lambda r: r.reshape(len(r), 3, 1024).astype(np.float64)
    t = planes(train_rows)
    mean, std = t.mean((0, 2), keepdims=True), t.std((0, 2), keepdims=True)  # (1, 3, 1) each
    return ((planes(rows) - mean) / std).reshape(len(rows), 3072)


def test_cifar10_channel_standardisation_matches_what_was_written(tmp_path, rng):
    x_tr, y_tr, x_te, y_te = _write_cifar10(tmp_path, _PlaneRng(rng), per_batch=4)
    ds = load_dataset("cifar10", tmp_path, cifar_norm="channel")
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_train.dtype == torch.float32
    assert ds.y_train.tolist() == y_tr.tolist() and ds.y_test.tolist() == y_te.tolist()
    np.testing.assert_allclose(ds.x_train.flatten(1).numpy(), _channel_reference(x_tr, x_tr), atol=1e-5)
    np.testing.assert_allclose(ds.x_test.flatten(1).numpy(), _channel_reference(x_tr, x_te), atol=1e-5)
    # per channel, not per feature: each channel has mean 0 and std 1 over the training set, a pixel does not
    x = ds.x_train.double()
    torch.testing.assert_close(x.mean((0, 2, 3)), torch.zeros(3, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(x.std((0, 2, 3), correction=0), torch.ones(3, dtype=torch.float64), atol=1e-6, rtol=0)
    assert x.mean(0).abs().max() > 0.1
    # the comparison can fail: a B,G,R channel order, or ZCA, gives other numbers
    bgr = lambda r: r.reshape(-1, 3, 1024)[:, ::-1].reshape(-1, 3072)
    assert np.abs(ds.x_train.flatten(1).numpy() - _channel_reference(bgr(x_tr), bgr(x_tr))).max() > 0.1
    assert not torch.allclose(load_dataset("cifar10", tmp_path).x_train, ds.x_train, atol=0.1)


def test_cifar100_channel_standardisation_is_fitted_outside_the_validation_split(tmp_path, rng):
    x_tr, _, x_te, _ = _write_cifar100(tmp_path, _PlaneRng(rng), n_train=12)
    ds = load_dataset("cifar100", tmp_path, n_val=5, cifar_norm="channel")
    keep = _outside("cifar100", 12, 5)
    np.testing.assert_allclose(ds.x_train.flatten(1).numpy(), _channel_reference(x_tr[keep], x_tr), atol=1e-5)
    np.testing.assert_allclose(ds.x_test.flatten(1).numpy(), _channel_reference(x_tr[keep], x_te), atol=1e-5)
    whole = load_dataset("cifar100", tmp_path, cifar_norm="channel")  # the fit can tell
    assert not np.allclose(whole.x_test.flatten(1).numpy(), ds.x_test.flatten(1).numpy(), atol=1e-3)


def test_fit_channel_standardization_in_chunks_equals_one_pass():
    from trainables.data import fit_channel_standardization

    x = torch.randint(0, 256, (11, 3, 5, 4), dtype=torch.uint8)
    mean, std = fit_channel_standardization(x, chunk=3)
    ref = x.double().permute(1, 0, 2, 3).reshape(3, -1)  # (C, N*H*W)
    assert mean.shape == std.shape == (3, 1, 1)
    torch.testing.assert_close(mean.flatten().double(), ref.mean(1), atol=1e-4, rtol=0)
    torch.testing.assert_close(std.flatten().double(), ref.std(1, correction=0), atol=1e-4, rtol=0)
    with pytest.raises(DataError, match="at least one training image"):
        fit_channel_standardization(x[:0])


def test_unknown_cifar_norm(tmp_path, rng):
    _write_cifar10(tmp_path, rng)
    with pytest.raises(ValueError, match="unknown cifar_norm 'pca'; choose 'zca' or 'channel'"):
        load_dataset("cifar10", tmp_path, cifar_norm="pca")


def test_dataset_to_returns_a_copy(tmp_path, rng):
    ds = load_dataset("digits")
    moved = ds.to("cpu")
    assert moved is not ds and moved.name == ds.name and moved.num_classes == ds.num_classes
    assert torch.equal(moved.x_train, ds.x_train) and torch.equal(moved.y_test, ds.y_test)


# ----------------------------------------------------------------------------- ZCA

def test_zca_whitens_and_is_symmetric():
    g = np.random.default_rng(1)
    A = g.normal(size=(12, 12)) * np.linspace(0.1, 3, 12)  # correlated, unequal variances
    x = g.normal(size=(2000, 12)) @ A + 5.0  # (N, D), N > D
    mean, W = fit_zca(torch.tensor(x, dtype=torch.float32), eps=1e-5)
    W = W.double().numpy()
    np.testing.assert_allclose(W, W.T, atol=1e-6 * np.abs(W).max())  # ZCA, not PCA (Lambda^-1/2 V^T)
    C = np.cov(x, rowvar=False, bias=True)
    np.testing.assert_allclose(W, np.real(scipy.linalg.fractional_matrix_power(C + 1e-5 * np.eye(12), -0.5)),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean.numpy(), x.mean(0), rtol=1e-5)
    z = (x - mean.double().numpy()) @ W
    cov_z = np.cov(z, rowvar=False, bias=True)  # = C (C + eps I)^-1: identity up to eps / eigenvalue
    np.testing.assert_allclose(cov_z, C @ np.linalg.inv(C + 1e-5 * np.eye(12)), atol=1e-4)
    assert np.abs(cov_z - np.eye(12)).max() < 0.05


def test_zca_with_fewer_images_than_dimensions():
    g = np.random.default_rng(2)
    x = g.normal(size=(5, 12)) @ g.normal(size=(12, 12))  # rank 4 after centring
    eps = 1e-3
    mean, W = fit_zca(torch.tensor(x, dtype=torch.float32), eps=eps)
    C = np.cov(x, rowvar=False, bias=True)
    ref = np.real(scipy.linalg.fractional_matrix_power(C + eps * np.eye(12), -0.5))
    np.testing.assert_allclose(W.double().numpy(), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    z = (x - x.mean(0)) @ W.double().numpy()
    ev = np.sort(np.linalg.eigvalsh(np.cov(z, rowvar=False, bias=True)))
    lam = np.sort(np.linalg.eigvalsh(C))[-4:]
    np.testing.assert_allclose(ev[-4:], lam / (lam + eps), atol=1e-3)  # white on the spanned subspace
    np.testing.assert_allclose(ev[:-4], 0, atol=1e-3)


def test_apply_zca_uses_the_flattened_image():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 2, 2, 2, generator=g)
    mean, W = fit_zca(x.flatten(1))
    out = apply_zca(x, mean, W)
    assert out.shape == x.shape
    torch.testing.assert_close(out.flatten(1), (x.flatten(1) - mean) @ W)


def test_pixel_standardised_data_sets_give_back_their_8bit_pixels(tmp_path, rng):
    """Dataset.pixels undoes the standardisation: the pixels written to the files come back exactly (FixMatch's
    RA works on them), for CIFAR per channel and SVHN per feature; ZCA and per-image standardisation have none."""
    from trainables.augment_pil import to_pixels
    x_tr, _, x_te, _ = _write_cifar10(tmp_path / "c", _PlaneRng(rng), per_batch=4)
    ds = load_dataset("cifar10", tmp_path / "c", cifar_norm="channel")
    assert torch.equal(to_pixels(ds.x_train, *ds.pixels), torch.from_numpy(x_tr).view(-1, 3, 32, 32).float())
    assert torch.equal(to_pixels(ds.x_test, *ds.pixels), torch.from_numpy(x_te).view(-1, 3, 32, 32).float())
    assert load_dataset("cifar10", tmp_path / "c").pixels is None
    X_tr, _, _, _ = _write_svhn(tmp_path / "s", rng)
    ds = load_dataset("svhn", tmp_path / "s")
    assert torch.equal(to_pixels(ds.x_train, *ds.pixels), torch.from_numpy(X_tr.transpose(3, 2, 0, 1)).float())
    assert load_dataset("svhn", tmp_path / "s", svhn_norm="image").pixels is None
    assert load_dataset("digits").pixels is None


# ----------------------------------------------------------------------------- SVHN

def test_svhn_per_feature_standardisation_by_default(tmp_path, rng):
    """The authors' input_norm="standard": every pixel and channel minus its training mean, over its
    training std (numpy's, ddof 0), the same statistics applied to the test images."""
    X_tr, y_tr, X_te, y_te = _write_svhn(tmp_path, rng)
    ds = load_dataset("svhn", tmp_path)
    img_tr, img_te = (X.transpose(3, 2, 0, 1).astype(np.float64) for X in (X_tr, X_te))  # (N, C, H, W)
    mu, sd = img_tr.mean(axis=0), img_tr.std(axis=0)  # (C, H, W) each
    np.testing.assert_allclose(ds.x_train.numpy(), (img_tr - mu) / sd, atol=1e-4)
    np.testing.assert_allclose(ds.x_test.numpy(), (img_te - mu) / sd, atol=1e-4)
    np.testing.assert_allclose(ds.x_train.numpy().mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(ds.x_train.numpy().std(0), 1, atol=1e-5)
    assert ds.y_train.tolist() == (y_tr[:, 0] % 10).tolist()
    with pytest.raises(ValueError, match="svhn_norm"):
        load_dataset("svhn", tmp_path, svhn_norm="pixel")


def test_svhn_standardisation_is_fitted_outside_the_validation_split(tmp_path, rng):
    X_tr, _, X_te, _ = _write_svhn(tmp_path, rng, n_train=12)
    ds = load_dataset("svhn", tmp_path, n_val=4)
    img_tr, img_te = (X.transpose(3, 2, 0, 1).astype(np.float64) for X in (X_tr, X_te))  # (N, C, H, W)
    keep = _outside("svhn", 12, 4)
    mu, sd = img_tr[keep].mean(axis=0), np.maximum(img_tr[keep].std(axis=0), 1e-8)  # (C, H, W) each
    np.testing.assert_allclose(ds.x_train.numpy(), (img_tr - mu) / sd, atol=1e-3)
    np.testing.assert_allclose(ds.x_test.numpy(), (img_te - mu) / sd, atol=1e-3)
    np.testing.assert_allclose(ds.x_train.numpy()[keep].mean(0), 0, atol=1e-4)  # zero mean on the fitted ones
    assert np.abs(ds.x_train.numpy()[~keep].mean(0)).max() > 0.1  # not on the validation images


def test_svhn_labels_and_per_image_standardisation(tmp_path, rng):
    X_tr, y_tr, X_te, y_te = _write_svhn(tmp_path, rng)
    ds = load_dataset("svhn", tmp_path, svhn_norm="image")
    assert ds.num_classes == 10 and ds.x_train.shape == (5, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert ds.y_train[0] == 0  # label 10 is the digit 0
    assert ds.y_train.tolist() == (y_tr[:, 0] % 10).tolist() and ds.y_test.tolist() == (y_te[:, 0] % 10).tolist()
    for X, x in ((X_tr, ds.x_train), (X_te, ds.x_test)):
        img = X.transpose(3, 2, 0, 1).astype(np.float64)  # (N, C, H, W): rows, columns, channels
        mu = img.mean(axis=(1, 2, 3), keepdims=True)
        sd = np.maximum(img.std(axis=(1, 2, 3), keepdims=True), 1 / np.sqrt(3072))
        np.testing.assert_allclose(x.numpy(), (img - mu) / sd, atol=1e-4)
    assert torch.all(ds.x_train[0] == 0)  # the constant image
    assert torch.allclose(ds.x_train[2:].std(dim=(1, 2, 3), correction=0), torch.ones(3), atol=1e-4)


# ----------------------------------------------------------------------------- MNIST

@pytest.mark.parametrize("gz", [(False,) * 4, (True,) * 4, (False, True, True, False)])
def test_mnist_idx_pixels_labels_padding_and_standardisation(tmp_path, rng, gz):
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 7), _mnist_pixels(rng, 3)
    _write_mnist_idx(tmp_path, x_tr, y_tr, x_te, y_te, gz)
    ds = load_dataset("mnist", tmp_path)
    assert ds.name == "mnist" and ds.num_classes == 10
    assert ds.x_train.shape == (7, 1, 32, 32) and ds.x_test.shape == (3, 1, 32, 32)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.y_train.tolist() == y_tr.tolist() and ds.y_test.tolist() == y_te.tolist()
    ref_tr, ref_te = _mnist_reference(x_tr, x_te, 255)
    np.testing.assert_allclose(ds.x_train.numpy(), ref_tr, atol=1e-5)
    np.testing.assert_allclose(ds.x_test.numpy(), ref_te, atol=1e-5)
    assert abs(ds.x_train.mean().item()) < 1e-5 and abs(ds.x_train.std(correction=0).item() - 1) < 1e-5
    # the 2-pixel padding holds the standardised black background, like the digits' own margins
    background = ds.x_train[0, 0, 0, 0].item()
    assert background < 0 and ds.x_train[:, :, :6].eq(background).all()  # rows 0-5: 2 padded + 4 black
    assert ds.x_test[:, :, :, -6:].eq(background).all()


def test_mnist_standardisation_is_fitted_outside_the_validation_split(tmp_path, rng):
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 9), _mnist_pixels(rng, 3)
    _write_mnist_idx(tmp_path, x_tr, y_tr, x_te, y_te)
    ds = load_dataset("mnist", tmp_path, n_val=4)  # the LAST 4 training images are validation
    assert _outside("mnist", 9, 4).tolist() == [True] * 5 + [False] * 4
    pad = lambda x: np.pad(x.astype(np.float64) / 255, ((0, 0), (2, 2), (2, 2)))[:, None]
    a = pad(x_tr[:5])
    np.testing.assert_allclose(ds.x_train.numpy(), (pad(x_tr) - a.mean()) / a.std(), atol=1e-5)
    np.testing.assert_allclose(ds.x_test.numpy(), (pad(x_te) - a.mean()) / a.std(), atol=1e-5)


def test_digits_standardisation_is_fitted_outside_the_validation_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x_tr, x_te, _, _ = train_test_split(d.images.astype(np.float64), d.target, test_size=450,
                                        stratify=d.target, random_state=0)
    keep = _outside("digits", 1347, 300)
    mu, sd = x_tr[keep].mean(), x_tr[keep].std()
    ds = load_dataset("digits", n_val=300)
    np.testing.assert_allclose(ds.x_train[:, 0].numpy(), (x_tr - mu) / sd, atol=1e-5)
    np.testing.assert_allclose(ds.x_test[:, 0].numpy(), (x_te - mu) / sd, atol=1e-5)
    assert not torch.equal(ds.x_test, load_dataset("digits").x_test)  # the fit can tell (a shift of ~1e-4)


@pytest.mark.parametrize("n_val", [0, 300])
def test_digits_without_scikit_learn_equal_scikit_learns_bit_for_bit(n_val, tmp_path):
    """The digits read from the shipped csv.gz with the stored split are, to the bit, what scikit-learn's
    load_digits and train_test_split give through the same standardisation; the stored split is the one
    write_digits_split makes again."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from trainables.data import DIGITS_SPLIT, fit_indices, write_digits_split

    assert write_digits_split(tmp_path / "split.json") == json.loads(DIGITS_SPLIT.read_text())
    d = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(d.images.astype(np.float64), d.target.astype(np.int64),
                                              test_size=450, stratify=d.target, random_state=0)
    fit = fit_indices("digits", len(y_tr), n_val).numpy()
    mean, std = x_tr[fit].mean(), x_tr[fit].std()
    prep = lambda a: torch.from_numpy(((a - mean) / std).astype(np.float32)).unsqueeze(1)
    ds = load_dataset("digits", n_val=n_val)
    assert torch.equal(ds.x_train, prep(x_tr)) and torch.equal(ds.x_test, prep(x_te))
    assert torch.equal(ds.y_train, torch.from_numpy(y_tr)) and torch.equal(ds.y_test, torch.from_numpy(y_te))


@pytest.mark.slow  # a Python that imports torch
def test_a_digits_trial_imports_no_scikit_learn_scipy_or_dynamo():
    """What a digits trial process pays at its start: loading the digits imports neither scikit-learn nor
    scipy, and training (its optimizer, trainables/sgd.py) does not import torch._dynamo."""
    code = ("import sys; from trainables.data import load_dataset; d = load_dataset('digits'); "
            "print(len(d.y_train), len(d.y_test), any(m.split('.')[0] in ('sklearn', 'scipy') for m in sys.modules)); "
            "from search_spaces.common import QUICK; from trainables.config import TrainConfig; "
            "from trainables.trainer import train; "
            "cfg = TrainConfig(**{**QUICK, 'method': 'mt', 'vd': True, 'mur': 'direct', 'steps': 4, 'eval_every': 2, "
            "'lr_rampup': 1, 'lr_rampdown': 2, 'sensitivity_samples': 4}); out = train(cfg, d, log=None); "
            "print(out['step'], 'torch._dynamo' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["1347", "450", "False", "4", "False"], p.stdout + p.stderr[-2000:]


def test_mnist_pickle_train_then_valid_then_test(tmp_path, rng):
    tr, va, te = _mnist_pixels(rng, 6), _mnist_pixels(rng, 4), _mnist_pixels(rng, 3)
    _write_mnist_pickle(tmp_path, [tr, va, te])
    ds = load_dataset("mnist", tmp_path)
    assert ds.x_train.shape == (10, 1, 32, 32) and ds.x_test.shape == (3, 1, 32, 32)
    # training set = train then valid: its LAST 4 images are the pickle's validation split
    assert ds.y_train.tolist() == tr[1].tolist() + va[1].tolist() and ds.y_test.tolist() == te[1].tolist()
    ref_tr, ref_te = _mnist_reference(np.concatenate([tr[0], va[0]]), te[0], 256)
    np.testing.assert_allclose(ds.x_train.numpy(), ref_tr, atol=1e-5)
    np.testing.assert_allclose(ds.x_test.numpy(), ref_te, atol=1e-5)
    np.testing.assert_allclose(ds.x_train[-4:].numpy(), _mnist_reference(np.concatenate([tr[0], va[0]]), va[0], 256)[1],
                               atol=1e-5)


def test_mnist_both_layouts_give_the_same_data_set(tmp_path, rng):
    """The same digits as idx bytes and as the pickle's pixel/256 floats: standardisation removes the scale."""
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 9), _mnist_pixels(rng, 2)
    _write_mnist_idx(tmp_path / "idx", x_tr, y_tr, x_te, y_te)
    _write_mnist_pickle(tmp_path / "pkl", [(x_tr[:6], y_tr[:6]), (x_tr[6:], y_tr[6:]), (x_te, y_te)])
    a, b = load_dataset("mnist", tmp_path / "idx"), load_dataset("mnist", tmp_path / "pkl")
    for t in ("x_train", "x_test"):
        torch.testing.assert_close(getattr(a, t), getattr(b, t), atol=1e-5, rtol=0)
    assert torch.equal(a.y_train, b.y_train) and torch.equal(a.y_test, b.y_test)
    # with both layouts in one folder, torchvision's idx files are read
    _write_mnist_pickle(tmp_path / "idx", [_mnist_pixels(rng, 2)] * 3)
    assert torch.equal(load_dataset("mnist", tmp_path / "idx").x_train, a.x_train)


def test_mnist_missing_files(tmp_path, rng):
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    _assert_one_line_fix(e, "missing", str(tmp_path), "mnist.pkl.gz", "MNIST/raw", *MNIST_RAW, "download=true")
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 2), _mnist_pixels(rng, 2)
    (_write_mnist_idx(tmp_path, x_tr, y_tr, x_te, y_te, gz=(False,) * 4) / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    _assert_one_line_fix(e, "missing", "t10k-labels-idx1-ubyte", "mnist.pkl.gz")
    assert "train-images" not in str(e.value).split("(plain or .gz")[0]


# how an idx file is broken: (the file, its new bytes from (its old bytes, the folder))
CORRUPT_IDX = {
    "magic": ("train-labels-idx1-ubyte", lambda b, d: (d / "t10k-images-idx3-ubyte").read_bytes()),  # images as labels
    "truncated": ("t10k-images-idx3-ubyte", lambda b, d: b[:500]),
    "header": ("t10k-labels-idx1-ubyte", lambda b, d: b"\0\0"),
    "gzip": ("train-images-idx3-ubyte.gz", lambda b, d: b"garbage" * 20),
    "gzip_truncated": ("train-images-idx3-ubyte.gz", lambda b, d: b[:200]),
}


@pytest.mark.parametrize("how", sorted(CORRUPT_IDX))
def test_mnist_corrupt_idx_file(tmp_path, rng, how):
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 3), _mnist_pixels(rng, 2)
    folder = _write_mnist_idx(tmp_path, x_tr, y_tr, x_te, y_te, gz=(True, False, False, False))
    f, breaks = CORRUPT_IDX[how]
    bad = folder / f
    bad.write_bytes(breaks(bad.read_bytes(), folder))
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    _assert_one_line_fix(e, f"file {bad} (", "corrupt", "download=true")
    assert e.value.__cause__ is not None


def test_mnist_image_and_label_counts_must_agree(tmp_path, rng):
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 3), _mnist_pixels(rng, 2)
    _write_mnist_idx(tmp_path, x_tr, y_tr[:2], x_te, y_te)
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    _assert_one_line_fix(e, "3 images but 2 labels", "train-images-idx3-ubyte", "download=true")


@pytest.mark.parametrize("how", ["truncated", "not_gzip", "two_splits", "0..255", "784"])
def test_mnist_corrupt_pickle(tmp_path, rng, how):
    splits = [_mnist_pixels(rng, 3), _mnist_pixels(rng, 2), _mnist_pixels(rng, 2)]
    path = _write_mnist_pickle(tmp_path, splits)
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif how == "not_gzip":
        path.write_bytes(b"garbage" * 20)
    else:
        data = [(x.reshape(len(x), 784).astype(np.float32) / 256, y.astype(np.int64)) for x, y in splits]
        if how == "two_splits":
            data = data[:2]
        elif how == "0..255":
            data[2] = (data[2][0] * 256, data[2][1])
        else:
            data[1] = (data[1][0][:, :700], data[1][1])
        path.write_bytes(gzip.compress(pickle.dumps(tuple(data))))
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    _assert_one_line_fix(e, str(path), "corrupt", "download=true")
    assert e.value.__cause__ is not None


def test_mnist_labels_out_of_range(tmp_path, rng):
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 3), _mnist_pixels(rng, 2)
    y_te[1] = 10
    _write_mnist_idx(tmp_path, x_tr, y_tr, x_te, y_te)
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    _assert_one_line_fix(e, "mnist test labels lie outside 0..9", "replace")


def test_mnist_download_goes_through_torchvision(tmp_path, rng, monkeypatch):
    root = tmp_path / "new"  # does not exist yet: download creates it
    calls = []
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 4), _mnist_pixels(rng, 2)

    def fake_download_and_extract(url, download_root, filename=None, md5=None, **kw):
        calls.append((url, md5))
        if len(calls) == 4:  # torchvision keeps the .gz and extracts it: the plain files are read
            _write_mnist_idx(root, x_tr, y_tr, x_te, y_te, gz=(False,) * 4)
    monkeypatch.setattr(torchvision.datasets.mnist, "download_and_extract_archive", fake_download_and_extract)
    ds = load_dataset("mnist", root, download=True)
    mnist = torchvision.datasets.MNIST
    assert calls == [(mnist.mirrors[0] + f, md5) for f, md5 in mnist.resources]  # the real MD5s
    assert ds.y_train.tolist() == y_tr.tolist() and ds.x_train.shape == (4, 1, 32, 32)
    load_dataset("mnist", root, download=True)  # files present: no second download
    assert len(calls) == 4


def test_mnist_failed_download(tmp_path, monkeypatch):
    def offline(*a, **kw):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr(torchvision.datasets.mnist, "download_and_extract_archive", offline)
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path, download=True)
    _assert_one_line_fix(e, "downloading mnist", "failed", "no network", str(tmp_path))


def test_mnist_file_check_needs_no_torch(tmp_path, rng):
    """sweeper.run checks a sweep's data before Ray starts in a driver that never imports torch."""
    _write_mnist_pickle(tmp_path / "pkl", [_mnist_pixels(rng, 2)] * 3)
    (x_tr, y_tr), (x_te, y_te) = _mnist_pixels(rng, 2), _mnist_pixels(rng, 2)
    _write_mnist_idx(tmp_path / "idx", x_tr, y_tr, x_te, y_te)
    code = ("import sys; from trainables.datafiles import check_readable, read_raw\n"
            f"for d, n in (({str(tmp_path / 'pkl')!r}, 4), ({str(tmp_path / 'idx')!r}, 2)):\n"
            "    check_readable('mnist', d); (x, y), (xt, yt) = read_raw('mnist', d)\n"
            "    assert x.shape == (n, 1, 28, 28) and y.shape == (n,) and x.dtype.name == 'float32'\n"
            "    assert 0 <= x.min() <= x.max() <= 1 and y.dtype.name == 'int64'\n"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------- digits

def test_digits_fixed_stratified_standardised_split():
    from sklearn.datasets import load_digits

    a, b = load_dataset("digits"), load_dataset("digits")
    assert a.x_train.shape == (1347, 1, 8, 8) and a.x_test.shape == (450, 1, 8, 8)
    assert a.num_classes == 10 and a.y_train.dtype == torch.int64
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)  # fixed split
    assert abs(a.x_train.mean().item()) < 1e-5 and abs(a.x_train.std(correction=0).item() - 1) < 1e-5
    y_all = load_digits().target
    for c in range(10):  # stratified: each class's share of the test set is its overall share
        assert abs((a.y_test == c).sum().item() - 450 * (y_all == c).mean()) <= 1
    # every image is (raw - mean) / std with the training mean and std: undo it from the training
    # minimum (raw 0) and maximum (raw 16) and get back the 1797 real digits, integers 0..16
    lo, hi = a.x_train.min().item(), a.x_train.max().item()
    back = lambda x: x.flatten(1).double().numpy() * (16 / (hi - lo)) - lo * 16 / (hi - lo)  # (N, 64)
    for x in (a.x_train, a.x_test):
        assert np.abs(back(x) - np.rint(back(x))).max() < 1e-3
    raw = load_digits().images.reshape(1797, 64)
    got = np.rint(np.concatenate([back(a.x_train), back(a.x_test)]))
    assert sorted(map(tuple, got)) == sorted(map(tuple, raw))


# ----------------------------------------------------------------------------- errors

def test_unknown_name():
    with pytest.raises(DataError) as e:
        load_dataset("imagenet")
    _assert_one_line_fix(e, "'imagenet'", "cifar10", "svhn", "digits", "mnist")


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "svhn"])
def test_missing_folder(tmp_path, name):
    with pytest.raises(DataError) as e:
        load_dataset(name, tmp_path / "nope")
    _assert_one_line_fix(e, "does not exist", str(tmp_path / "nope"), "download=true")


@pytest.mark.parametrize("name,expected", [
    ("cifar10", ["cifar-10-batches-py", "data_batch_1", "data_batch_5", "test_batch", "batches.meta",
                 "cifar-10-python.tar.gz"]),
    ("cifar100", ["cifar-100-python", "train", "test", "meta", "cifar-100-python.tar.gz"]),
    ("svhn", ["train_32x32.mat", "test_32x32.mat", "http://ufldl.stanford.edu/housenumbers/train_32x32.mat"]),
])
def test_missing_files(tmp_path, name, expected):
    with pytest.raises(DataError) as e:
        load_dataset(name, tmp_path)
    _assert_one_line_fix(e, "missing", str(tmp_path), "download=true", *expected)


def test_missing_file_is_reported_before_any_parsing(tmp_path, rng):
    _write_cifar10(tmp_path, rng)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "data_batch_1").write_bytes(b"garbage")
    (folder / "test_batch").unlink()
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", tmp_path)
    _assert_one_line_fix(e, "missing", "test_batch")
    assert "data_batch_1" not in str(e.value).split("(expected")[0]


@pytest.mark.parametrize("bad", ["data_batch_3", "test_batch", "batches.meta"])
def test_truncated_cifar_pickle(tmp_path, rng, bad):
    _write_cifar10(tmp_path, rng)
    path = tmp_path / "cifar-10-batches-py" / bad
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", tmp_path)
    _assert_one_line_fix(e, str(path), "corrupt", "download=true")
    assert e.value.__cause__ is not None


def test_cifar_labels_out_of_range(tmp_path, rng):
    _write_cifar10(tmp_path, rng, labels_max=100)  # CIFAR-100 labels in the CIFAR-10 folder
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", tmp_path)
    _assert_one_line_fix(e, "outside 0..9", "replace")


@pytest.mark.parametrize("which,content", [("train", b"garbage" * 20), ("test", None)])
def test_corrupt_svhn_mat(tmp_path, rng, which, content):
    _write_svhn(tmp_path, rng)
    path = tmp_path / f"{which}_32x32.mat"
    path.write_bytes(content if content is not None else path.read_bytes()[:3000])  # garbage / truncated
    with pytest.raises(DataError) as e:
        load_dataset("svhn", tmp_path)
    _assert_one_line_fix(e, str(path), "corrupt", "download=true")
    assert e.value.__cause__ is not None


def test_download_goes_through_torchvision(tmp_path, rng, monkeypatch):
    root = tmp_path / "new"  # does not exist yet: download creates it
    calls = []

    def fake_download_and_extract(url, download_root, filename=None, md5=None, **kw):
        calls.append((url, md5))
        _write_cifar10(root, np.random.default_rng(0))
    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", fake_download_and_extract)
    ds = load_dataset("cifar10", root, download=True)
    assert calls == [(torchvision.datasets.CIFAR10.url, torchvision.datasets.CIFAR10.tgz_md5)]
    assert ds.x_train.shape == (10, 3, 32, 32)
    load_dataset("cifar10", root, download=True)  # files present: no second download
    assert len(calls) == 1


def test_svhn_download_checks_the_real_md5(tmp_path, rng, monkeypatch):
    calls = []

    def fake_download_url(url, root, filename=None, md5=None, **kw):
        calls.append((filename, md5))
        scipy.io.savemat(tmp_path / filename, {"X": np.zeros((32, 32, 3, 2), np.uint8),
                                               "y": np.array([[1], [10]], np.uint8)})
    monkeypatch.setattr(torchvision.datasets.svhn, "download_url", fake_download_url)
    ds = load_dataset("svhn", tmp_path, download=True)
    real = torchvision.datasets.SVHN.split_list
    assert calls == [(real[s][1], real[s][2]) for s in ("train", "test")]
    assert ds.y_train.tolist() == [1, 0]


def test_failed_download(tmp_path, monkeypatch):
    def offline(*a, **kw):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", offline)
    with pytest.raises(DataError) as e:
        load_dataset("cifar100", tmp_path, download=True)
    _assert_one_line_fix(e, "failed", "no network", "cifar-100-python.tar.gz", str(tmp_path))


# ----------------------------------------------------------------------------- labeled split

def test_labeled_split_balanced_disjoint_reproducible():
    y = torch.tensor(np.random.default_rng(3).integers(0, 10, 500))
    lab, unl = labeled_split(y, 40, 10, seed=7)
    assert lab.dtype == torch.int64 and unl.dtype == torch.int64
    assert torch.bincount(y[lab], minlength=10).tolist() == [4] * 10
    assert len(set(lab.tolist()) & set(unl.tolist())) == 0
    assert sorted(lab.tolist() + unl.tolist()) == list(range(500))
    lab2, unl2 = labeled_split(y, 40, 10, seed=7)
    assert torch.equal(lab, lab2) and torch.equal(unl, unl2)
    assert not torch.equal(lab, labeled_split(y, 40, 10, seed=8)[0])


def test_labeled_split_is_uniform_within_a_class():
    y = torch.arange(60) % 3  # 20 images per class, 5 labels per class
    counts = torch.zeros(60)
    seeds = 400
    for s in range(seeds):
        counts[labeled_split(y, 15, 3, seed=s)[0]] += 1
    p = 5 / 20  # every image equally likely: binomial(400, 1/4), sd ~ 8.7
    assert (counts - seeds * p).abs().max() < 5 * (seeds * p * (1 - p)) ** 0.5


def test_labeled_split_errors():
    y = torch.tensor([0] * 10 + [1] * 2)
    with pytest.raises(DataError) as e:
        labeled_split(y, 6, 2, seed=0)
    _assert_one_line_fix(e, "class 1 has 2", "lower num_labels")
    with pytest.raises(DataError) as e:
        labeled_split(y, 3, 2, seed=0)
    _assert_one_line_fix(e, "multiple of 2")


# SVHN's training set per digit 0-9 (73,257 images; the .mat files label digit 0 as 10).
SVHN_TRAIN_PER_DIGIT = [4948, 13861, 10585, 8497, 7458, 6882, 5727, 5595, 5045, 4659]


@pytest.mark.parametrize("num_labels, expected", [
    # floor(num_labels * n_c / 73257) per class, then the leftover one each to digits 0, 1, ...
    (250, [17, 48, 37, 29, 26, 23, 19, 19, 17, 15]),    # floors 16 47 36 28 25 23 19 19 17 15 (245) + 5
    (1000, [68, 190, 145, 116, 102, 94, 78, 76, 68, 63]),  # floors 67 189 144 115 101 93 78 76 68 63 (994) + 6
])
def test_frequency_rule_gives_the_authors_svhn_counts(num_labels, expected):
    """label_rule=frequency is the authors' extract_data_by_total_counts: SVHN's labeled subset follows its
    class frequencies, as computed by hand above; the drawn subset has exactly those per-class counts."""
    y = torch.cat([torch.full((n,), c) for c, n in enumerate(SVHN_TRAIN_PER_DIGIT)])
    y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(0))]
    assert label_counts(y, num_labels, 10, "frequency") == expected
    lab, unl = labeled_split(y, num_labels, 10, seed=3, rule="frequency")
    assert torch.bincount(y[lab], minlength=10).tolist() == expected
    assert len(lab) + len(unl) == len(y)
    assert label_counts(y, 1000, 10, "balanced") == [100] * 10


def test_table_svhn_paper_preset_draws_by_frequency_and_quick_presets_balanced():
    from search_spaces import get_sweep
    from trainables.config import TrainConfig

    paper = TrainConfig.from_dict(get_sweep("table_svhn", "paper").trials()[0])
    assert paper.label_rule == "frequency"
    for name in ("table_svhn", "table_cifar", "ablation_radius"):
        assert TrainConfig.from_dict(get_sweep(name, "quick").trials()[0]).label_rule == "balanced"


# Training images per class in the standard files: CIFAR-10 (data batches 1-5), CIFAR-100, SVHN (train_32x32.mat).
TRAIN_PER_CLASS = {"cifar10": [5000] * 10, "cifar100": [500] * 100, "svhn": SVHN_TRAIN_PER_DIGIT}


def _authors_subset(y: np.ndarray, num_labels: int, num_classes: int, seed: int) -> list[int]:
    """The authors' labeled ids, from the rule's description: class c gets floor(num_labels * n_c / n) labels
    (the leftovers one each to the lowest class ids); numpy's RandomState(seed) shuffles the ids 0..n-1
    once, and a walk over the shuffled ids takes each id whose class still needs labels, in walk order."""
    n = len(y)
    need = [num_labels * int(np.sum(y == c)) // n for c in range(num_classes)]
    for c in range(num_labels - sum(need)):
        need[c] += 1
    ids = list(range(n))
    np.random.RandomState(seed).shuffle(ids)
    taken = []
    for i in ids:
        if sum(need) == 0:
            break
        if need[y[i]] > 0:
            taken.append(i)
            need[y[i]] -= 1
    return taken


def test_paper_presets_label_the_authors_images_in_their_order():
    """Every paper-preset trial on CIFAR-10/100 or SVHN labels the ids the authors' rule picks (re-implemented
    above from its description), in the same order, on a label array with the data set's class frequencies.
    The quick presets keep the per-class draw, a new subset per seed."""
    from search_spaces import get_sweep, names, presets
    from trainables.config import TrainConfig
    from trainables.trainer import splits

    seen = {}
    for name in names():
        if "paper" not in presets(name):
            continue
        for trial in get_sweep(name, "paper").trials():
            cfg = TrainConfig.from_dict(trial)
            if cfg.dataset in TRAIN_PER_CLASS and cfg.method != "labelspreading":
                assert cfg.label_pick == "shuffle_walk" and cfg.label_seed == 1003, (name, trial)
                if cfg.n_val == 0:  # the paper's protocol (the searches hold a validation split out)
                    seen.setdefault((cfg.dataset, cfg.num_labels), cfg)
    assert {("cifar10", 1000), ("cifar10", 250), ("svhn", 250), ("svhn", 500), ("svhn", 1000)} <= set(seen)
    for (dataset, num_labels), cfg in sorted(seen.items()):
        per_class = TRAIN_PER_CLASS[dataset]
        y = np.random.RandomState(7).permutation(np.repeat(np.arange(len(per_class)), per_class))  # (N,)
        idx_l, idx_u, idx_val = splits(cfg, torch.from_numpy(y))
        assert idx_l.tolist() == _authors_subset(y, num_labels, len(per_class), 1003), (dataset, num_labels)
        assert len(idx_val) == 0 and set(idx_l.tolist()) | set(idx_u.tolist()) == set(range(len(y)))
    quick = TrainConfig.from_dict(get_sweep("table_cifar", "quick").trials()[0])
    assert quick.label_pick == "per_class" and quick.label_seed == -1


def test_shuffle_walk_skips_validation_ids_and_keeps_the_walk_order():
    """With images held out, the walk passes over them: the labeled ids are the walk over the remaining
    shuffled ids, checked against the loop on a tiny array by hand-filtering the held-out ids."""
    y = np.array([0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 2, 2])
    val = [0, 3, 8]
    lab, unl = labeled_split(torch.from_numpy(y), 6, 3, seed=5, val_idx=val, pick="shuffle_walk")
    ids = np.arange(len(y))
    np.random.RandomState(5).shuffle(ids)
    need, expect = [2, 2, 2], []
    for i in ids:
        if i not in val and need[y[i]] > 0:
            expect.append(int(i))
            need[y[i]] -= 1
    assert lab.tolist() == expect
    assert sorted(lab.tolist() + unl.tolist() + val) == list(range(len(y)))
    with pytest.raises(DataError, match="label_pick"):
        labeled_split(torch.from_numpy(y), 6, 3, seed=5, pick="walk")


# ----------------------------------------------------------------------------- augment

def _shift(img, dy, dx, pad="zero"):
    """Reference translation out[i, j] = img[i - dy, j - dx] of one image (C, H, W), pixel by pixel;
    outside the image: zero, or (pad="reflect") the mirror about the edge pixel, edge not repeated."""
    out = torch.zeros_like(img)
    H, W = img.shape[1:]
    mirror = lambda k, n: -k if k < 0 else (2 * (n - 1) - k if k >= n else k)
    for i in range(H):
        for j in range(W):
            if 0 <= i - dy < H and 0 <= j - dx < W:
                out[:, i, j] = img[:, i - dy, j - dx]
            elif pad == "reflect":
                out[:, i, j] = img[:, mirror(i - dy, H), mirror(j - dx, W)]
    return out


def test_augment_translation_moves_a_pixel_by_at_most_translate():
    B, t = 2000, 2
    x = torch.zeros(B, 1, 9, 9)
    x[:, 0, 4, 4] = 1.0
    out = augment(x, t, False, torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    assert torch.equal(out.sum(dim=(1, 2, 3)), torch.ones(B))  # the pixel stays inside, nothing else appears
    pos = out[:, 0].flatten(1).argmax(1)
    dy, dx = pos // 9 - 4, pos % 9 - 4
    assert dy.abs().max() <= t and dx.abs().max() <= t
    assert len(set(zip(dy.tolist(), dx.tolist()))) == (2 * t + 1) ** 2  # every shift occurs


@pytest.mark.parametrize("pad", ["zero", "reflect"])
def test_augment_matches_reference_shift_and_flip(pad):
    B, t = 64, 3
    g = torch.Generator().manual_seed(1)
    content = torch.randn(B, 2, 9, 9, generator=g)
    marker = torch.zeros(B, 1, 9, 9)
    marker[:, 0, 4, 4] = 1.0  # centre pixel: flip-invariant, never a mirror source for t=3, reads off (dy, dx)
    out = augment(torch.cat([marker, content], 1), t, True, torch.Generator().manual_seed(2), pad=pad)
    pos = out[:, 0].flatten(1).argmax(1)
    flips = 0
    for b in range(B):
        dy, dx = int(pos[b] // 9 - 4), int(pos[b] % 9 - 4)
        plain, mirrored = _shift(content[b], dy, dx, pad), _shift(content[b].flip(2), dy, dx, pad)
        assert torch.equal(out[b, 1:], plain) or torch.equal(out[b, 1:], mirrored)
        flips += torch.equal(out[b, 1:], mirrored)
    assert 10 < flips < 54  # p = 0.5 over 64 samples


def test_augment_flip_only_and_identity():
    x = torch.randn(1000, 3, 4, 5)
    out = augment(x, 0, True, torch.Generator().manual_seed(0))
    same = (out == x).flatten(1).all(1)
    mirrored = (out == x.flip(3)).flatten(1).all(1)
    assert torch.all(same | mirrored)
    assert 0.43 < mirrored.float().mean().item() < 0.57
    assert augment(x, 0, False, torch.Generator()) is x


def test_augment_reproducible_per_generator_seed():
    x = torch.randn(50, 3, 8, 8)
    a = augment(x, 2, True, torch.Generator().manual_seed(5))
    b = augment(x, 2, True, torch.Generator().manual_seed(5))
    c = augment(x, 2, True, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError):
        augment(x, -1, False, torch.Generator())
    with pytest.raises(ValueError, match="pad"):
        augment(x, 2, False, torch.Generator(), pad="wrap")
    with pytest.raises(ValueError, match="reflect"):
        augment(x, 8, False, torch.Generator())  # reflecting needs translate < 8 pixels
    assert augment(x, 8, False, torch.Generator(), pad="zero").shape == x.shape


# ----------------------------------------------------------------------------- Batcher

def test_batcher_epochs_cover_each_index_once():
    lab, unl = torch.tensor([3, 8, 11, 20]), torch.arange(100, 110)
    bat = Batcher(lab, unl, batch_labeled=10, batch_unlabeled=3, generator=torch.Generator().manual_seed(0))
    ls, us = [], []
    for _ in range(10):
        idx_l, idx_u = bat.next()
        assert idx_l.shape == (10,) and idx_u.shape == (3,) and idx_l.dtype == torch.int64
        ls.append(idx_l)
        us.append(idx_u)
    u = torch.cat(us)  # 30 draws = 3 epochs of 10
    epochs = [sorted(u[i:i + 10].tolist()) for i in (0, 10, 20)]
    assert all(e == list(range(100, 110)) for e in epochs)
    assert not torch.equal(u[:10], u[10:20])  # a fresh permutation per epoch
    l = torch.cat(ls)  # 100 draws = 25 epochs of the 4 labeled indices
    assert all(sorted(l[i:i + 4].tolist()) == [3, 8, 11, 20] for i in range(0, 100, 4))


def test_batcher_state_dict_restores_the_continuation():
    lab, unl = torch.arange(7), torch.arange(7, 50)
    a = Batcher(lab, unl, 5, 9, torch.Generator().manual_seed(0))
    for _ in range(6):
        a.next()
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)  # as the trainer checkpoints it
    expected = [a.next() for _ in range(12)]
    b = Batcher(lab, unl, 5, 9, torch.Generator().manual_seed(123))
    b.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
    for (el, eu), (gl, gu) in zip(expected, [b.next() for _ in range(12)]):
        assert torch.equal(el, gl) and torch.equal(eu, gu)
    with pytest.raises(ValueError):
        Batcher(lab, unl[:-1], 5, 9, torch.Generator()).load_state_dict(a.state_dict())


def test_batcher_without_unlabeled_batch():
    bat = Batcher(torch.arange(5), torch.arange(5, 9), 3, 0, torch.Generator().manual_seed(0))
    idx_l, idx_u = bat.next()
    assert idx_l.shape == (3,) and idx_u.shape == (0,) and idx_u.dtype == torch.int64
    with pytest.raises(ValueError):
        Batcher(torch.arange(5), torch.arange(0), 3, 2, torch.Generator())


# ----------------------------------------------------------------------------- CUDA (where present)

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_paths(tmp_path, rng):
    x_tr, y_tr, x_te, y_te = _write_cifar10(tmp_path, rng)
    cpu, gpu = load_dataset("cifar10", tmp_path), load_dataset("cifar10", tmp_path, device="cuda")
    assert gpu.x_train.is_cuda and gpu.y_test.is_cuda
    scale = gpu.x_test.abs().max().item()
    torch.testing.assert_close(gpu.x_test.cpu(), cpu.x_test, atol=1e-4 * scale, rtol=0)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.zeros(500, 1, 9, 9, device="cuda")
    x[:, 0, 4, 4] = 1
    out = augment(x, 2, True, g)
    pos = out[:, 0].flatten(1).argmax(1)
    assert out.is_cuda and (pos // 9 - 4).abs().max() <= 2 and (pos % 9 - 4).abs().max() <= 2
    bat = Batcher(torch.arange(4), torch.arange(4, 10), 3, 5, torch.Generator(device="cuda").manual_seed(0))
    for _ in range(3):
        idx_l, idx_u = bat.next()
        assert idx_l.is_cuda and idx_u.is_cuda
        torch.testing.assert_close(gpu.x_train[idx_u].cpu(), cpu.x_train[idx_u.cpu()], atol=1e-4 * scale, rtol=0)
    torch.cuda.synchronize()
