"""Process helpers shared by the tests that start their own Ray (found by the Ray temp dir they name)."""
import os
from pathlib import Path


def pids_naming(key: str) -> list[int]:
    """Live processes whose command line contains `key` (every Ray daemon names its temp dir)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if key.encode() in (p / "cmdline").read_bytes():
                    out.append(int(p.name))
            except OSError:
                pass
    return out
