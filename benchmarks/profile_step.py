"""Where a training step's time goes: wall time per step against the GPU's kernel time per step.

    PYTHONPATH=. python benchmarks/profile_step.py --device cuda --variants MT,MT+VD+MUR --compile none,step

For each variant and compile mode (the same configs as trainer_throughput.py): warm up (compilation
included), then run `--steps` steps under torch.profiler and report per step the wall time, the sum
of the GPU kernels' times, the number of kernel launches and the costliest kernels. A step whose
kernel time is far below its wall time is launch-bound (the host cannot issue kernels fast enough):
fusing kernels (torch.compile) or replaying them as a CUDA graph is what helps; a step whose kernel
time is near its wall time is bound by the kernels themselves. On the CPU only the wall time and the
number of operators mean anything (used to test the script). Writes JSON with --out.
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.trainer_throughput import VARIANTS, bench_setup, names, run_steps, write_json
from trainables.config import TrainConfig
from trainables.trainer import Trainer


def kernel_events(prof) -> list:
    """The profiler's device-side events (kernels, memcpy, memset), without the GPU-side ranges of user
    annotations (Optimizer.step#SGD.step, ...), which overlap the kernels they enclose."""
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False)]


def device_us(e) -> float:
    return e.time_range.elapsed_us()  # a device event's own span (version-stable)


def profile_config(cfg: TrainConfig, data, warmup: int, steps: int) -> dict:
    tr = Trainer(cfg, data)
    run_steps(tr, warmup)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if tr.cuda else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        run_steps(tr, steps)
        wall = time.perf_counter() - t0
    kernels = kernel_events(prof)
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e.name] = by_name.get(e.name, 0.0) + device_us(e)
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:10]
    return {"wall_ms_per_step": 1e3 * wall / steps,  # includes the profiler's own overhead
            "kernel_ms_per_step": sum(device_us(e) for e in kernels) / 1e3 / steps,
            "kernels_per_step": len(kernels) / steps,
            "cpu_ops_per_step": sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU) / steps,
            "top_kernels_ms_per_step": [(name[:90], us / 1e3 / steps) for name, us in top]}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--variants", default="MT,MT+VD+MUR")
    p.add_argument("--compile", default="none,step")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    cuda = a.device == "cuda"
    base, data = bench_setup(a.device)
    rows = []
    meta = {"device": a.device, "gpu": torch.cuda.get_device_name() if cuda else None,
            "torch_version": str(torch.__version__), "steps": a.steps, "warmup": a.warmup}
    for name in names(a.variants):
        for mode in names(a.compile):
            r = profile_config(TrainConfig(**{**base, **VARIANTS[name], "compile": mode}), data, a.warmup, a.steps)
            rows.append({"variant": name, "compile": mode, **r})
            print(f"{name:<12} {mode:<6} wall {r['wall_ms_per_step']:6.2f} ms/step  kernels "
                  f"{r['kernel_ms_per_step']:6.2f} ms/step  {r['kernels_per_step']:6.0f} launches  "
                  f"{r['cpu_ops_per_step']:6.0f} host events", flush=True)
            for k, ms in r["top_kernels_ms_per_step"][:6]:
                print(f"      {ms:6.3f} ms  {k}")
            write_json(a.out, {**meta, "rows": rows})


if __name__ == "__main__":
    main()
