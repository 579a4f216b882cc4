"""Trainer throughput of every variant side by side: steps/s and images/s, ratio to the base method.

    PYTHONPATH=. python benchmarks/trainer_throughput.py                 # CPU: digits, ConvNetSmall
    PYTHONPATH=. python benchmarks/trainer_throughput.py --device cuda   # GPU: ConvNet-13 on CIFAR-shaped data
    PYTHONPATH=. python benchmarks/trainer_throughput.py --device cuda --bf16 --channels-last

Variants (Mean Teacher base): MT, MT+VD, MT+MUR (direct), MT+MUR (PGA, 5 steps), MT+VD+MUR.
One warm-up of `--warmup` steps, then `--steps` timed steps (CUDA synchronised before and after).
On CUDA the data set is random tensors of CIFAR-10's shape resident on the GPU: the content does
not change the work per step. Prints a Markdown table and writes JSON with --out.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from trainables.config import TrainConfig
from trainables.data import Dataset, load_dataset
from trainables.trainer import Trainer

VARIANTS = {
    "MT": dict(method="mt"),
    "MT+VD": dict(method="mt", vd=True, entmin_coef=0.1),
    "MT+MUR direct": dict(method="mt", mur="direct"),
    "MT+MUR PGA 5 steps": dict(method="mt", mur="pga", mur_steps=5),
    "MT+VD+MUR": dict(method="mt", vd=True, mur="direct", entmin_coef=0.1),
}


FIXMATCH_VARIANTS = {  # the fixmatch sweep's paper preset (64 + 448 images per step)
    "FM": dict(vd=False, mur="none"),
    "FM+VD": dict(vd=True, mur="none"),
    "FM+MUR": dict(vd=False, mur="direct"),
}


def synthetic_cifar(device) -> Dataset:
    g = torch.Generator().manual_seed(0)
    return Dataset("cifar10", torch.randn(50_000, 3, 32, 32, generator=g), torch.randint(0, 10, (50_000,), generator=g),
                   torch.randn(10_000, 3, 32, 32, generator=g), torch.randint(0, 10, (10_000,), generator=g), 10).to(device)


def bench(cfg: TrainConfig, data: Dataset, warmup: int, steps: int) -> float:
    tr = Trainer(cfg, data)
    for _ in range(warmup):
        tr.train_step()
    if tr.cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        tr.train_step()
    if tr.cuda:
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - t0)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--family", choices=("mt", "fixmatch"), default="mt")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    cuda = a.device == "cuda"
    if cuda:
        base = dict(dataset="cifar10", arch="convnet13", num_labels=1000, translate=4, flip=True, steps=10**6,
                    lr_rampdown=0, device="cuda", bf16=a.bf16, channels_last=a.channels_last)
        data, machine = synthetic_cifar("cuda"), torch.cuda.get_device_name()
        steps, warmup = a.steps or 100, a.warmup or 20
    else:
        base = dict(dataset="digits", arch="convnet_small", num_labels=100, translate=1, steps=10**6,
                    lr_rampdown=0, device="cpu")
        data, machine = load_dataset("digits"), f"{platform.processor() or 'cpu'} x{torch.get_num_threads()} threads"
        steps, warmup = a.steps or 60, a.warmup or 5
    variants = VARIANTS
    if a.family == "fixmatch":
        from search_spaces.fixmatch import FIXMATCH_CIFAR, FIXMATCH_QUICK

        fm = FIXMATCH_CIFAR if cuda else FIXMATCH_QUICK
        keep = ("dataset", "arch", "num_labels", "translate", "device", "bf16", "channels_last")
        base = {**fm, **{k: base[k] for k in keep if k in base}, "steps": 10**6, "lr_rampdown": 0}
        variants = FIXMATCH_VARIANTS
    rows = []
    for name, kw in variants.items():
        cfg = TrainConfig(**{**base, **kw})
        sps = bench(cfg, data, warmup, steps)
        rows.append({"variant": name, "steps_per_s": sps, "images_per_s": sps * (cfg.batch_labeled + cfg.batch_unlabeled)})
    base_sps = rows[0]["steps_per_s"]
    print(f"\n{cfg.arch} on {cfg.dataset}-shaped data, batch {cfg.batch_labeled}+{cfg.batch_unlabeled}, "
          f"device {a.device} ({machine}), bf16={a.bf16}, channels_last={a.channels_last}, torch {torch.__version__}\n")
    print(f"| variant | steps/s | images/s | time per step vs {rows[0]['variant']} |\n|---|--:|--:|--:|")
    for r in rows:
        r["slowdown_vs_base"] = base_sps / r["steps_per_s"]
        print(f"| {r['variant']} | {r['steps_per_s']:.1f} | {r['images_per_s']:.0f} | {r['slowdown_vs_base']:.2f}x |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"machine": machine, "device": a.device, "bf16": a.bf16, "channels_last": a.channels_last,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
