"""Where one quick trial's time goes, part by part, beside the machine's single-thread matmul peak.

Hypothesis: a quick trial (digits, ConvNetSmall, batch 25 + 75, one CPU thread) is bound by its
training step, and that step runs far below the thread's matmul peak (small convolutions, many ops).

    PYTHONPATH=. python benchmarks/profile_quick.py --out benchmarks/results/profile_quick_cpu.json

One thread (torch.set_num_threads(1), as a quick trial's Ray actor on one CPU). For each kind of trial in
the quick start (ablation_radius --preset quick, seed 0): MT and MT+MUR (r = 1) take `--steps` steps,
each timed in the parts of trainer.Trainer.train_step, run here one by one with the trainer's own
functions: data (batch and augmentation), forward (the student's pass, the losses, the teacher's pass),
MUR's extra passes (g0, the pass at x*), backward, EMA, optimizer; `step_s` is Trainer.train_step's own
time over as many steps (the parts' sum is checked against it). Then one evaluation (a trial runs
steps / eval_every of them), one checkpoint save (at most every checkpoint_every_s and at the end) and
the FLOPs of one step (torch.utils.flop_counter). LabelSpreading is timed whole. Start-up: a fresh
interpreter importing trainables.trainer (paid once per Ray actor: Tune reuses its actors between trials,
sweeper/driver/tuner.py; in a trial's total it is counted once, as for a sweep's first trials). Ray's own scheduling per trial is not measured here: it is
benchmarks/ray_overhead.py's (`ray_overhead_cpu.json`). A trial's seconds per part = the per-step time
x the preset's steps, the evaluation's x its count.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def matmul_peak(n: int = 1024, reps: int = 10) -> float:
    """GFLOP/s of an n x n float32 matmul on this thread (best of reps)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(reps))
    return 2 * n ** 3 / best / 1e9


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def step_parts(tr, n: int) -> dict[str, float]:
    """Mean seconds per step of each part of Trainer.train_step (MT, MT+MUR direct), run one by one."""
    from trainables import schedules
    from trainables.methods import Step, mur_term, needs_input_grad

    cfg = tr.cfg
    tot = dict.fromkeys(("data", "forward", "mur", "backward", "ema", "optimizer"), 0.0)
    for _ in range(n):
        tr.student.train()
        tr.teacher.train()
        for g in tr.opt.param_groups:
            g["lr"] = schedules.lr_at(tr.step, cfg)
        tr.opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        v = tr._views()
        t1 = time.perf_counter()
        if needs_input_grad(cfg):
            v.x.requires_grad_(True)
        logits = tr.student(v.x)
        import torch.nn.functional as F

        step = Step(cfg, tr.student, tr.teacher, v, tr.gen)
        step.logits = logits
        terms = {"xent": F.cross_entropy(logits[: v.y_l.shape[0]].float(), v.y_l), "cons": cfg.spec.loss(step)}
        t2 = time.perf_counter()
        if needs_input_grad(cfg):
            terms["mur"], _ = mur_term(cfg, tr.student, v, logits, tr.gen)
        t3 = time.perf_counter()
        coef = tr.coefficients(tr.step)
        sum(coef[k] * t for k, t in terms.items()).backward()
        t4 = time.perf_counter()
        tr._ema_update(schedules.ema_decay_at(tr.step, cfg))
        t5 = time.perf_counter()
        tr.opt.step()
        t6 = time.perf_counter()
        tr.step += 1
        for k, a, b in (("data", t0, t1), ("forward", t1, t2), ("mur", t2, t3), ("backward", t3, t4),
                        ("ema", t4, t5), ("optimizer", t5, t6)):
            tot[k] += b - a
    return {k: v / n for k, v in tot.items()}


def deep(kind: str, cfg_dict: dict, steps: int, data) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    from trainables.config import TrainConfig
    from trainables.trainer import Trainer

    cfg = TrainConfig.from_dict(cfg_dict)
    tr = Trainer(cfg, data)
    for _ in range(5):
        tr.train_step()
    parts = step_parts(tr, steps)
    t = time.perf_counter()
    for _ in range(steps):
        tr.train_step()
    tr.check_finite()
    step_s = (time.perf_counter() - t) / steps
    flops, flop_error = None, None
    try:  # FlopCounterMode cannot follow MUR's autograd.grad to the input (torch refuses it): no count then
        with FlopCounterMode(display=False) as fc:
            tr.train_step()
        flops = fc.get_total_flops()
    except RuntimeError as e:
        flop_error = str(e).splitlines()[0]
        print(f"note: {kind}: no FLOP count: {flop_error}", file=sys.stderr)
    eval_s = _timed(tr.evaluate)
    with tempfile.TemporaryDirectory() as d:
        save_s = _timed(lambda: tr.save(Path(d) / "trainer.pt"))
    n_eval = -(-cfg.steps // cfg.eval_every)
    per_trial = {k: v * cfg.steps for k, v in parts.items()}
    per_trial.update(evaluation=eval_s * n_eval, checkpoint=save_s)
    return {"kind": kind, "steps_timed": steps, "trial_steps": cfg.steps, "evaluations": n_eval,
            "step_s": step_s, "parts_step_s": parts, "parts_sum_step_s": sum(parts.values()),
            "gflop_per_step": flops / 1e9 if flops else None,
            "gflops_achieved": flops / 1e9 / step_s if flops else None, "flop_count_error": flop_error,
            "eval_s": eval_s, "checkpoint_s": save_s, "trial_s": per_trial}


def startup_s() -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import trainables.trainer"], check=True, env=env)
    return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="timed steps per measure")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.steps < 1:
        ap.error("--steps must be >= 1")
    torch.set_num_threads(1)
    from search_spaces.ablation_radius import sweep
    from trainables.config import TrainConfig
    from trainables.data import load_dataset
    from trainables.trainer import train

    load0 = os.getloadavg()[0]
    trials = {}
    for t in sweep("quick").trials(1):
        kind = ("LabelSpreading" if t["method"] == "labelspreading" else
                "MT" if t.get("mur", "none") == "none" else f"MT+MUR r={t['mur_radius']:g}")
        trials.setdefault(kind, t)
    data = load_dataset("digits")
    peak = matmul_peak()
    rows = [deep(k, trials[k], a.steps, data) for k in ("MT", "MT+MUR r=1")]
    ls_s = _timed(lambda: train(TrainConfig.from_dict(trials["LabelSpreading"]), log=None))
    rows.append({"kind": "LabelSpreading", "trial_s": {"label spreading (whole trial)": ls_s}})
    start = startup_s()
    for r in rows:
        r["trial_s"]["start-up and imports (once per Ray actor)"] = start
        r["trial_total_s"] = sum(r["trial_s"].values())
        if r.get("gflops_achieved"):
            r["peak_ratio"] = r["gflops_achieved"] / peak
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.machine())
    out = {"benchmark": "profile_quick", "machine": f"{cpu}, {os.cpu_count()} cores, 1 thread",
           "torch_version": torch.__version__, "matmul_gflops_1thread": peak, "load_1min_before": load0,
           "load_1min_after": os.getloadavg()[0], "steps": a.steps, "rows": rows,
           "ray_overhead_file": "benchmarks/results/ray_overhead_cpu.json"}
    for r in rows:
        print(r["kind"], {k: round(v, 2) for k, v in r["trial_s"].items()},
              f"step {r.get('step_s', 0) * 1e3:.2f} ms" if "step_s" in r else "")
    print(f"matmul peak {peak:.1f} GFLOP/s")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
