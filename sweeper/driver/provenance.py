"""Where a sweep's code came from and what ran it: the git commit stored in its sweep.json and shown on
its report, and the CPU's name that committed runs and benchmarks record.

Standard library only: the benchmarks that measure a GPU import it where neither Ray nor pandas is
installed.

    python -m sweeper.run ablation_radius --preset quick   # sweep.json's "commit"
"""
from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """This machine's CPU as /proc/cpuinfo names it, else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def source_commit() -> str | None:
    """The git commit of this checkout ("+dirty" with uncommitted changes to tracked files), for the
    report's provenance; None outside a git checkout (e.g. `ray job submit --working-dir`)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):  # no git installed
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
