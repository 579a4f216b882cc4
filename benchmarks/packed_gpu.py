"""Seeds per second of MT+VD+MUR on ConvNet-13 trained in packs of 1, 2, 4 and 8, eager and compiled, against
the single-seed trainer of another checkout, in one call.

Hypothesis: on a GPU a single ConvNet-13 step at batch 25 + 75 is bound by the host's kernel launches,
so a pack of S seeds (one grouped network, trainables/packed.py) trains close to S times the seeds per
second of one seed alone, until the device's compute is full.

    git worktree add --detach /tmp/before 2473a99
    PYTHONPATH=. python benchmarks/packed_gpu.py --before /tmp/before --out /tmp/gpu/packed_gpu.json
    OUT=/tmp/gpu PARTS=packs bash benchmarks/gpu_benchmarks.sh                 # the same, this tree's trainer as before
    PACKS=1,2 DEVICE=cpu STEPS=2 PARTS=packs OUT=/tmp/gb bash benchmarks/gpu_benchmarks.sh   # a check on the CPU

Worker processes one after the other (`--worker`), each importing `trainables` from one checkout, per
compile mode a `before` then an `after` one: `before` trains one seed with trainer.Trainer (the trainer
at --before, or this tree's where --before is not given: packing leaves trainer.py's single-seed path
as it was), `after` trains packs of --packs seeds with packed.PackedTrainer; each under every mode of
--compile (none: eager; step: the compiled training step, as TrainConfig.compile). Per row: `--warmup`
steps (compilation included), then the median of `--repeats` rounds of `--steps` steps (NaN check
flushed, CUDA synchronised); seeds_per_s = pack size x steps/s. On CUDA the data are random tensors of
CIFAR-10's shape resident on the GPU (the work per step does not depend on their content), on the CPU
the digits network on digits (a check that the script runs). The JSON is rewritten after every row,
so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

VARIANT = dict(method="mt", vd=True, mur="direct", entmin_coef=0.1)  # MT+VD+MUR, as trainer_throughput.py


def setup(device: str):
    """(config keys, data): ConvNet-13 on CIFAR-shaped random tensors on CUDA, the digits network on the CPU."""
    import torch

    from trainables.data import Dataset, load_dataset

    if device == "cuda":
        g = torch.Generator().manual_seed(0)
        data = Dataset("cifar10", torch.randn(50_000, 3, 32, 32, generator=g),
                       torch.randint(0, 10, (50_000,), generator=g), torch.randn(10_000, 3, 32, 32, generator=g),
                       torch.randint(0, 10, (10_000,), generator=g), 10).to("cuda")
        return dict(dataset="cifar10", arch="convnet13", num_labels=1000, translate=4, flip=True, steps=10**6,
                    lr_rampdown=0, device="cuda"), data
    return dict(dataset="digits", arch="convnet_small", num_labels=100, translate=1, steps=10**6, lr_rampdown=0,
                device="cpu"), load_dataset("digits")


def worker(side: str, packs: list[int], modes: list[str], device: str, warmup: int, steps: int, repeats: int):
    """Print one JSON line per measured row."""
    import torch

    from trainables.config import TrainConfig
    from trainables.trainer import Trainer

    base, data = setup(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for mode in modes:
        for S in ([1] if side == "before" else packs):
            cfgs = [TrainConfig(**{**base, **VARIANT, "compile": mode, "seed": s}) for s in range(S)]
            t0 = time.perf_counter()
            if side == "before":
                tr = Trainer(cfgs[0], data)
                step, flush = tr.train_step, tr.check_finite
            else:
                from trainables.packed import PackedTrainer

                tr = PackedTrainer(cfgs, data)
                step = tr.train_step
                flush = lambda: [tr.trainers[i].check_finite() for i in tr.live]
            for _ in range(warmup):
                step()
            flush()
            sync()
            warm = time.perf_counter() - t0
            rounds = []
            for _ in range(repeats):
                t1 = time.perf_counter()
                for _ in range(steps):
                    step()
                flush()
                sync()
                rounds.append(steps / (time.perf_counter() - t1))
            sps = sorted(rounds)[len(rounds) // 2]
            print(json.dumps({"side": side, "compile": mode, "pack": S, "steps_per_s": sps, "seeds_per_s": S * sps,
                              "rounds": rounds, "warmup_s": warm,
                              "max_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else None}),
                  flush=True)
            del tr
            if device == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()


def run_worker(tree: Path, side: str, mode: str, a, rows: list, meta: dict) -> None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", side, "--packs", a.packs, "--compile", mode,
           "--device", a.device, "--warmup", str(a.warmup), "--steps", str(a.steps), "--repeats", str(a.repeats)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    for line in p.stdout:
        if line.startswith("{"):
            rows.append(json.loads(line))
            r = rows[-1]
            print(f"{r['side']:<6} {r['compile']:<5} pack {r['pack']}: {r['steps_per_s']:8.2f} steps/s "
                  f"{r['seeds_per_s']:8.2f} seeds/s", flush=True)
            write(a.out, meta, rows, complete=False)
    if p.wait() != 0:
        print(f"warning: the {side} worker exited with {p.returncode}; the rows it measured are kept", file=sys.stderr)


def write(out: str | None, meta: dict, rows: list, complete: bool) -> None:
    base = {r["compile"]: r["seeds_per_s"] for r in rows if r["side"] == "before"}
    for r in rows:  # seeds/s over one seed's with the trainer before packs, in the same compile mode
        r["vs_single_before"] = r["seeds_per_s"] / base[r["compile"]] if r["compile"] in base else None
    if not out:
        return
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps({**meta, "complete": complete, "rows": rows}, indent=1) + "\n")
    tmp.replace(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="a checkout to take the single-seed trainer from (default: this tree)")
    ap.add_argument("--packs", default="1,2,4,8")
    ap.add_argument("--compile", default="none,step", help="TrainConfig.compile modes, comma-separated")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", default=None, choices=("before", "after"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        packs = [int(x) for x in a.packs.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--packs {a.packs!r}: give comma-separated pack sizes, e.g. 1,2,4,8")
    modes = [m.strip() for m in a.compile.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("none", "model", "step")]
    if bad or not packs or min(packs) < 1:
        ap.error(f"--compile takes none, model, step (got {bad}); --packs sizes >= 1 (got {packs})")
    if a.worker:
        return worker(a.worker, packs, modes, a.device, a.warmup, a.steps, a.repeats)
    here = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(here))  # the parent only: a --before worker's tree may predate provenance.py
    from benchmarks.provenance import commit
    before = Path(a.before).resolve() if a.before else here
    if not (before / "trainables" / "trainer.py").is_file():
        ap.error(f"--before {before} holds no trainables/trainer.py; pass a checkout of this project "
                 f"(git worktree add --detach /tmp/before 2473a99)")
    import torch

    gpu = torch.cuda.get_device_name() if a.device == "cuda" and torch.cuda.is_available() else None
    meta = {"benchmark": "packed_gpu", "variant": "MT+VD+MUR", "device": a.device, "gpu": gpu,
            "machine": gpu or platform.processor() or platform.machine(), "torch_version": torch.__version__,
            "before_commit": commit(before), "after_commit": commit(here), "steps": a.steps,
            "repeats": a.repeats, "warmup": a.warmup}
    rows: list = []
    for mode in modes:  # eager first, both sides: a run cut short by its time limit keeps the cheap rows
        run_worker(before, "before", mode, a, rows, meta)
        run_worker(here, "after", mode, a, rows, meta)
    write(a.out, meta, rows, complete=True)
    print("| side | compile | pack | steps/s | seeds/s | vs one seed before |\n|---|---|--:|--:|--:|--:|")
    for r in rows:
        v = r.get("vs_single_before")
        print(f"| {r['side']} | {r['compile']} | {r['pack']} | {r['steps_per_s']:.2f} | {r['seeds_per_s']:.2f} | "
              f"{'' if v is None else f'{v:.2f}x'} |")


if __name__ == "__main__":
    main()
