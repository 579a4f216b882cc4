"""How the driver grows with the number of trials: sweeps of 50, 200 and 500 trivially short trials.

Hypothesis: every cost of a sweep outside the trials themselves (Tune's loop per trial, the
driver's memory, the aggregation and the report, what is stored) grows at most linearly with the
number of trials, so the ratio of each at 500 trials to 50 stays near 10 (and per-trial costs near 1).

    python benchmarks/driver_scale.py                        # 50, 200, 500 trials (~15 min on 2 cores)
    python benchmarks/driver_scale.py --sizes 50 100         # a quicker look
    python benchmarks/driver_scale.py --before /tmp/before   # and another checkout, alternating (~2x)
    python benchmarks/driver_scale.py --out benchmarks/results/driver_scale_cpu.json

Each size is `python -m sweeper.run mur_vs_vat --preset quick --seeds N/10` (10 configs, so N
trials) with 2-step trials (an evaluation at each step, checkpoints as the trainable spaces them),
as a user runs it: a local Ray, the live report at its default period, the final report. The
driver runs in a child process that times its phases (prepare, Ray start, Tune's fit, the final
report), Tune's experiment-state saves (count and time), its own CPU time and its own peak
resident memory. CPU time is the measure to compare across sizes on a shared machine: wall times
move with the load. Then, in this process, the report of the finished experiment is rebuilt and
timed by parts (reading the trials, the per-trial histories, the whole report), and the stored
files are counted. Printed: each measure per size and its growth, the value at the largest size
over the value at the smallest; with --before, also after / before per size.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks.provenance import commit, cpu_name  # noqa: E402

SWEEP, CONFIGS = "mur_vs_vat", 10  # the quick preset's 10 configs (MT/MUT with MUR, RR, VAT; LabelSpreading)
TRIVIAL = ["--set", "steps=2", "--set", "eval_every=1", "--set", "lr_rampup=0", "--set", "lr_rampdown=1",
           "--set", "rampup=1", "--set", "sensitivity_samples=2"]

# The driver, timed by phase from inside its own process (the functions sweeper.run's main calls, wrapped
# where it looks them up).
DRIVER = r"""
import json, resource, sys, time
from sweeper import run
t, out = {}, sys.argv[1]

def timed(name, f):
    def g(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            t[name] = t.get(name, 0.0) + time.perf_counter() - t0
    return g

make_tuner = run.make_tuner
def make_timed_tuner(*a, **k):
    tuner = make_tuner(*a, **k)
    tuner.fit = timed("fit_s", tuner.fit)
    return tuner

run.prepare, run.start_ray = timed("prepare_s", run.prepare), timed("ray_start_s", run.start_ray)
run.make_tuner, run.finish = make_timed_tuner, timed("finish_s", run.finish)
from ray.tune.execution.tune_controller import TuneController  # its experiment-state saves, counted and timed
save = TuneController.save_to_dir
def counted_save(self):
    t["state_saves"] = t.get("state_saves", 0) + 1
    return timed("state_save_s", save)(self)
TuneController.save_to_dir = counted_save
rc = run.main(sys.argv[2:])
ru = resource.getrusage(resource.RUSAGE_SELF)  # this process only: not Ray's, not the trials'
t["peak_rss_mb"], t["driver_cpu_s"] = ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime
t["rc"] = rc
open(out, "w").write(json.dumps(t))
sys.exit(rc)
"""


def stored(exp: Path) -> dict:
    files = [p for p in exp.rglob("*") if p.is_file()]
    state = sorted(exp.glob("experiment_state-*.json"))
    return {"stored_mb": sum(p.stat().st_size for p in files) / 2**20, "stored_files": len(files),
            "experiment_state_kb": state[-1].stat().st_size / 1024 if state else 0.0}


def report_parts(exp: Path) -> dict:
    """The final report rebuilt here, timed by part (its inputs read, then the whole build)."""
    from sweeper.analysis.aggregate import load_history, load_trials
    from sweeper.report import build_report

    t0 = time.perf_counter()
    trials = load_trials(exp)
    t1 = time.perf_counter()
    load_history(exp)
    t2 = time.perf_counter()
    build_report(exp)
    t3 = time.perf_counter()
    assert len(trials) == len(list(exp.glob("*/params.json")))
    return {"load_trials_s": t1 - t0, "load_history_s": t2 - t1, "report_s": t3 - t2}


def one_size(n: int, storage: Path, extra: list[str], tree: Path = ROOT) -> dict:
    """One sweep of n trials, driven by the code of `tree` (this checkout, or --before's)."""
    timings, results = storage / f"driver-{tree.name}-{n}.json", storage / f"{tree.name}-{n}"
    argv = [SWEEP, "--preset", "quick", "--seeds", str(n // CONFIGS), *TRIVIAL, "--storage", str(results), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(timings), *argv], cwd=tree, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"sweeper.run ({tree}) failed at {n} trials ({proc.returncode}):\n{proc.stderr[-3000:]}")
    exp = next(results.glob(f"{SWEEP}-*"))
    d = json.loads(timings.read_text())
    row = {"trials": n, "wall_s": wall, **{k: v for k, v in d.items() if k != "rc"}}
    row["fit_per_trial_s"], row["driver_cpu_per_trial_s"] = row["fit_s"] / n, row["driver_cpu_s"] / n
    row.update(report_parts(exp))
    row.update(stored(exp))
    return row


GROWTH = ("wall_s", "fit_s", "fit_per_trial_s", "driver_cpu_s", "driver_cpu_per_trial_s", "state_saves",
          "state_save_s", "finish_s", "peak_rss_mb", "load_trials_s", "load_history_s",
          "report_s", "stored_mb", "stored_files", "experiment_state_kb")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 500], help=f"trial counts (multiples of {CONFIGS})")
    p.add_argument("--out", default=None, help="write the result JSON here")
    p.add_argument("--before", default=None, metavar="TREE",
                   help="also run each size with the code of another checkout (e.g. git worktree add --detach "
                        "/tmp/before REV), alternating with this one, and print after/before per measure")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more sweeper.run options, e.g. --live-every 0")
    args = p.parse_args(argv)
    if any(n % CONFIGS for n in args.sizes):
        p.error(f"--sizes must be multiples of {CONFIGS} (the sweep's configs)")
    import sweeper.report  # noqa: F401  (its imports, matplotlib's included, before the first timing)

    trees = {"after": ROOT, **({"before": Path(args.before).resolve()} if args.before else {})}
    rows: dict[str, list[dict]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory(prefix="scale") as tmp:
        for i, n in enumerate(args.sizes):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))  # the machine's load drifts
            for name in order:
                rows[name].append(one_size(n, Path(tmp), args.extra, trees[name]))
                print(name, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[name][-1].items()}),
                      flush=True)
    growth = {name: {k: r[-1][k] / r[0][k] for k in GROWTH if r[0].get(k)} for name, r in rows.items()}
    lo, hi = args.sizes[0], args.sizes[-1]
    print(f"growth from {lo} to {hi} trials ({hi / lo:g}x the trials):   " + "   ".join(trees))
    for k in GROWTH:
        print(f"  {k:24s}" + "".join(f"{growth[name].get(k, float('nan')):8.2f}x" for name in trees))
    if args.before:
        print("after / before, per size: " + "   ".join(str(n) for n in args.sizes))
        for k in ("wall_s", "fit_s", "driver_cpu_s", "state_save_s", "state_saves"):
            print(f"  {k:24s}" + "".join(f"{a[k] / b[k]:8.2f}x" if b.get(k) else "       -"
                                         for a, b in zip(rows["after"], rows["before"])))
    result = {"sweep": SWEEP, "trial_args": TRIVIAL, "extra_args": args.extra,
              "before_commit": commit(trees["before"]) if args.before else None, "after_commit": commit(ROOT),
              "machine": f"{cpu_name()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "sizes": rows, "growth": growth}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
