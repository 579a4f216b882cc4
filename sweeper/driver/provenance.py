"""Where a sweep's code came from and what ran it: the git commit stored in its sweep.json and shown on
its report, and the CPU (its name and its kernels' instruction set) that committed runs, benchmarks and
`--dry-run`'s prices record.

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


def cpu_kernels() -> str | None:
    """The vector instruction set torch's CPU kernels use here ("AVX512", "AVX2", ...). It decides the
    rounding of every sum, so a seed's trajectory, bit-identical from run to run on one machine, differs
    on a CPU with another one (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine shows it): a committed run
    reproduces digit for digit only where this and the commit match. Asked of torch where this process
    has imported it already, else of a child Python, so that the docs code imports no torch
    (tests/test_imports.py); None where it cannot answer."""
    import subprocess
    import sys

    if "torch" in sys.modules:  # the child would import torch again, for the same answer
        return sys.modules["torch"].backends.cpu.get_cpu_capability() or None
    try:
        p = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:  # no torch here, or it failed to import
        return None
    return p.stdout.strip() or None


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
