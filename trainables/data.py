"""Data: the four data sets, the labeled subset, batch augmentation and the batch index streams.

The whole data set lives on the training device (airbench style): `load_dataset` returns
float32 tensors on `device`, a `Batcher` yields index tensors into them, and `augment`
translates and flips a batch with tensor ops. Nothing here loops over images in Python.
The files themselves (existence, parsing, raw arrays) are `datafiles.py`'s, which needs no torch.

    digits    scikit-learn's bundled 8x8 digits (offline), fixed split 1347/450, standardised with one
              global mean and std
    mnist     60k/10k 28x28 from data_dir/MNIST/raw (idx, torchvision) or data_dir/mnist.pkl.gz, [0,1],
              zero-padded to 32x32, standardised with one global mean and std;
              the last 10,000 training images are the classic validation split
    cifar10   torchvision CIFAR10 from data_dir/cifar-10-batches-py, [0,1] then ZCA (the authors');
              cifar_norm="channel": per-channel mean/std of the training pixels (FixMatch)
    cifar100  torchvision CIFAR100 from data_dir/cifar-100-python, the same choices
    svhn      torchvision SVHN from data_dir/{train,test}_32x32.mat, per-feature standardisation
              (authors' input_norm="standard"); svhn_norm="image": per image (nothing fitted)

Every fitted statistic (ZCA's mean and W, the standardisations' means and stds) comes from the
images a run may train on, labeled or unlabeled: the training set minus the n_val validation
images (`fit_indices`), so validation is as unseen as the test set. The authors fit on their whole
train.npz, which is the same set: their runs hold nothing out (n_val = 0 reproduces them).

    pytest tests/test_data.py -q
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trainables.datafiles import NAMES, DataError, read_raw

# ZCA regulariser, added to the eigenvalues of the covariance of [0,1]-scaled pixels. The
# paper's ZCA (Laine & Aila, Mean Teacher) uses about 1e-5: CIFAR-10's 3072 eigenvalues
# run from ~50 down to ~1e-6, so it damps only the noisiest few hundred directions (which
# would otherwise be amplified ~1000x) and leaves the image structure white.
ZCA_EPS = 1e-5
DIGITS_TEST_SIZE = 450  # fixed stratified split of the 1797 digits: 1347 train / 450 test
# that split's indices (write_digits_split), so that loading the digits imports no scikit-learn: its import
# (scipy with it) costs every trial process seconds, more than the rest of a short trial's start
DIGITS_SPLIT = Path(__file__).with_name("digits_split.json")


@dataclass
class Dataset:
    name: str
    x_train: torch.Tensor  # (N, C, H, W) float32, preprocessed
    y_train: torch.Tensor  # (N,) int64 in [0, num_classes)
    x_test: torch.Tensor   # (M, C, H, W) float32, preprocessed with the training statistics
    y_test: torch.Tensor   # (M,) int64
    num_classes: int
    # (mean, std) with x = (pixel - mean) / std, pixels 0..255, each (C, 1, 1) or (C, H, W): the data sets
    # standardised per channel or per feature from 8-bit pixels (FixMatch's RA goes back to them); else None
    pixels: tuple[torch.Tensor, torch.Tensor] | None = None

    def to(self, device) -> "Dataset":
        """A copy whose tensors live on `device`."""
        pixels = None if self.pixels is None else tuple(t.to(device) for t in self.pixels)
        return dataclasses.replace(self, x_train=self.x_train.to(device), y_train=self.y_train.to(device),
                                   x_test=self.x_test.to(device), y_test=self.y_test.to(device), pixels=pixels)


# ----------------------------------------------------------------------------- loading

def load_dataset(name: str, data_dir="./data", download: bool = False, device="cpu", *,
                 svhn_norm: str = "feature", n_val: int = 0, cifar_norm: str = "zca") -> Dataset:
    """Load, preprocess and place on `device` one of NAMES; DataError (with the fix) if it cannot.

    n_val: validation images the run holds out (TrainConfig.n_val, validation_indices); the
    preprocessing is fitted on the other training images only. svhn_norm (SVHN only): "feature" =
    per-feature standardisation (the authors' choice), "image" = per-image standardisation.
    cifar_norm (CIFAR-10/100 only): "zca" = ZCA whitening (the authors'), "channel" = per-channel
    standardisation (FixMatch's).
    """
    if svhn_norm not in ("feature", "image"):
        raise ValueError(f"unknown svhn_norm {svhn_norm!r}; choose 'feature' or 'image'")
    if cifar_norm not in ("zca", "channel"):
        raise ValueError(f"unknown cifar_norm {cifar_norm!r}; choose 'zca' or 'channel'")
    if name not in NAMES:
        raise DataError(f"unknown data set {name!r}; choose one of {list(NAMES)}")
    device = torch.device(device)
    if name == "digits":
        return _load_digits(n_val).to(device)
    num_classes = 100 if name == "cifar100" else 10
    (x_tr, y_tr), (x_te, y_te) = [(torch.from_numpy(x), torch.from_numpy(y))  # uint8 (N,3,32,32), int64 (N,)
                                  for x, y in read_raw(name, data_dir, download)]
    root = Path(data_dir).expanduser()
    for split, y in (("training", y_tr), ("test", y_te)):  # before the expensive preprocessing
        if y.numel() and (y.min() < 0 or y.max() >= num_classes):
            raise DataError(f"{name} {split} labels lie outside 0..{num_classes - 1} in {root}; "
                            f"the files belong to another data set: replace them (or use --set download=true)")
    fit = fit_indices(name, len(y_tr), n_val).to(device) if n_val else None  # (N - n_val,); None: all
    on_fit = (lambda x: x) if fit is None else (lambda x: x[fit])  # the images a run may train on
    pixels = None
    if name == "svhn" and svhn_norm == "image":
        x_tr, x_te = per_image_standardize(x_tr.to(device)), per_image_standardize(x_te.to(device))
    elif name == "svhn":
        x_tr = x_tr.to(device)
        mean, std = fit_standardization(on_fit(x_tr))
        x_tr, x_te = standardize(x_tr, mean, std), standardize(x_te.to(device), mean, std)
        pixels = (mean, std.clamp(min=STD_FLOOR))
    elif name == "mnist":  # float32 (N, 1, 28, 28) in [0, 1] -> (N, 1, 32, 32) standardised
        x_tr, x_te = pad_and_standardize(x_tr.to(device), x_te.to(device), fit=fit)
    elif cifar_norm == "channel":  # (N, 3, 32, 32) uint8 -> (x - mean_c) / std_c, the same in any pixel unit
        x_tr = x_tr.to(device)
        mean, std = fit_channel_standardization(on_fit(x_tr))  # (3, 1, 1) each
        x_tr, x_te = standardize(x_tr, mean, std), standardize(x_te.to(device), mean, std)
        pixels = (mean, std.clamp(min=STD_FLOOR))
    else:
        x_tr = x_tr.to(device).float().div_(255)  # (N, 3, 32, 32) in [0, 1]
        x_te = x_te.to(device).float().div_(255)
        mean, W = fit_zca(on_fit(x_tr).flatten(1))
        x_tr, x_te = apply_zca(x_tr, mean, W), apply_zca(x_te, mean, W)
    return Dataset(name, x_tr, y_tr.to(device), x_te, y_te.to(device), num_classes, pixels)


def digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1797 8x8 digits as load_digits gives them, images (1797, 8, 8) float64 in 0..16 and
    labels (1797,) int64, read from the digits.csv.gz it ships (64 pixel columns, then the label) without
    importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if path is None or not path.is_file():
        raise DataError("the digits come with scikit-learn, which is not installed here (or lacks "
                        "datasets/data/digits.csv.gz); pip install scikit-learn")
    data = np.loadtxt(path, delimiter=",")  # (1797, 65), as sklearn.datasets.load_digits reads it
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)


def write_digits_split(path: Path = DIGITS_SPLIT) -> dict:
    """The fixed split's indices into digits_raw(), made with scikit-learn's train_test_split (stratified,
    random_state 0) and written to `path`; tests/test_data.py checks the stored file against it.
        python -c "from trainables.data import write_digits_split; write_digits_split()"
    """
    from sklearn.model_selection import train_test_split

    _, y = digits_raw()
    train, test = train_test_split(np.arange(len(y)), test_size=DIGITS_TEST_SIZE, stratify=y, random_state=0)
    split = {"test_size": DIGITS_TEST_SIZE, "random_state": 0, "train": train.tolist(), "test": test.tolist()}
    path.write_text(json.dumps(split, separators=(",", ":")) + "\n")
    return split


def _load_digits(n_val: int = 0) -> Dataset:
    """scikit-learn's 1797 8x8 digits (values 0..16), fixed stratified split, standardised with the
    global mean and std of the training images outside the n_val validation images."""
    x, y = digits_raw()                                      # (1797, 8, 8) float64, (1797,) int64
    split = json.loads(DIGITS_SPLIT.read_text())
    train, test = np.array(split["train"]), np.array(split["test"])  # (1347,), (450,)
    x_tr, x_te, y_tr, y_te = x[train], x[test], y[train], y[test]
    fit = fit_indices("digits", len(y_tr), n_val).numpy()
    mean, std = x_tr[fit].mean(), x_tr[fit].std()  # global statistics
    prep = lambda a: torch.from_numpy(((a - mean) / std).astype(np.float32)).unsqueeze(1)  # (N, 1, 8, 8)
    return Dataset("digits", prep(x_tr), torch.from_numpy(y_tr), prep(x_te), torch.from_numpy(y_te), 10)


# ----------------------------------------------------------------------------- preprocessing

def fit_zca(x: torch.Tensor, eps: float = ZCA_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """ZCA of the rows of x (N, D): mean (D,) and symmetric W = (C + eps I)^(-1/2) (D, D), float32.

    C = (x - mean)^T (x - mean) / N, accumulated and decomposed in float64 on x's device.
    With fewer rows than dimensions the eigenvectors come from the N x N Gram matrix (same W,
    much cheaper): the directions the data do not span have eigenvalue 0.
    """
    N, D = x.shape
    mean = x.double().mean(0)  # (D,)
    if N >= D:
        C = torch.zeros(D, D, dtype=torch.float64, device=x.device)
        for chunk in x.split(4096):  # float64 copies of 4096 rows at a time
            xc = chunk.double() - mean  # (n, D)
            C += xc.T @ xc
        lam, V = torch.linalg.eigh(C / N)  # (D,), (D, D)
        W = (V * (lam.clamp(min=0) + eps).rsqrt()) @ V.T
    else:
        xc = x.double() - mean  # (N, D)
        lam, U = torch.linalg.eigh(xc @ xc.T / N)  # (N,), (N, N): the nonzero eigenvalues of C
        keep = lam > lam.max().clamp(min=0) * 1e-10
        lam, U = lam[keep], U[:, keep]  # (k,), (N, k)
        V = xc.T @ U / (N * lam).sqrt()  # (D, k) orthonormal eigenvectors of C
        W = (V * ((lam + eps).rsqrt() - eps ** -0.5)) @ V.T
        W += torch.eye(D, dtype=torch.float64, device=x.device) * eps ** -0.5
    W = (W + W.T) / 2  # exactly symmetric
    return mean.float(), W.float()


def apply_zca(x: torch.Tensor, mean: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Whiten images x (N, C, H, W) with fit_zca's (mean, W) of their flattened (N, C*H*W) form."""
    return ((x.flatten(1) - mean) @ W).view_as(x)


def per_image_standardize(x: torch.Tensor) -> torch.Tensor:
    """Each image minus its mean over all pixels and channels, divided by its std.

    x holds raw 0..255 values (any dtype). As tf.image.per_image_standardization, the std is
    floored at 1/sqrt(pixels*channels) (in raw units: it only guards against dividing by
    zero), so a constant image becomes zeros, not NaN.
    """
    x = x.float()
    flat = x.flatten(1)  # (N, D)
    flat = flat - flat.mean(1, keepdim=True).round()  # exact for integer pixels; keeps float32 precise
    mean = flat.mean(1, keepdim=True)  # (N, 1)
    std = flat.std(1, correction=0, keepdim=True).clamp(min=1 / math.sqrt(flat.shape[1]))
    return ((flat - mean) / std).view_as(x)


MNIST_PAD = 2  # zero pixels added on each side: 28x28 -> 32x32, ConvNet-13's input size


def pad_and_standardize(x_tr: torch.Tensor, x_te: torch.Tensor, pad: int = MNIST_PAD,
                        chunk: int = 4096, fit: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST: zero-pad both sets by `pad` pixels per side (zero = the black background), then
    (x - mean) / std with ONE global mean and std (ddof 0) of the padded training images x_tr[fit]
    (fit: row indices, None = all), float32.

    The statistics are accumulated in float64, `chunk` images at a time, on x_tr's device; the
    padding becomes the standardised background value -mean/std, like the digit's own margins.
    """
    x_tr = F.pad(x_tr.float(), (pad, pad, pad, pad))  # (N, 1, H+2p, W+2p)
    x_te = F.pad(x_te.float(), (pad, pad, pad, pad))  # (M, 1, H+2p, W+2p)
    x_fit = x_tr if fit is None else x_tr[fit]
    n = x_fit.numel()
    if n == 0:
        raise DataError("standardising mnist needs at least one training image")
    mean = sum(c.double().sum() for c in x_fit.split(chunk)) / n
    var = sum((c.double() - mean).pow(2).sum() for c in x_fit.split(chunk)) / n  # two passes: no cancellation
    std = float(var.sqrt().clamp(min=STD_FLOOR))
    mean = float(mean)
    return x_tr.sub_(mean).div_(std), x_te.sub_(mean).div_(std)


STD_FLOOR = 1e-8  # per-feature std floor, as the authors' Standardization (np.clip(std, 1e-8, 1e8))


def fit_standardization(x: torch.Tensor, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and std (ddof 0) over the images x (N, C, H, W): two (C, H, W) float32 tensors.

    The authors' `Standardization.fit` (np.mean / np.std over axis 0: one value per pixel and
    channel). Accumulated in float64, `chunk` images at a time, on x's device; x may be uint8.
    """
    N = x.shape[0]
    if N == 0:
        raise DataError("per-feature standardisation needs at least one training image")
    mean = sum(c.double().sum(0) for c in x.split(chunk)) / N  # (C, H, W)
    var = sum((c.double() - mean).pow(2).sum(0) for c in x.split(chunk)) / N  # two passes: no cancellation
    return mean.float(), var.sqrt().float()


def fit_channel_standardization(x: torch.Tensor, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std (ddof 0) over every image and pixel of x (N, C, H, W): two (C, 1, 1)
    float32 tensors, in x's units (x may be uint8).

    FixMatch's `compute_mean_std` (google-research/fixmatch libml/data.py: mean over axes N, H, W of
    each channel, over the labeled and unlabeled training images). Accumulated in float64, `chunk`
    images at a time, on x's device, in two passes (no cancellation).
    """
    N, C = x.shape[:2]
    if N == 0:
        raise DataError("per-channel standardisation needs at least one training image")
    n = x[:, 0].numel()  # values per channel: N * H * W
    mean = sum(c.double().sum((0, 2, 3)) for c in x.split(chunk)) / n  # (C,)
    var = sum((c.double() - mean[:, None, None]).pow(2).sum((0, 2, 3)) for c in x.split(chunk)) / n  # (C,)
    return mean.float().view(C, 1, 1), var.sqrt().float().view(C, 1, 1)


def standardize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(x - mean) / max(std, STD_FLOOR), float32: x (N, C, H, W), mean and std (C, H, W) per feature or
    (C, 1, 1) per channel."""
    return x.float().sub_(mean).div_(std.clamp(min=STD_FLOOR))


# ----------------------------------------------------------------------------- labeled subset

VAL_SEED = 2021  # the validation split's own seed: the same split for every trial of a data set


def validation_indices(dataset: str, n_train: int, val_size: int) -> torch.Tensor:
    """The held-out validation images of a data set: sorted int64 indices into its training set.

    A fixed rule, independent of the trial's seed, so every trial of a data set holds out the same
    images (the practice of Oliver et al. 2018, "Realistic Evaluation of Deep Semi-Supervised
    Learning Algorithms": a random validation subset of the training set, never trained on):
      mnist   the LAST val_size training images (with 10,000: the classic mnist.pkl.gz validation split)
      others  the first val_size of a random permutation drawn with VAL_SEED
    """
    if not 0 <= val_size < n_train:
        raise DataError(f"val_size={val_size} must lie in [0, {n_train}) for the {n_train} training images of "
                        f"{dataset}; lower val_size")
    if dataset == "mnist":
        return torch.arange(n_train - val_size, n_train)
    perm = torch.randperm(n_train, generator=torch.Generator().manual_seed(VAL_SEED))
    return perm[:val_size].sort().values


def fit_indices(dataset: str, n_train: int, n_val: int) -> torch.Tensor:
    """The training images a run may train on, labeled or unlabeled: sorted int64 indices of every
    image outside validation_indices(dataset, n_train, n_val). Preprocessing is fitted on these."""
    keep = torch.ones(n_train, dtype=torch.bool)
    if n_val:
        keep[validation_indices(dataset, n_train, n_val)] = False
    return keep.nonzero().squeeze(1)


def label_counts(y, num_labels: int, num_classes: int, rule: str = "balanced") -> list[int]:
    """Labels per class of a labeled subset of num_labels images (y: every training label).

    balanced   num_labels / num_classes each (num_labels must be a multiple of num_classes)
    frequency  the authors' extract_data_by_total_counts (create_ssl_data): class c gets
               floor(num_labels * n_c / n), n_c its images among all n training images, and the
               num_labels - sum of those floors left over go one each to the lowest class ids.
    """
    if rule == "balanced":
        if num_labels < num_classes or num_labels % num_classes:
            raise DataError(f"num_labels={num_labels} is not a positive multiple of the {num_classes} classes; "
                            f"a balanced labeled subset needs a multiple of {num_classes} (or label_rule=frequency)")
        return [num_labels // num_classes] * num_classes
    if rule != "frequency":
        raise DataError(f"unknown label_rule {rule!r}; choose balanced or frequency")
    n_c = torch.bincount(torch.as_tensor(y).cpu().long(), minlength=num_classes)  # (K,)
    counts = [int(num_labels * int(k) // len(y)) for k in n_c]  # floor, in integers
    for c in range(num_labels - sum(counts)):  # fewer than num_classes left over
        counts[c] += 1
    return counts


def labeled_split(y, num_labels: int, num_classes: int, seed: int,
                  val_idx=None, rule: str = "balanced", pick: str = "per_class") -> tuple[torch.Tensor, torch.Tensor]:
    """Labeled subset (label_counts(y, ...) images per class, chosen with `seed` by `pick`) and the rest.

    pick: per_class     a torch.randperm of each class's images (class by class, one generator), its
                        first label_counts[c] taken
          shuffle_walk  the authors' rule (shuffle_walk_ids): one numpy RandomState(seed) shuffle of all ids
    val_idx: validation indices (validation_indices) that are neither labeled nor unlabeled; the
    frequency rule's class shares count every training image, as the authors' (who hold none out).
    Returns (labeled_idx, unlabeled_idx): int64 CPU tensors, disjoint, together all of range(len(y))
    except val_idx; labeled_idx sorted (per_class) or in the walk's order (shuffle_walk, the order of the
    authors' labeled_ids), unlabeled_idx sorted.
    """
    if pick not in ("per_class", "shuffle_walk"):
        raise DataError(f"unknown label_pick {pick!r}; choose per_class or shuffle_walk")
    y = torch.as_tensor(y).cpu()
    held_out = torch.zeros(len(y), dtype=torch.bool)
    if val_idx is not None:
        held_out[torch.as_tensor(val_idx, dtype=torch.int64).cpu()] = True
    if y.numel() and (y.min() < 0 or y.max() >= num_classes):
        raise DataError(f"labels lie outside 0..{num_classes - 1}; pass the data set's num_classes")
    counts = label_counts(y, num_labels, num_classes, rule)
    for c, n in enumerate(counts):
        n_c = int(((y == c) & ~held_out).sum())
        if n_c < n:
            raise DataError(f"class {c} has {n_c} training images (outside the validation split), fewer "
                            f"than the {n} labels that num_labels={num_labels} asks of it; "
                            f"lower num_labels or val_size")
    if pick == "shuffle_walk":
        labeled = shuffle_walk_ids(y, counts, seed, held_out)  # (num_labels,) in walk order
    else:
        g = torch.Generator().manual_seed(seed)
        picked = []
        for c, n in enumerate(counts):
            idx_c = ((y == c) & ~held_out).nonzero().squeeze(1)  # (n_c,) outside the validation split
            picked.append(idx_c[torch.randperm(len(idx_c), generator=g)[:n]])
        labeled = torch.cat(picked).sort().values  # (num_labels,)
    is_unlabeled = ~held_out
    is_unlabeled[labeled] = False
    return labeled, is_unlabeled.nonzero().squeeze(1)


def unlabeled_with_labeled(labeled_idx: torch.Tensor, unlabeled_idx: torch.Tensor) -> torch.Tensor:
    """FixMatch's unlabeled set: the labeled images too (their scripts/create_unlabeled.py writes the whole
    training set as the unlabeled one). Sorted int64 (len(labeled_idx) + len(unlabeled_idx),)."""
    return torch.cat([labeled_idx, unlabeled_idx]).sort().values


def shuffle_walk_ids(y: torch.Tensor, counts: list[int], seed: int, held_out: torch.Tensor) -> torch.Tensor:
    """The authors' labeled ids (my_utils/python_utils/data/extraction.py, extract_data_by_class_counts with
    shuffle=True): ids = arange(N) shuffled in place by numpy.random.RandomState(seed).shuffle (the
    legacy stream, frozen by numpy, so the same ids on any machine), then walked in that order, each id
    taken while its class still needs labels, until counts[c] per class are taken. Ids held out for
    validation are skipped (the authors hold none out). y (N,) int64 CPU; returns (sum(counts),) int64
    in the walk's order. Vectorised: an id is taken iff its rank among its class's ids in the shuffled
    order is below counts[class], which is exactly what the walk takes."""
    ids = np.arange(len(y))
    np.random.RandomState(seed).shuffle(ids)  # the ids, not the images: the arrays keep their file order
    keep = ~held_out.numpy()[ids]
    ids = ids[keep]                            # (M,) shuffled ids outside the validation split
    cls = y.numpy()[ids]                       # (M,) their classes
    order = np.argsort(cls, kind="stable")     # class by class, each in walk order
    rank = np.empty(len(ids), dtype=np.int64)
    starts = np.searchsorted(cls[order], cls[order])  # first position of each id's class in the sorted run
    rank[order] = np.arange(len(ids)) - starts        # (M,) position of each id among its class's ids
    take = rank < np.asarray(counts, dtype=np.int64)[cls]
    return torch.from_numpy(ids[take].astype(np.int64))


# ----------------------------------------------------------------------------- augmentation

def augment(x: torch.Tensor, translate: int, flip: bool, generator: torch.Generator,
            pad: str = "reflect") -> torch.Tensor:
    """Per-sample random horizontal flip (p = 0.5) then translation by dy, dx in [-translate, translate].

    out[i, j] = x[i - dy, j - dx]; pixels shifted in from outside the image come from
    pad="reflect": the mirror image about the edge pixel, the edge not repeated ([a b c] padded
    by 2 is [c b a b c b a]): TensorFlow's tf.pad mode REFLECT, which the authors' random_translate
    (my_utils/tensorflow_utils/image/transformation.py, padding_mode='REFLECT') uses; it is
    numpy.pad's mode 'reflect' and PyTorch's F.pad mode 'reflect'. Needs translate < H and < W.
    pad="zero": zeros, the mean of the whitened / standardised inputs (Mean Teacher's pad-and-crop).
    Random numbers come from `generator` (on x's device); translate=0, flip=False returns x.
    """
    if translate < 0:
        raise ValueError(f"translate must be >= 0 pixels, got {translate}")
    if pad not in ("reflect", "zero"):
        raise ValueError(f"unknown pad {pad!r}; choose 'reflect' or 'zero'")
    B, C, H, W = x.shape
    if pad == "reflect" and translate >= min(H, W):
        raise ValueError(f"reflect padding by translate={translate} needs images larger than {translate} pixels "
                         f"on each side, got {H}x{W}; lower translate or use pad='zero'")
    dev = x.device
    if flip:
        mirror = torch.rand(B, generator=generator, device=dev) < 0.5  # (B,)
        x = torch.where(mirror[:, None, None, None], x.flip(3), x)
    if translate:
        t = translate
        dy, dx = torch.randint(-t, t + 1, (2, B), generator=generator, device=dev)  # (B,), (B,)
        xp = F.pad(x, (t, t, t, t), mode="reflect" if pad == "reflect" else "constant")  # (B, C, H+2t, W+2t)
        rows = torch.arange(H, device=dev) + t - dy[:, None]  # (B, H): out[i] = x[i - dy]
        xp = xp.gather(2, rows[:, None, :, None].expand(B, C, H, W + 2 * t))  # (B, C, H, W+2t)
        cols = torch.arange(W, device=dev) + t - dx[:, None]  # (B, W): out[j] = x[j - dx]
        x = xp.gather(3, cols[:, None, None, :].expand(B, C, H, W))  # (B, C, H, W)
    return x


# ----------------------------------------------------------------------------- batches

class Batcher:
    """Two index streams: batch_labeled from labeled_idx, batch_unlabeled from unlabeled_idx.

    Each stream walks a fresh random permutation of its index set per epoch (one pass through
    the set) and carries over into the next permutation mid-batch, so every epoch uses each
    index exactly once. `generator` is used only here (its state is in state_dict); the
    index tensors live on its device.
    """

    def __init__(self, labeled_idx, unlabeled_idx, batch_labeled: int, batch_unlabeled: int,
                 generator: torch.Generator):
        dev = generator.device
        self.idx = {"labeled": torch.as_tensor(labeled_idx, dtype=torch.int64).to(dev),
                    "unlabeled": torch.as_tensor(unlabeled_idx, dtype=torch.int64).to(dev)}
        self.batch = {"labeled": batch_labeled, "unlabeled": batch_unlabeled}
        if batch_labeled < 1 or len(self.idx["labeled"]) == 0:
            raise ValueError(f"Batcher needs batch_labeled >= 1 and labeled images, got batch_labeled="
                             f"{batch_labeled} and {len(self.idx['labeled'])} labeled indices")
        if batch_unlabeled < 0 or (batch_unlabeled > 0 and len(self.idx["unlabeled"]) == 0):
            raise ValueError(f"batch_unlabeled={batch_unlabeled} needs unlabeled images (got "
                             f"{len(self.idx['unlabeled'])}); set batch_unlabeled=0 or keep unlabeled indices")
        self.generator = generator
        self.perm = {"labeled": None, "unlabeled": None}  # current epoch's order of the index set
        self.pos = {"labeled": 0, "unlabeled": 0}  # next position in perm
        self.epochs = {"labeled": 0, "unlabeled": 0}  # permutations started so far

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(idx_l (batch_labeled,), idx_u (batch_unlabeled,)) int64 indices into the training set."""
        return self._take("labeled"), self._take("unlabeled")

    def _take(self, stream: str) -> torch.Tensor:
        idx, n = self.idx[stream], self.batch[stream]
        pieces = []
        while n > 0:  # one iteration per epoch boundary crossed, not per sample
            if self.perm[stream] is None or self.pos[stream] == len(idx):
                order = torch.randperm(len(idx), generator=self.generator, device=idx.device)
                self.perm[stream], self.pos[stream] = idx[order], 0
                self.epochs[stream] += 1
            p = self.pos[stream]
            k = min(n, len(idx) - p)
            pieces.append(self.perm[stream][p:p + k])
            self.pos[stream], n = p + k, n - k
        return torch.cat(pieces) if pieces else idx.new_empty(0)

    def state_dict(self) -> dict:
        perm = lambda s: None if self.perm[s] is None else self.perm[s].cpu()
        return {"perm": {s: perm(s) for s in self.perm}, "pos": dict(self.pos), "epochs": dict(self.epochs),
                "sizes": {s: len(self.idx[s]) for s in self.idx}, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        sizes = {s: len(self.idx[s]) for s in self.idx}
        if state["sizes"] != sizes:
            raise ValueError(f"Batcher state is for index sets of sizes {state['sizes']}, this one has {sizes}; "
                             f"restore it into a Batcher built from the same labeled split")
        dev = self.generator.device
        self.perm = {s: None if p is None else p.to(dev) for s, p in state["perm"].items()}
        self.pos, self.epochs = dict(state["pos"]), dict(state["epochs"])
        self.generator.set_state(state["generator"])
