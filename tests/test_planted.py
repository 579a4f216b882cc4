"""Files planted in a data folder or an experiment folder run nothing: the data sets' pickles are read
with trainables/safe_pickle.py, and `--resume` refuses a tuner.pkl whose digest is not the one the
experiment recorded when it started. Each planted pickle would create a marker file; it stays absent.

    pytest tests/test_planted.py -q     # ~10 s
"""
import gzip
import io
import os
import pickle
import shlex

import numpy as np
import pytest
from tinydata import write_cifar10

from sweeper import run as sweeper_run
from trainables import safe_pickle
from trainables.datafiles import DataError, check_readable, read_raw


class Planted:
    """Unpickled with plain pickle.load, this runs a shell command that creates `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(self.marker)}",)


def planted_bytes(marker, protocol=2) -> bytes:
    return pickle.dumps(Planted(marker), protocol=protocol)


def test_the_planted_pickle_does_run_code_under_plain_pickle(tmp_path):
    """The fixture itself: plain pickle.loads runs it (so the tests below show the refusal, not a dud)."""
    marker = tmp_path / "ran"
    pickle.loads(planted_bytes(marker))
    assert marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_safe_pickle_reads_what_the_data_formats_hold_at_every_protocol(protocol):
    data = {"data": np.arange(12, dtype=np.uint8).reshape(2, 6), "labels": [3, 7], b"batch_label": b"training",
            "names": ("a", "b"), "mean": np.float32(0.5), "n": np.int64(2), "x": 1.25, "none": None,
            "nested": [np.zeros((2, 2), np.float32), {"k": True}]}
    got = safe_pickle.load(io.BytesIO(pickle.dumps(data, protocol=protocol)))
    assert got.keys() == data.keys()
    np.testing.assert_array_equal(got["data"], data["data"])
    assert got["data"].dtype == np.uint8 and got["labels"] == [3, 7] and got[b"batch_label"] == b"training"
    assert got["mean"] == np.float32(0.5) and got["n"] == 2 and got["names"] == ("a", "b")
    assert got["nested"][0].shape == (2, 2) and got["nested"][1] == {"k": True}


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_safe_pickle_refuses_a_callable_and_runs_nothing(tmp_path, protocol):
    marker = tmp_path / "ran"
    with pytest.raises(pickle.UnpicklingError, match=r"asks for posix\.system.*refused"):
        safe_pickle.load(io.BytesIO(planted_bytes(marker, protocol)))
    assert not marker.exists()


def test_safe_pickle_refuses_a_codec_other_than_latin1():
    """_codecs.encode is how protocol 2 stores bytes; another codec is no data file's."""
    payload = b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x05\x00\x00\x00rot13\x86R."
    with pytest.raises(pickle.UnpicklingError, match="rot13"):
        safe_pickle.load(io.BytesIO(payload))


def test_planted_mnist_pickle_runs_nothing_during_dry_run(tmp_path, capsys):
    marker = tmp_path / "ran"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mnist.pkl.gz").write_bytes(gzip.compress(planted_bytes(marker)))
    code = sweeper_run.main(["hpo", "--preset", "quick", "--set", "dataset=mnist", "--data-dir", str(tmp_path / "data"),
                             "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not marker.exists()
    assert len(err.splitlines()) == 1 and "mnist.pkl.gz" in err and "posix.system" in err, err


@pytest.mark.parametrize("planted", ["data_batch_3", "batches.meta"])
def test_planted_cifar_batch_runs_nothing_during_dry_run(planted, tmp_path, capsys):
    marker = tmp_path / "ran"
    data = write_cifar10(tmp_path / "data")
    (data / "cifar-10-batches-py" / planted).write_bytes(planted_bytes(marker))
    code = sweeper_run.main(["hpo", "--preset", "quick", "--set", "dataset=cifar10", "--data-dir", str(data),
                             "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not marker.exists()
    assert len(err.splitlines()) == 1 and planted in err and "refused" in err, err


def test_cifar_read_without_torchvision_reader_matches_the_rows_written(tmp_path):
    """The batches as written: data rows (N, 3072) = R, G, B planes of 32 x 32 -> (N, 3, 32, 32)."""
    data = write_cifar10(tmp_path / "data")
    (x, y), (x_te, y_te) = read_raw("cifar10", data)
    folder = data / "cifar-10-batches-py"
    rows = [pickle.loads((folder / f"data_batch_{i}").read_bytes()) for i in range(1, 6)]
    np.testing.assert_array_equal(x, np.concatenate([r["data"] for r in rows]).reshape(-1, 3, 32, 32))
    np.testing.assert_array_equal(y, np.concatenate([r["labels"] for r in rows]))
    test = pickle.loads((folder / "test_batch").read_bytes())
    np.testing.assert_array_equal(x_te[3, 1], test["data"][3, 1024:2048].reshape(32, 32))  # green plane of image 3
    assert y_te.dtype == np.int64 and x.dtype == np.uint8


def test_check_readable_names_the_planted_file(tmp_path):
    marker = tmp_path / "ran"
    data = write_cifar10(tmp_path / "data")
    (data / "cifar-10-batches-py" / "test_batch").write_bytes(planted_bytes(marker, 4))
    with pytest.raises(DataError, match=r"cifar10 file .*test_batch .*builtins|cifar10 file .*test_batch .*posix"):
        check_readable("cifar10", data)
    assert not marker.exists()


def test_help_and_usage_say_that_resume_unpickles_and_to_resume_only_trusted_folders():
    from pathlib import Path

    text = " ".join(sweeper_run.parser().format_help().split())
    assert "Tune's restore unpickles the experiment's state" in text and "resume only folders and buckets you trust" in text
    usage = " ".join((Path(__file__).resolve().parents[1] / "docs" / "USAGE.md").read_text().split())
    assert "Tune's restore unpickles the experiment's state" in usage and "resume only folders and buckets you trust" in usage
    assert "Reading a bucket runs none of its content" not in usage
