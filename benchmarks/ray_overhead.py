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

from benchmarks.provenance import cpu_name  # noqa: E402


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
    from sweeper.analysis.aggregate import load_trials

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


def _direct(trials: list[dict], workers: int):
    """Wall time of the trials in a spawn pool of `workers` processes, and [(config, final error)]."""
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(workers, initializer=_init) as pool:
        out = pool.map(_run, trials, chunksize=1)
    return time.perf_counter() - t0, out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--sweep", default="ablation_radius")
    p.add_argument("--out", default=None)
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of (direct, Ray) in alternating order; the ratio is of the summed times")
    p.add_argument("--dashboard", action="store_true", help="also run sweeper.run --dashboard in each round")
    a = p.parse_args(argv)
    from search_spaces import get_sweep

    sweep = get_sweep(a.sweep, "quick")
    trials = [{**t, "data_dir": str(ROOT / "data")} for t in sweep.trials()]
    workers = os.cpu_count() or 2
    keys = [k for k in sweep.grid] + ["seed"]
    variants = {"direct": None, "ray": [], **({"ray_dashboard": ["--dashboard"]} if a.dashboard else {})}
    machine = f"{os.cpu_count()} x {cpu_name()}"
    print(f"{a.sweep} --preset quick: {len(trials)} trials, {workers} at a time, {a.rounds} rounds, {machine}",
          flush=True)
    runs = {v: [] for v in variants}  # variant -> [{"s": wall, "loop_s": Tune's loop}]
    ray_errs = []  # {(grid values, seed): final test error} per Ray run
    for r in range(a.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))  # the machine's speed drifts
        for v in order:
            if variants[v] is None:
                t, direct = _direct(trials, workers)
                runs[v].append({"s": t})
            else:
                t, t_loop, ray_err = _sweeper_run(a.sweep, variants[v], keys)
                runs[v].append({"s": t, "loop_s": t_loop})
                ray_errs.append(ray_err)
            loop = f"  (Tune's loop {t_loop:.1f} s)" if variants[v] is not None else ""
            print(f"  round {r + 1} {v:<14} {t:7.1f} s{loop}", flush=True)
    same = all(err[tuple(c[k] for k in keys)] == e for err in ray_errs for c, e in direct)
    total = {v: sum(x["s"] for x in runs[v]) for v in variants}
    res = {"sweep": a.sweep, "trials": len(trials), "workers": workers, "machine": machine, "rounds": a.rounds,
           "runs": runs, "identical_final_errors": same}
    for v in variants:
        if v == "direct":
            continue
        loop = sum(x["loop_s"] for x in runs[v])
        res[f"{v}_overhead"] = total[v] / total["direct"] - 1
        res[f"{v}_loop_overhead"] = loop / total["direct"] - 1
        res[f"{v}_outside_loop_s_mean"] = (total[v] - loop) / a.rounds
        per_round = [x["s"] / d["s"] - 1 for x, d in zip(runs[v], runs["direct"])]
        res[f"{v}_overhead_per_round"] = per_round
        print(f"sweeper.run {' '.join(variants[v])}: Ray overhead {100 * res[f'{v}_overhead']:+.1f}% "
              f"(rounds: {', '.join(f'{100 * x:+.1f}%' for x in per_round)}); Tune's loop alone "
              f"{100 * res[f'{v}_loop_overhead']:+.1f}%, start-up + report + exit {res[f'{v}_outside_loop_s_mean']:.1f} s")
    print(f"identical final errors with and without Ray: {same}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
