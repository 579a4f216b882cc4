"""Helpers every module that writes or reads files shares: an atomic write, an error in one line, the
closest valid names to a mistyped one; and the names of the files a trial writes into its checkpoints (trainables/tune.py), which the report reads.

    python -c "from trainables.files import atomic_write; atomic_write('x.txt', lambda t: open(t, 'w').write('hi'))"
"""
from __future__ import annotations

import difflib
import os
import uuid
from pathlib import Path
from typing import Callable

def closest(word: str, valid, fallback: str) -> str:
    """The tail of an "unknown NAME" message: the valid names nearest to `word` (difflib, up to three),
    else `fallback` (where the valid names are listed), so a typo gets the name meant, not the whole list."""
    near = difflib.get_close_matches(str(word), sorted(valid), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(near)}?" if near else fallback


# Report keys a trial ends itself with, failed and not retried (trainables/tune.py); torch-free for the driver
RESUME_ERROR = "resume_error"  # why its checkpoint cannot be continued
CONFIG_ERROR = "config_error"  # the ConfigError its config raised (no GPU for device=cuda, ...)
# The report key of the vector instruction set torch's CPU kernels ran on (AVX2, AVX512, ...), which sets the
# rounding of every sum: the trial's own, never the machine's that reads the results
KERNELS_KEY = "cpu_kernels"
MIXED = "mixed"  # machine.json's cpu_kernels for a run whose trials ran on several kinds


def refusal(metrics: dict) -> str | None:
    """Why a trial ended itself as failed without raising (a checkpoint its config cannot continue, or a
    config it cannot run); None otherwise."""
    return metrics.get(RESUME_ERROR) or metrics.get(CONFIG_ERROR)


# What Tune leaves in a config value it could not resolve (a sample_from of a Tuner restored without its
# param_space): ("__fn_ph", hash), a two-item list once in params.json
TUNE_PLACEHOLDERS = ("__fn_ph", "__ref_ph")


def unresolved(config: dict) -> list[str]:
    """The keys of `config` whose value is one of Tune's placeholders instead of a value."""
    return sorted(k for k, v in config.items()
                  if isinstance(v, (list, tuple)) and len(v) == 2 and v[0] in TUNE_PLACEHOLDERS)


CKPT = "trainer.pt"                     # Trainer.save's checkpoint: never copied for a report
VIRTUAL_POINTS = "virtual_points.npz"   # x* of a MUR trial, beside its last checkpoint (sweeper/analysis/plots.py)


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Call write(tmp) on a temporary file in path's folder, then os.replace it onto path: a reader sees
    the old file or the new one, never a half-written one. On any failure the temporary file is removed."""
    path = Path(path)
    tmp = str(path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"))  # made by write: umask applies
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def one_line(e: BaseException | str, limit: int = 240) -> str:
    """An error (or a text) for a one-line message: whitespace squeezed, cut to `limit` characters; an
    exception is led by its type's name."""
    text = " ".join(str(e).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(e).__name__}: {text}" if isinstance(e, BaseException) else text
