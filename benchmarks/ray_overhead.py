"""The quick sweep through Ray Tune vs the same trials run directly by the trainer, side by side.

    python benchmarks/ray_overhead.py                      # ablation_radius --preset quick (10 trials)
    python benchmarks/ray_overhead.py --sweep mut_radius   # any sweep's quick preset
    python benchmarks/ray_overhead.py --dashboard          # also time sweeper.run --dashboard

Ray: `python -m sweeper.run SWEEP --preset quick` as a user runs it (local Ray start-up,
checkpoints at every evaluation and the report included; --dashboard: also with its dashboard),
timed from process start to exit. Direct: the same trial configs in a pool of as many worker processes as Ray runs at once
(one per core, one torch thread each), no Ray. Reports both wall times, the overhead ratio, and
whether every trial's final test error is identical both ways (CPU runs are deterministic).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _init():
    import torch

    torch.set_num_threads(1)


def _run(cfg_dict):
    from trainables.config import TrainConfig
    from trainables.trainer import train

    out = train(TrainConfig.from_dict(cfg_dict), log=None)
    return cfg_dict, out["test_error"]


def _sweeper_run(sweep: str, flags: list[str], keys: list[str]):
    """Wall time of `python -m sweeper.run SWEEP --preset quick FLAGS`, Tune's loop time, final errors."""
    from sweeper.aggregate import load_trials

    with tempfile.TemporaryDirectory() as storage:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "sweeper.run", sweep, "--preset", "quick", *flags,
                               "--storage", storage], cwd=ROOT, capture_output=True, text=True)
        t_ray = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"sweeper.run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        df = load_trials(next(Path(storage).glob(f"{sweep}-*")))
    m = re.search(r"Total run time: ([\d.]+) seconds \(([\d.]+) seconds for the tuning loop\)", proc.stdout + proc.stderr)
    t_loop = float(m.group(2)) if m else float("nan")
    return t_ray, t_loop, {tuple(r[k] for k in keys): r["final_test_error"] for _, r in df.iterrows()}


def _cpu_name() -> str:
    try:
        names = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
        return f"{len(names)} x {names[0]}"
    except (OSError, IndexError):
        return f"{os.cpu_count()} CPUs"


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--sweep", default="ablation_radius")
    p.add_argument("--out", default=None)
    p.add_argument("--dashboard", action="store_true", help="also run sweeper.run --dashboard, same trials")
    a = p.parse_args(argv)
    from search_spaces import get_sweep

    sweep = get_sweep(a.sweep, "quick")
    trials = [{**t, "data_dir": str(ROOT / "data")} for t in sweep.trials()]
    workers = os.cpu_count() or 2

    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(workers, initializer=_init) as pool:
        direct = pool.map(_run, trials, chunksize=1)
    t_direct = time.perf_counter() - t0

    keys = [k for k in sweep.grid] + ["seed"]
    res = {"sweep": a.sweep, "trials": len(trials), "workers": workers, "machine": _cpu_name(), "direct_s": t_direct}
    print(f"{a.sweep} --preset quick: {len(trials)} trials, {workers} at a time")
    print(f"direct (process pool, no Ray): {t_direct:7.1f} s")
    for tag, flags in [("", []), *([("dashboard_", ["--dashboard"])] if a.dashboard else [])]:
        t_ray, t_loop, ray_err = _sweeper_run(a.sweep, flags, keys)
        same = all(ray_err[tuple(c[k] for k in keys)] == e for c, e in direct)
        res.update({f"{tag}ray_s": t_ray, f"{tag}ray_tuning_loop_s": t_loop,
                    f"{tag}ray_outside_loop_s": t_ray - t_loop, f"{tag}ray_overhead": t_ray / t_direct - 1,
                    f"{tag}identical_final_errors": same})
        print(f"sweeper.run {' '.join(flags)}(Ray Tune, start-up and report included): {t_ray:7.1f} s")
        print(f"  of which Tune's tuning loop {t_loop:.1f} s; Python/Ray start-up and the report {t_ray - t_loop:.1f} s")
        print(f"  Ray overhead: {100 * (t_ray / t_direct - 1):+.1f}%   identical final errors: {same}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
