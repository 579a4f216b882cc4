"""The quick preset's CPU step, one core, this tree against another checkout of the project, side by side.

    git worktree add --detach /tmp/before <commit>       # the code to compare against, outside the repo
    PYTHONPATH=. python benchmarks/cpu_step.py --before /tmp/before --out benchmarks/results/cpu_step_quick.json

Two worker processes, each with torch.set_num_threads(1): one imports `trainables` from --before, one
from this tree. Each builds one Trainer per variant (MT, MT+MUR, MT+VD+MUR) on the quick preset's
config (search_spaces.common.QUICK: digits, ConvNetSmall, batch 25 + 75; ablation_radius's schedule) and
takes `--warmup` steps. Then, round by round, the driver asks one worker at a time for `--steps` steps of
one variant and records its steps/s, alternating before and after, so that both see the same machine
load (the machine is shared). The median of `--rounds` rounds is reported with its ratio after/before.
A worker runs its own checkout's QUICK, so each side has its own defaults (the layout, channels_last).
Both trainers start from the same seed; `same_losses` says whether their first `--warmup` steps gave
bit-identical loss terms (they need not: the layout and the dropout draws change the floating-point
path).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

VARIANTS = {"MT": {}, "MT+MUR": dict(mur="direct"), "MT+VD+MUR": dict(vd=True, mur="direct", entmin_coef=0.1)}


def worker(warmup: int) -> None:
    """Build every variant's Trainer, print the warm-up's loss terms, then answer 'variant steps' lines
    on stdin with the seconds those steps took."""
    import time

    import torch

    torch.set_num_threads(1)
    from search_spaces.common import QUICK
    from trainables.config import TrainConfig
    from trainables.data import load_dataset
    from trainables.trainer import Trainer

    data = load_dataset("digits")
    trainers, losses = {}, {}
    for name, kw in VARIANTS.items():
        tr = Trainer(TrainConfig(**{**QUICK, "method": "mt", **kw, "steps": 10**6}), data)
        losses[name] = [[float(t.detach()) for t in tr.train_step().values()] for _ in range(warmup)]
        tr.check_finite()
        trainers[name] = tr
    print(json.dumps({"losses": losses, "torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        name, n = line.split()
        t0 = time.perf_counter()
        for _ in range(int(n)):
            trainers[name].train_step()
        trainers[name].check_finite()
        print(time.perf_counter() - t0, flush=True)


def start(tree: Path, warmup: int) -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", "--warmup", str(warmup)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
    return p, json.loads(p.stdout.readline())


def ask(p: subprocess.Popen, name: str, steps: int) -> float:
    p.stdin.write(f"{name} {steps}\n")
    p.stdin.flush()
    return steps / float(p.stdout.readline())


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default=None, help="a checkout of the project to compare against (outside the repo)")
    ap.add_argument("--steps", type=int, default=50, help="steps per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.warmup)
    before = Path(a.before or "").resolve()
    if not a.before or not (before / "trainables" / "trainer.py").is_file():
        ap.error(f"--before {before} holds no trainables/trainer.py; pass a checkout of this project "
                 f"(git worktree add --detach /tmp/before <commit>)")
    here = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(here))  # the parent only: a --before worker's tree may predate provenance.py
    from benchmarks.provenance import commit, cpu_name
    (pb, info_b), (pa, info_a) = start(before, a.warmup), start(here, a.warmup)
    sps = {(v, side): [] for v in VARIANTS for side in ("before", "after")}
    for i in range(a.rounds):
        for v in VARIANTS:
            sides = [("before", pb), ("after", pa)] if i % 2 == 0 else [("after", pa), ("before", pb)]
            for side, p in sides:
                sps[v, side].append(ask(p, v, a.steps))
    for p in (pb, pa):
        p.stdin.close()
        p.wait()
    rows = []
    for v in VARIANTS:
        b, f = statistics.median(sps[v, "before"]), statistics.median(sps[v, "after"])
        rows.append({"variant": v, "steps_per_s_before": b, "steps_per_s_after": f, "speedup": f / b,
                     "rounds_before": sps[v, "before"], "rounds_after": sps[v, "after"],
                     "same_losses": info_b["losses"][v] == info_a["losses"][v]})
    print("| variant | before steps/s | after steps/s | speed-up | same losses |\n|---|--:|--:|--:|:-:|")
    for r in rows:
        print(f"| {r['variant']} | {r['steps_per_s_before']:.1f} | {r['steps_per_s_after']:.1f} | "
              f"{r['speedup']:.2f}x | {r['same_losses']} |")
    if a.out:
        meta = {"machine": f"{cpu_name()}, {os.cpu_count()} cores, 1 thread per worker", "cpu": cpu_name(),
                "python_version": platform.python_version(), "torch_version": info_a["torch"],
                "threads": info_a["threads"], "before_commit": commit(before), "after_commit": commit(here),
                "steps": a.steps, "rounds": a.rounds, "warmup": a.warmup}
        Path(a.out).write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
