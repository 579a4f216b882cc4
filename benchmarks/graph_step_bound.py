"""How fast could a CUDA-graphed training step be? Trainer.train_step captured once with
torch.cuda.graph and replayed, against the same Trainer's eager step, side by side (CUDA only).

    PYTHONPATH=. python benchmarks/graph_step_bound.py --variants MT,MT+VD+MUR --compile none,step --out g.json

Why: on the H200 plain MT's step is bound by the host launching ~400 kernels: 8.2 ms a step
(122.5 steps/s, benchmarks/results/trainer_throughput_h200_compile_mt.json) for 6.1 ms of kernels eager
and 4.3 ms compiled (benchmarks/results/profile_step_h200_mt.json), so neither mode of
TrainConfig.compile made it faster. A replayed graph launches nothing from the host.
What it measures is an UPPER BOUND, not a training run: the capture freezes everything the host
decides per step (the batch indices, drawn once; the learning rate, the ramp-up coefficients and the
EMA decay at the capture step), and the NaN check is off. The random draws (augmentation, noise,
dropout) still advance on every replay. If the bound pays, a graphed mode in the Trainer needs those
as device tensors updated in place before each replay (static inputs); if it does not, nothing is lost.
A row that cannot be captured is reported with its error and the next row runs.
"""
from __future__ import annotations

import argparse
import time
import traceback

import torch

from benchmarks.trainer_throughput import VARIANTS, bench_setup, names, run_steps, write_json
from trainables.config import TrainConfig
from trainables.data import augment
from trainables.methods import Views
from trainables.trainer import Trainer


def freeze_batch(tr: Trainer) -> None:
    """Replace tr._views by one that gathers a fixed batch already on the device (no host copy in the
    graph); augmentation stays inside the step, as in Trainer._views."""
    cfg, d = tr.cfg, tr.data
    idx_l, idx_u = tr.batcher.next()
    idx = torch.cat([idx_l, idx_u]).to(tr.device)  # (B,) labeled first
    L = len(idx_l)

    def views() -> Views:
        x = d.x_train[idx]  # (B, C, H, W)
        return Views(x=augment(x, cfg.translate, cfg.flip, tr.gen, cfg.translate_pad),
                     x2=augment(x, cfg.translate, cfg.flip, tr.gen, cfg.translate_pad),
                     y_l=d.y_train[idx[:L]], x0=x if cfg.bn_clean_pass else None)

    tr._views = views


def timed(fn, steps: int, repeats: int) -> float:
    """Median steps/s of `repeats` rounds of `steps` calls, the device synchronised around each round."""
    rounds = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
        rounds.append(steps / (time.perf_counter() - t0))
    return sorted(rounds)[len(rounds) // 2]


def measure(cfg: TrainConfig, data, warmup: int, steps: int, repeats: int) -> dict:
    tr = Trainer(cfg, data)
    freeze_batch(tr)
    side = torch.cuda.Stream()  # warm-up (compilation, lazy optimizer state) off the capture stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run_steps(tr, warmup)
    torch.cuda.current_stream().wait_stream(side)
    eager = timed(tr.train_step, steps, repeats)  # the same frozen batch, launched by the host
    graph = torch.cuda.CUDAGraph()
    if hasattr(graph, "register_generator_state"):  # the augmentation's own generator advances per replay
        graph.register_generator_state(tr.gen)
    with torch.cuda.graph(graph):
        tr.train_step()
    replay = timed(graph.replay, steps, repeats)
    return {"eager_steps_per_s": eager, "graph_steps_per_s": replay, "speedup": replay / eager}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--variants", default="MT,MT+VD+MUR")
    p.add_argument("--compile", default="none,step")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device (a CPU has no graphs to capture)")
    base, data = bench_setup("cuda")
    base["nan_check_every"] = 10**9  # no host sync inside the capture
    meta = {"gpu": torch.cuda.get_device_name(), "torch_version": str(torch.__version__), "steps": a.steps,
            "warmup": a.warmup, "repeats": a.repeats}
    rows = []
    for name in names(a.variants):
        for mode in names(a.compile):
            row = {"variant": name, "compile": mode}
            try:
                row.update(measure(TrainConfig(**{**base, **VARIANTS[name], "compile": mode}), data,
                                   a.warmup, a.steps, a.repeats))
                print(f"{name:<12} {mode:<6} eager {row['eager_steps_per_s']:7.1f}  graph "
                      f"{row['graph_steps_per_s']:7.1f} steps/s  ({row['speedup']:.2f}x)", flush=True)
            except Exception as e:  # recorded and printed, the next row still runs
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                print(f"{name:<12} {mode:<6} FAILED {row['error']}", flush=True)
                traceback.print_exc()
            rows.append(row)
            write_json(a.out, {**meta, "rows": rows})


if __name__ == "__main__":
    main()
