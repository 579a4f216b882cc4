"""Trainer throughput of every variant side by side: steps/s and images/s, ratio to the base method.

    PYTHONPATH=. python benchmarks/trainer_throughput.py                 # CPU: digits, ConvNetSmall
    PYTHONPATH=. python benchmarks/trainer_throughput.py --device cuda   # GPU: ConvNet-13 on CIFAR-shaped data
    PYTHONPATH=. python benchmarks/trainer_throughput.py --device cuda --bf16 --channels-last
    PYTHONPATH=. python benchmarks/trainer_throughput.py --device cuda --family fixmatch --out fm.json  # WRN-28-2
    PYTHONPATH=. python benchmarks/trainer_throughput.py --compile none --steps 30    # eager only
    PYTHONPATH=. python benchmarks/trainer_throughput.py --variants MT,MT+VD+MUR      # a subset
    OUT=/tmp/gpu bash benchmarks/gpu_benchmarks.sh   # the GPU benchmarks in priority order

Variants (Mean Teacher base): MT, MT+VD, MT+MUR (direct), MT+MUR (PGA, 5 steps), MT+VD+MUR; with
--family fixmatch: FM, FM+VD, FM+MUR on the fixmatch sweep's network and batch (GPU: the paper preset's
WRN-28-2, CPU: the quick preset's; fixmatch_base). Each variant runs under every TrainConfig.compile mode of
--compile (default none,model,step; graphs on request), side by side in one process: `--warmup` steps (compilation
included; compile_s = the first step's time minus the second's, for graphs the first two steps' minus
twice the third's, which records the graphs; reported separately), then the median
of `--repeats` rounds of `--steps` timed steps (NaN check flushed, CUDA synchronised before and
after). On CUDA the data set is random tensors of CIFAR-10's shape resident on the GPU: the content
does not change the work per step.
Prints a Markdown table and writes JSON with --out (machine: CPU model or GPU name, torch version),
rewritten after every measured row ("complete": false until the last) so that a run cut short by a
timeout keeps what it measured. compile_pct_paper_run: compile_s as a share of a paper-length run
(PAPER_STEPS steps at the measured speed plus compile_s); a paper preset compiles a row only where
this is at most 1 % (search_spaces/common.py PAPER_COMPILED).

"fp32" in a result's name means float32 tensors without autocast: on Ampere and newer GPUs PyTorch's
default lets cuDNN run those convolutions in TF32 (torch.backends.cudnn.allow_tf32), so an fp32 row
times TF32 convolutions, except VAT's power iteration, which turns TF32 off (mur.no_tf32).

The GPU figures are benchmarks/results/trainer_throughput_<card>_*.json, made by
benchmarks/gpu_benchmarks.sh. The CPU numbers from this script check that every mode runs (graphs is
step there); they say little about the GPU, where a small model's step can be bound by the host's
kernel launches rather than by compute.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from benchmarks.provenance import ROOT, commit, cpu_name
from search_spaces.common import CIFAR
from search_spaces.fixmatch import FIXMATCH_CIFAR, FIXMATCH_QUICK
from trainables.config import COMPILE_MODES, TrainConfig
from trainables.data import Dataset, load_dataset
from trainables.files import atomic_write
from trainables.trainer import Trainer

VARIANTS = {
    "MT": dict(method="mt"),
    "MT+VD": dict(method="mt", vd=True, entmin_coef=0.1),
    "MT+MUR direct": dict(method="mt", mur="direct"),
    "MT+MUR PGA 5 steps": dict(method="mt", mur="pga", mur_steps=5),
    "MT+VD+MUR": dict(method="mt", vd=True, mur="direct", entmin_coef=0.1),
}


PAPER_STEPS = {"mt": CIFAR["steps"], "fixmatch": FIXMATCH_CIFAR["steps"]}  # a paper-protocol run (the presets')


FIXMATCH_VARIANTS = {  # the fixmatch sweep's paper preset (64 + 448 images per step)
    "FM": dict(vd=False, mur="none"),
    "FM+VD": dict(vd=True, mur="none"),
    "FM+MUR": dict(vd=False, mur="direct"),
}


def synthetic_cifar(device) -> Dataset:
    g = torch.Generator().manual_seed(0)
    return Dataset("cifar10", torch.randn(50_000, 3, 32, 32, generator=g), torch.randint(0, 10, (50_000,), generator=g),
                   torch.randn(10_000, 3, 32, 32, generator=g), torch.randint(0, 10, (10_000,), generator=g), 10).to(device)


def bench_setup(device: str) -> tuple[dict, Dataset]:
    """The TrainConfig keys every benchmark here shares, and its data: on CUDA ConvNet-13 on random
    tensors of CIFAR-10's shape resident on the GPU (the content does not change the work per step), on
    the CPU ConvNetSmall on digits; the paper's batch 25+75 (TrainConfig's default) and no LR ramp-down."""
    if device == "cuda":
        return (dict(dataset="cifar10", arch="convnet13", num_labels=1000, translate=4, flip=True, steps=10**6,
                     lr_rampdown=0, device="cuda"), synthetic_cifar("cuda"))
    return (dict(dataset="digits", arch="convnet_small", num_labels=100, translate=1, steps=10**6, lr_rampdown=0,
                 device="cpu"), load_dataset("digits"))


def run_steps(tr: Trainer, n: int) -> None:
    """n training steps, then the deferred NaN check and (CUDA) a sync: the steps are done when it returns."""
    for _ in range(n):
        tr.train_step()
    tr.check_finite()
    if tr.cuda:
        torch.cuda.synchronize()


def names(csv: str) -> list[str]:
    """A comma-separated option as its items (--variants, --compile)."""
    return [v.strip() for v in csv.split(",") if v.strip()]


def bench(cfg: TrainConfig, data: Dataset, warmup: int, steps: int, repeats: int = 1) -> dict:
    """Median steps/s of `repeats` rounds of `steps` steps after `warmup` (compilation included) steps,
    and the warm-up's cost."""
    t0 = time.perf_counter()
    tr = Trainer(cfg, data)
    run_steps(tr, warmup)
    t1 = time.perf_counter()
    rounds = []
    for _ in range(repeats):
        t2 = time.perf_counter()
        run_steps(tr, steps)
        rounds.append(steps / (time.perf_counter() - t2))
    sps = sorted(rounds)[len(rounds) // 2]
    return {"steps_per_s": sps, "steps_per_s_rounds": rounds, "compile_s": tr.compile_s, "warmup_s": t1 - t0,
            "warmup_extra_s": (t1 - t0) - warmup / sps}  # build + warm-up beyond steady-state steps


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of --steps steps; the median is reported")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--family", choices=("mt", "fixmatch"), default="mt")
    p.add_argument("--compile", default="none,model,step", help="TrainConfig.compile modes, comma-separated")
    p.add_argument("--variants", default=None, help="comma-separated variant names (default: all of --family)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    cuda = a.device == "cuda"
    base, data = bench_setup(a.device)
    if cuda:
        base.update(bf16=a.bf16, channels_last=a.channels_last)
        machine = f"{torch.cuda.get_device_name()} (CPU {cpu_name()})"
        steps, warmup = a.steps or 100, a.warmup or 20
    else:
        machine = f"{cpu_name()} x{torch.get_num_threads()} threads"
        steps, warmup = a.steps or 60, a.warmup or 5
    variants = VARIANTS
    if a.family == "fixmatch":
        base = fixmatch_base(base, cuda)
        variants = FIXMATCH_VARIANTS
    if a.variants:
        wanted = names(a.variants)
        unknown = [v for v in wanted if v not in variants]
        if unknown:
            p.error(f"unknown --variants {unknown} for --family {a.family}; choose from {', '.join(variants)}")
        variants = {v: variants[v] for v in wanted}
    order = lambda m: COMPILE_MODES.index(m) if m in COMPILE_MODES else len(COMPILE_MODES)  # eager first
    modes = sorted(set(names(a.compile)), key=order)  # TrainConfig checks names
    if any(m != "none" for m in modes):  # compile_s needs two timed steps (graphs: three, Trainer._timed_steps)
        warmup = max(warmup, 3 if "graphs" in modes else 2)
    rows = []
    meta = {"machine": machine, "device": a.device, "cpu": cpu_name(), "commit": commit(ROOT),
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "torch_version": str(torch.__version__), "python_version": platform.python_version(),
            "threads": torch.get_num_threads(), "bf16": a.bf16, "channels_last": a.channels_last,
            "family": a.family, "arch": base["arch"], "compile_modes": modes, "steps": steps, "warmup": warmup,
            "repeats": a.repeats, "paper_steps": PAPER_STEPS[a.family]}
    for name, kw in variants.items():  # the modes of one variant back to back: this machine's speed drifts
        for mode in modes:
            cfg = TrainConfig(**{**base, **kw, "compile": mode})
            r = bench(cfg, data, warmup, steps, a.repeats)
            share = compile_share(r["compile_s"], r["steps_per_s"], PAPER_STEPS[a.family])
            rows.append({"variant": name, "compile": mode, **r, "compile_pct_paper_run": share,
                         "images_per_s": r["steps_per_s"] * (cfg.batch_labeled + cfg.batch_unlabeled)})
            print(f"{name:<20} {mode:<6} {r['steps_per_s']:7.1f} steps/s  compile {r['compile_s']:.1f} s", flush=True)
            ratios(rows)
            write_json(a.out, {**meta, "nan_check_every": cfg.nan_check_every, "complete": False, "rows": rows})
    print(f"\n{cfg.arch} on {cfg.dataset}-shaped data, batch {cfg.batch_labeled}+{cfg.batch_unlabeled}, "
          f"device {a.device} ({machine}), bf16={a.bf16}, channels_last={a.channels_last}, torch {torch.__version__}, "
          f"median of {a.repeats} x {steps} timed steps after {warmup} warm-up steps\n")
    print(f"| variant | compile | steps/s | images/s | time per step vs {rows[0]['variant']} (same mode) "
          f"| speed-up vs eager | compile s | compile % of a paper run |\n|---|---|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(f"| {r['variant']} | {r['compile']} | {r['steps_per_s']:.1f} | {r['images_per_s']:.0f} | "
              f"{r['slowdown_vs_base']:.2f}x | {r['speedup_vs_eager']:.2f}x | {r['compile_s']:.1f} | "
              f"{r['compile_pct_paper_run']:.2f} |")
    write_json(a.out, {**meta, "nan_check_every": cfg.nan_check_every, "complete": True, "rows": rows})


def fixmatch_base(base: dict, cuda: bool) -> dict:
    """The fixmatch sweep's settings for a benchmark: the paper preset's on CUDA (its network, 64 + 448 images
    per step), the quick preset's on the CPU, on bench_setup's data and device, for 10^6 steps."""
    fm = FIXMATCH_CIFAR if cuda else FIXMATCH_QUICK
    keep = ("dataset", "num_labels", "translate", "device", "bf16", "channels_last")
    return {**fm, **{k: base[k] for k in keep if k in base}, "steps": 10**6, "lr_rampdown": 0}


def compile_share(compile_s: float, steps_per_s: float, paper_steps: int) -> float:
    """Compile time in percent of a paper-length run: paper_steps at steps_per_s, plus the compiling."""
    return 100 * compile_s / (paper_steps / steps_per_s + compile_s)


def ratios(rows: list[dict]) -> None:
    """Each row's time per step against the first variant in its mode, and its speed-up against the
    same variant eager (NaN until that row is measured)."""
    first = rows[0]["variant"]
    base_sps = {r["compile"]: r["steps_per_s"] for r in rows if r["variant"] == first}
    eager_sps = {r["variant"]: r["steps_per_s"] for r in rows if r["compile"] == "none"}
    for r in rows:
        r["slowdown_vs_base"] = base_sps[r["compile"]] / r["steps_per_s"] if r["compile"] in base_sps else float("nan")
        r["speedup_vs_eager"] = r["steps_per_s"] / eager_sps[r["variant"]] if r["variant"] in eager_sps else float("nan")


def write_json(path: str | None, obj: dict) -> None:
    """obj as JSON at path (if any), replaced atomically so that a kill mid-write keeps the last one."""
    if not path:
        return
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=1)))

if __name__ == "__main__":
    main()
