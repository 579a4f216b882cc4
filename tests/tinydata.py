"""Tiny data sets in the real on-disk formats, shared by the tests that need files (not by test_data.py,
whose writers also return the arrays they wrote)."""
import pickle
from pathlib import Path

import numpy as np


def write_cifar10(root: Path, truncate: str | None = None) -> Path:
    """A tiny CIFAR-10 in torchvision's layout (root/cifar-10-batches-py/...); optionally one file cut in half."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (10, 3072), dtype=np.uint8), "labels": list(range(10))}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))
    if truncate:
        data = (folder / truncate).read_bytes()
        (folder / truncate).write_bytes(data[: len(data) // 2])
    return root
