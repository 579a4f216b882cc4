"""Unpickling data files that admits data only: numpy arrays and scalars with their dtypes, and the
containers and atoms pickle builds without naming a function (lists, dicts, tuples, bytes, strings,
numbers, booleans, None).

The data sets' pickle formats (CIFAR-10/100 batches, the classic mnist.pkl.gz) hold nothing else,
and a pickle that names any other callable (os.system, builtins.eval, a class whose __reduce__ runs
code) is refused before that callable is looked up, so a file planted in a data folder or bucket
runs nothing; `pickle.UnpicklingError` names what it asked for.

    with gzip.open("data/mnist.pkl.gz", "rb") as f:
        train, valid, test = safe_pickle.load(f)
"""
from __future__ import annotations

import pickle


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """_codecs.encode as Python 3 pickles bytes at protocol 2; any codec but latin1 is refused."""
    if encoding != "latin1" or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r} is not how pickle stores bytes; refused")
    return text.encode("latin1")


def _allowed() -> dict[tuple[str, str], object]:
    import numpy as np

    out = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): _latin1}
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):  # numpy 1.x and 2.x pickles
        out[(mod, "_reconstruct")] = np._core.multiarray._reconstruct
        out[(mod, "scalar")] = np._core.multiarray.scalar
    for mod in ("numpy.core.numeric", "numpy._core.numeric"):  # protocol 5's arrays
        out[(mod, "_frombuffer")] = np._core.numeric._frombuffer
    return out


class DataUnpickler(pickle.Unpickler):
    """A pickle.Unpickler whose find_class returns only the names of `_allowed()`."""

    def find_class(self, module: str, name: str):
        found = _allowed().get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"the pickle asks for {module}.{name}, which a data file never holds "
                                         f"(only numpy arrays, lists, dicts, tuples, bytes, strings, numbers); refused")
        return found


def load(f, encoding: str = "latin1"):
    """The object pickled in the binary file `f` (latin1: Python 2's str, as the data sets were pickled)."""
    return DataUnpickler(f, encoding=encoding).load()
