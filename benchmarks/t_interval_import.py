"""CPU that a report's paired t-intervals pay for importing scipy.stats, against scipy.special alone.

    python benchmarks/t_interval_import.py              # 5 rounds, writes benchmarks/results/t_interval_import_cpu.json
    python benchmarks/t_interval_import.py --rounds 9

Hypothesis: scipy.stats costs a report's paired t-intervals far more than the quantile they need
(scipy.special.stdtrit, which scipy.stats.t.ppf calls), so that every report with a comparison (every
driver's last step) pays for an import it does not use.

Each row is a fresh Python, as a driver's report is; the rows of a round run one after the other, the
rounds alternate their order, and a row's figure is the median of its rounds' CPU seconds (user + system,
from the child's own rusage), so that a machine's drift touches both sides alike.
- t-interval: a paired t-interval (sweeper.analysis.stats.paired_diff), as a report with a comparison makes;
- t-interval + scipy.stats: the same with scipy.stats imported first.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import cpu_name  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "t_interval_import_cpu.json"
T_INTERVAL = ("from sweeper.analysis.stats import paired_diff\n"
              "print(paired_diff([4.1, 4.9, 5.0, 4.4], [6.0, 6.6, 7.3, 6.1]))\n")
ROWS = {
    "t-interval": T_INTERVAL,
    "t-interval + scipy.stats": "from scipy import stats\n" + T_INTERVAL,
}


def cpu_s(code: str) -> float:
    """User + system CPU seconds of a fresh `python -c code` in this checkout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    runs: dict[str, list[float]] = {name: [] for name in ROWS}
    for r in range(args.rounds):
        order = list(ROWS) if r % 2 == 0 else list(reversed(ROWS))
        for name in order:
            runs[name].append(round(cpu_s(ROWS[name]), 3))
            print(f"round {r + 1}/{args.rounds} {name}: {runs[name][-1]:.2f} CPU s", flush=True)
    median = {name: statistics.median(v) for name, v in runs.items()}
    out = {
        "benchmark": "t_interval_import",
        "machine": f"{cpu_name()}, {os.cpu_count()} cores",
        "date": date.today().isoformat(),
        "python": sys.version.split()[0],
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
        "rounds": args.rounds,
        "rows": [{"row": name, "code": ROWS[name], "cpu_s_median": round(median[name], 3), "cpu_s": runs[name]}
                 for name in ROWS],
        "scipy_stats_import_cpu_s": round(median["t-interval + scipy.stats"] - median["t-interval"], 3),
        "t_interval_with_over_without_scipy_stats": round(median["t-interval + scipy.stats"] / median["t-interval"], 3),
    }
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
