"""The quick start with and without the live report (report.html rebuilt as trials end), side by side.

    python benchmarks/live_report.py                                  # ablation_radius --preset quick, 1 round
    python benchmarks/live_report.py --rounds 2 --set steps=300 --seeds 2   # a cut-down quick sweep

Each round runs `python -m sweeper.run SWEEP --preset quick` twice, `--live-every 0` (the report only
at the end) and `--live-every 30` (the default), in alternating order so that load from elsewhere on
the machine falls on both alike, timed from process start to exit. A thread polls report.html's
modification time every 0.5 s to count the rewrites. Writes wall times, rewrites and the ratio
(live / off) to --out (default benchmarks/results/live_report_cpu.json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_run(sweep: str, flags: list[str], live_every: float) -> dict:
    """Wall time of one sweeper.run and how many times report.html was (re)written during it."""
    with tempfile.TemporaryDirectory() as storage:
        seen, stop = set(), threading.Event()

        def poll():
            while not stop.wait(0.5):
                for page in Path(storage).glob("*/report.html"):
                    try:
                        seen.add(page.stat().st_mtime_ns)
                    except FileNotFoundError:  # replaced between glob and stat
                        pass

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "sweeper.run", sweep, "--preset", "quick", *flags,
                               "--live-every", str(live_every), "--storage", storage],
                              cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - t0
        stop.set()
        watcher.join()
        if proc.returncode != 0:
            sys.exit(f"sweeper.run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        for page in Path(storage).glob("*/report.html"):
            seen.add(page.stat().st_mtime_ns)
    return {"live_every_s": live_every, "s": wall, "page_writes": len(seen)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", default="ablation_radius")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "live_report_cpu.json"))
    args = p.parse_args(argv)
    flags = [*(["--seeds", str(args.seeds)] if args.seeds else []), *(x for s in args.set for x in ("--set", s))]
    runs = {"off": [], "live": []}
    for r in range(args.rounds):
        order = ("off", "live") if r % 2 == 0 else ("live", "off")
        for kind in order:
            runs[kind].append(timed_run(args.sweep, flags, 30.0 if kind == "live" else 0.0))
            print(kind, runs[kind][-1], flush=True)
    mean = {k: sum(x["s"] for x in v) / len(v) for k, v in runs.items()}
    out = {"sweep": args.sweep, "preset": "quick", "flags": flags, "rounds": args.rounds,
           "machine": f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
           "runs": runs, "mean_s": mean, "ratio_live_over_off": mean["live"] / mean["off"]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"mean_s": mean, "ratio_live_over_off": out["ratio_live_over_off"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
