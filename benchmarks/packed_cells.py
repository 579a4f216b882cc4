"""The quick start's cells trained whole, one checkout against another, alternating: seeds one by one
(the old trainer) against seeds in packs (trainables/packed.py), same cells, same seeds.

Hypothesis: training a cell's seeds as one pack costs less wall time than training them one after
another, with each seed's test error still its own trial's (same distribution; not the same draws).

    git worktree add --detach /tmp/before 2473a99        # the code to compare against, outside the repo
    PYTHONPATH=. python benchmarks/packed_cells.py --before /tmp/before \\
        --out benchmarks/results/packed_cells_quick.json               # 5 cells x 8 seeds x 3 rounds x 2 sides

Each measurement is one fresh process (`--worker`, OMP_NUM_THREADS=1 and torch.set_num_threads(1), as a
quick trial's Ray actor on one CPU) that imports the `trainables` of one checkout and trains every seed
of one cell of `ablation_radius --preset quick` (search_spaces.ablation_radius): where the checkout has
trainables/packed.py and the cell can be packed (packed.pack_refusal), all its seeds as one pack, else
each seed's `trainer.train` in turn (LabelSpreading always). Its wall time counts the process's start-up
and imports. Round by round, cell by cell, the driver runs the `before` side then the `after` side, or
the other way round on odd rounds, so both see the same machine load; the load average is logged beside
each. Reported: each side's median per cell, the sums over cells (the quick start's training time on one
slot) and their ratio, and each seed's test error on both sides (`--seeds 8`: the committed run's
seeds 0-7). `--steps` shortens every trial for a check that the script runs (not a measurement).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def cells(seeds: int, steps: int | None) -> list[list[dict]]:
    """The quick start's trials grouped by cell (all keys but the seed), in the sweep's order."""
    from search_spaces.ablation_radius import sweep

    groups: dict[str, list[dict]] = {}
    for t in sweep("quick").trials(seeds):
        if steps:  # the schedules shrink with the run
            f = steps / t["steps"]
            t = {**t, "steps": steps, "eval_every": steps,
                 **{k: int(t[k] * f) for k in ("lr_rampup", "lr_rampdown", "rampup") if k in t}}
        key = json.dumps({k: v for k, v in t.items() if k != "seed"}, sort_keys=True)
        groups.setdefault(key, []).append(t)
    return list(groups.values())


def cell_name(trials: list[dict]) -> str:
    t = trials[0]
    if t["method"] == "labelspreading":
        return "LabelSpreading"
    return "MT" if t.get("mur", "none") == "none" else f"MT+MUR r={t['mur_radius']:g}"


def worker(cell: int, seeds: int, steps: int | None) -> None:
    """Train one cell's seeds with this checkout's trainables; print one JSON line."""
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    from trainables.config import TrainConfig
    from trainables.trainer import train

    trials = cells(seeds, steps)[cell]
    cfgs = [TrainConfig.from_dict(t) for t in trials]
    t1 = time.perf_counter()
    tree = Path.cwd().resolve()  # run_side starts the worker in its checkout
    trainer_file = sys.modules[train.__module__].__file__
    if not Path(trainer_file).resolve().is_relative_to(tree):
        raise SystemExit(f"error: trainables.trainer came from {trainer_file}, not from {tree}: "
                         f"an installed copy shadows the checkout; run from a venv without the project installed")
    try:
        from trainables import packed
    except ImportError:
        packed = None
    # an editable install of the project serves trainables.packed from its own tree to a checkout without it
    if packed is None or not Path(packed.__file__).resolve().is_relative_to(tree):  # the checkout before packs
        why = "this checkout has no trainables/packed.py"
    else:
        pack_refusal, train_packed = packed.pack_refusal, packed.train_packed
        why = pack_refusal(cfgs) if cfgs[0].method != "labelspreading" else "LabelSpreading trains nothing to pack"
    if why is None:
        outs = train_packed(cfgs, log=None)
    else:
        outs = [train(c, log=None) for c in cfgs]
    print(json.dumps({"packed": why is None, "why_single": why, "import_s": t1 - t0,
                      "train_s": time.perf_counter() - t1, "seeds": [c.seed for c in cfgs],
                      "test_error": [o.get("test_error") for o in outs]}), flush=True)


def run_side(tree: Path, cell: int, seeds: int, steps: int | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--cell", str(cell), "--seeds", str(seeds)]
    if steps:
        cmd += ["--steps", str(steps)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"error: the worker in {tree} failed on cell {cell} (exit {p.returncode}): "
                         f"{p.stderr.strip().splitlines()[-1] if p.stderr.strip() else 'no message'}")
    return {**json.loads(p.stdout.strip().splitlines()[-1]), "wall_s": wall, "load_1min": load}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="a checkout of the project to compare against (outside the repo)")
    ap.add_argument("--seeds", type=int, default=8, help="seeds per cell (0..N-1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="shorten every trial (a check that it runs)")
    ap.add_argument("--cells", default=None, help="comma-separated cell indices (default: every cell)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cell", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.cell, a.seeds, a.steps)
    here = Path(__file__).resolve().parents[1]
    before = Path(a.before or "").resolve()
    if not a.before or not (before / "trainables" / "trainer.py").is_file():
        ap.error(f"--before {before} holds no trainables/trainer.py; pass a checkout of this project "
                 f"(git worktree add --detach /tmp/before 2473a99)")
    if a.seeds < 1 or a.rounds < 1:
        ap.error("--seeds and --rounds must be >= 1")
    sys.path.insert(0, str(here))
    from benchmarks.provenance import commit, cpu_name  # the parent only: a --before worker's tree may predate it
    all_cells = cells(a.seeds, a.steps)
    which = [int(c) for c in a.cells.split(",")] if a.cells else list(range(len(all_cells)))
    bad = [c for c in which if not 0 <= c < len(all_cells)]
    if bad:
        ap.error(f"--cells {bad} out of range: the quick start has cells 0..{len(all_cells) - 1}")
    runs = {(c, side): [] for c in which for side in ("before", "after")}
    for r in range(a.rounds):
        for c in which:
            order = [("before", before), ("after", here)] if r % 2 == 0 else [("after", here), ("before", before)]
            for side, tree in order:
                res = run_side(tree, c, a.seeds, a.steps)
                runs[c, side].append(res)
                print(f"round {r} {cell_name(all_cells[c]):<18} {side:<6} {res['wall_s']:7.1f} s  "
                      f"(load {res['load_1min']:.1f}, packed {res['packed']})", flush=True)
    rows = []
    for c in which:
        b = statistics.median(x["wall_s"] for x in runs[c, "before"])
        f = statistics.median(x["wall_s"] for x in runs[c, "after"])
        rows.append({"cell": cell_name(all_cells[c]), "seeds": a.seeds, "wall_s_before": b, "wall_s_after": f,
                     "speedup": b / f, "packed_after": runs[c, "after"][0]["packed"],
                     "why_single_after": runs[c, "after"][0]["why_single"],
                     "test_error_before": runs[c, "before"][0]["test_error"],
                     "test_error_after": runs[c, "after"][0]["test_error"],
                     "runs_before": runs[c, "before"], "runs_after": runs[c, "after"]})
    tb, ta = sum(r["wall_s_before"] for r in rows), sum(r["wall_s_after"] for r in rows)
    print("| cell | before s | after s | speed-up | packed |\n|---|--:|--:|--:|:-:|")
    for r in rows:
        print(f"| {r['cell']} | {r['wall_s_before']:.1f} | {r['wall_s_after']:.1f} | {r['speedup']:.2f}x | "
              f"{r['packed_after']} |")
    print(f"| all | {tb:.1f} | {ta:.1f} | {tb / ta:.2f}x | |")
    if a.out:
        import torch

        meta = {"benchmark": "packed_cells", "machine": f"{cpu_name()}, {os.cpu_count()} cores, 1 thread per worker",
                "python_version": platform.python_version(), "torch_version": torch.__version__,
                "before_commit": commit(before), "after_commit": commit(here), "rounds": a.rounds,
                "steps": a.steps, "sweep": "ablation_radius --preset quick",
                "wall_s_before": tb, "wall_s_after": ta, "speedup": tb / ta}
        Path(a.out).write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
