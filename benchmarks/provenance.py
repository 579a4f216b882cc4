"""Where a benchmark ran: the CPU's name (sweeper/driver/provenance.py's rule, the one committed runs
record) and the commit of a checkout, one rule for every script.

Standard library only: the scripts that measure a GPU run where neither Ray nor pandas is installed.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sweeper.driver.provenance import cpu_name  # noqa: F401  (the scripts' one import of both rules)

ROOT = Path(__file__).resolve().parents[1]


def commit(tree: Path) -> str | None:
    """The commit checked out in `tree`, None where git cannot say. For this checkout BENCH_COMMIT
    wins where it is set: a copy of the tree sent to another machine may carry no .git, or a stale one,
    while a --before checkout made there with `git worktree` knows its own commit."""
    if Path(tree).resolve() == ROOT and os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None
