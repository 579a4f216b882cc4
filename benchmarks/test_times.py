"""How long the README's two test commands take: the fast suite a newcomer runs and the whole suite CI runs.

    python benchmarks/test_times.py                         # times the fast suite here
    python benchmarks/test_times.py --whole                 # times the whole suite too (its budget: 15 minutes)
    python benchmarks/test_times.py --whole-log ci.log      # the whole suite's time read from a .ci/run log

Hypothesis: on a 2-core machine with nothing else running, the fast suite (`-m "not slow"`) takes at most
90 s and the whole suite, slow end-to-end tests included, at most 15 minutes of pytest time (the budget
in tests/README.md).
Each command runs as a user would type it, in this checkout; its wall time, pytest's own summary line and
the load average before and after are written into benchmarks/results/install.json (the README's install
block is generated from it).
A log's figure is pytest's own "in N s" from its summary line, the suite's time without the install.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeper.driver.provenance import cpu_name  # noqa: E402
from sweeper.driver.live import load_average  # noqa: E402
from sweeper.driver.provenance import cpu_kernels  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "install.json"
FAST = 'python -m pytest -q -n 2 --dist loadfile -m "not slow"'  # the README's first test command
WHOLE = "python -m pytest -q -n 2 --dist loadfile"  # the README's second, what .ci/run runs
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ passed.*?) in (?P<s>[0-9.]+)s", re.M)


def summary_of(text: str) -> tuple[str, float]:
    """pytest's last summary line: its counts ("1012 passed, 12 skipped") and its seconds."""
    found = list(SUMMARY.finditer(text))
    if not found:
        raise SystemExit("no pytest summary line (`N passed ... in S s`) found; was the suite run to its end?")
    last = found[-1]
    return re.sub(r",? \d+ warnings?", "", last["counts"]).strip(), float(last["s"])


def time_suite(command: str) -> dict:
    """Run one test command in this checkout; refuse to record a failing suite."""
    load_before = load_average()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"`{command}` failed (exit {proc.returncode}); nothing written:\n{proc.stdout[-3000:]}")
    counts, _ = summary_of(proc.stdout)
    return {"command": command, "wall_s": round(wall), "counts": counts,
            "load_avg_before": load_before, "load_avg_after": load_average()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--whole", action="store_true", help="also run the whole suite (slow tests included)")
    p.add_argument("--whole-log", type=Path, help="read the whole suite's time from a .ci/run log instead")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    out = json.loads(args.out.read_text()) if args.out.is_file() else {}
    # the vector kernels too: one CPU name with AVX2 instead of AVX-512 runs the suite far slower
    kernels = cpu_kernels()
    machine = f"{cpu_name()}, {os.cpu_count()} cores{f', {kernels} kernels' if kernels else ''}, Linux {os.uname().machine}"
    fast = time_suite(FAST)
    out.update({"fast_suite": {**fast, "machine": machine, "date": date.today().isoformat()}})
    if args.whole:
        whole = time_suite(WHOLE)
        out.update({"test_command": whole["command"], "test_suite_s": whole["wall_s"],
                    "test_suite_source": f"timed by benchmarks/test_times.py ({whole['counts']}) on {machine}"})
    elif args.whole_log:
        counts, seconds = summary_of(args.whole_log.read_text(errors="replace"))
        out.update({"test_command": WHOLE, "test_suite_s": round(seconds),
                    "test_suite_source": f"pytest's own time in a run of .ci/run ({counts}) on {machine}"})
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
