"""How long `ray job stop` takes to end a sweep's driver, with Ray's default stop wait and with the one
docs/USAGE.md gives: the end-to-end test that stops a quick sweep twice on a local head, its
measurements kept.

    python benchmarks/job_stop.py            # writes benchmarks/results/job_stop_cpu.json

Hypothesis: with Ray's default wait (3 s) the job supervisor SIGKILLs the driver before its graceful
stop ends; with the documented wait the driver ends on its own (its log ends with the `--resume` line).
The test (tests/test_e2e.py) asserts what each stop kept and prints one JSON line of measurements:
per stop the wait, the seconds from the driver's SIGTERM to its end, the trials finished at the stop and
whether the driver ended on its own. The stop's saves and report share the CPU with whatever else runs,
so the load average before and after is recorded with them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeper.driver.provenance import cpu_name  # noqa: E402
from sweeper.driver.live import load_average  # noqa: E402

TEST = "tests/test_e2e.py::test_ray_job_stop_keeps_what_finished_and_resume_finishes_every_trial"
MARK = '{"test": "ray job stop + resume"'


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/job_stop_cpu.json"))
    args = p.parse_args(argv)
    load_before = load_average()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    lines = [x[x.index(MARK):] for x in proc.stdout.splitlines() if MARK in x]
    if proc.returncode != 0 or not lines:
        sys.exit(f"the job-stop test failed ({proc.returncode}); nothing written:\n{proc.stdout[-3000:]}")
    out = {"benchmark": "job_stop", "test": TEST, "machine": f"{cpu_name()}, {os.cpu_count()} CPUs",
           "load_avg_before": load_before, "load_avg_after": load_average(),
           "test_wall_s": round(wall, 1), "stops": json.loads(lines[-1])["stops"]}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
