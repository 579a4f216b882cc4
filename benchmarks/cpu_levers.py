"""The quick trial's remaining CPU levers, stacked, against today's step: how far they reach toward 1.8x.

Hypothesis: no lever that keeps the experiment makes a quick trial's step 1.8x cheaper on a CPU
thread, so the quick start cannot be cut 1.8x this way. The levers measured here are the ones left
after seeds in packs (benchmarks/packed_cells.py) and the settings already on (channels_last, no host
synchronisation per step, Ray's actor reuse):
  dense     the 3x3 convolution on 2x2 maps (ConvNetSmall's third) as one dense matmul per pass: on a
            2x2 map every output pixel sees every input pixel, so the conv is x (B, 4C) @ W' (4C, 4O)
            with W' built from the kernel's taps (13 MFLOP a pass at batch 100 against the
            zero-padded 29.5 that oneDNN's kernel computes, and a far faster weight gradient).
            The same function up to float rounding (`dense_conv` is checked against F.conv2d in
            tests/test_benchmarks.py), so it would change a run's digits, not its law.
  model     torch.compile of the student and teacher (TrainConfig.compile="model", the trainer's own).
  dense+model  both.
Each (kind, lever) trains in a worker process of its own (one compiled Trainer per process, see
trainables/trainer.compile_for_training), warmed once; then the rounds alternate over the workers,
one at a time, so all see the same machine. Then two eager MT+MUR workers step at once, and two
1024² matmuls run at once, against each alone: what the machine's second core adds.

    PYTHONPATH=. python benchmarks/cpu_levers.py --out benchmarks/results/cpu_levers_quick.json
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

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TIMED = ("MT", "MT+MUR r=1")  # the quick start's cells whose step is timed, by packed_cells.cell_name
LEVERS = ("eager", "dense", "model", "dense+model")
MAX_DENSE_PIXELS = 4  # maps of at most 2x2 take the dense matmul


def tap_matrix(h: int, w: int, k: int, pad: int) -> torch.Tensor:
    """T (k*k, h*w, h*w): T[t, q, p] = 1 where input pixel q feeds output pixel p through tap t
    (stride 1, `pad` zeros each side, output the input's size)."""
    if h + 2 * pad - k + 1 != h or w + 2 * pad - k + 1 != w:
        raise ValueError(f"dense_conv keeps the map's size; kernel {k} with padding {pad} does not")
    t = torch.zeros(k * k, h * w, h * w)
    for py in range(h):
        for px in range(w):
            for ky in range(k):
                for kx in range(k):
                    qy, qx = py + ky - pad, px + kx - pad
                    if 0 <= qy < h and 0 <= qx < w:
                        t[ky * k + kx, qy * w + qx, py * w + px] = 1.0
    return t


def dense_conv(x: torch.Tensor, weight: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """conv2d(x, weight, padding) as one matmul: x (B, C, H, W), weight (O, C, k, k), taps from
    tap_matrix(H, W, k, padding) -> (B, O, H, W), channels_last in memory."""
    b, c, h, w = x.shape
    o, kk = weight.shape[0], taps.shape[0]
    big = torch.einsum("tqp,oct->qcpo", taps, weight.reshape(o, c, kk)).reshape(h * w * c, h * w * o)
    y = x.permute(0, 2, 3, 1).reshape(b, h * w * c) @ big  # (B, HW*O), pixel-major as channels_last
    return y.view(b, h, w, o).permute(0, 3, 1, 2)


class DenseSmallConv(nn.Conv2d):
    """An nn.Conv2d whose forward is dense_conv: the same parameters, state_dict and EMA."""

    def _conv_forward(self, x, weight, bias):
        y = dense_conv(x, weight, self.taps)
        return y if bias is None else y + bias.view(1, -1, 1, 1)


def densify(model: nn.Module, x: torch.Tensor) -> int:
    """Turn every 3x3-or-larger stride-1 conv of `model` whose input map (seen on x) has at most
    MAX_DENSE_PIXELS pixels into a DenseSmallConv; returns how many."""
    seen = {}  # conv -> its input map's (H, W)

    def note(m, args):
        seen[m] = args[0].shape[-2:]  # returns None: the input goes on unchanged

    hooks = [m.register_forward_pre_hook(note) for m in model.modules() if type(m) is nn.Conv2d]
    was = model.training
    model.eval()
    with torch.no_grad():
        model(x)
    model.train(was)
    for hk in hooks:
        hk.remove()
    n = 0
    for m, (h, w) in seen.items():
        k = m.kernel_size[0]
        if h * w <= MAX_DENSE_PIXELS and k > 1 and m.stride == (1, 1) and m.groups == 1 and m.dilation == (1, 1):
            m.__class__ = DenseSmallConv
            m.taps = tap_matrix(h, w, k, m.padding[0]).to(m.weight)  # its dtype and device
            n += 1
    return n


def quick_start() -> tuple[dict[str, dict], dict[str, int]]:
    """The quick start's trained cells, read off the sweep (benchmarks/packed_cells.cells): each timed
    cell's seed-0 trial config, and how many of the sweep's trials each timed cell's step prices. Every
    MT+MUR cell is priced at r = 1's step: the radius scales x* and adds or removes no pass.
    LabelSpreading trains no step and is left out."""
    from benchmarks.packed_cells import cell_name, cells
    from search_spaces.ablation_radius import QUICK_SEEDS

    configs, trials = {}, dict.fromkeys(TIMED, 0)
    for cell in cells(QUICK_SEEDS, None):
        name = cell_name(cell)
        if name == "LabelSpreading":
            continue
        if name in TIMED:
            configs[name] = cell[0]
        trials["MT" if name == "MT" else "MT+MUR r=1"] += len(cell)
    return configs, trials


# ----------------------------------------------------------------------------- worker

def worker(kind: str, lever: str) -> None:
    """Build the quick preset's Trainer for `kind` with `lever`; then answer stdin lines:
    `warm N`, `time N` (ms per step over N steps) and `matmul N` (GFLOP/s of N 1024² matmuls)."""
    torch.set_num_threads(1)
    from trainables.config import TrainConfig
    from trainables.trainer import Trainer

    cfg = TrainConfig.from_dict({**quick_start()[0][kind], "compile": "model" if "model" in lever else "none"})
    tr = Trainer(cfg)
    n_dense = 0
    if "dense" in lever:
        probe = tr.data.x_train[:2]
        n_dense = densify(tr.student, probe)
        if tr.teacher is not None:
            densify(tr.teacher, probe)
    print(json.dumps({"ready": True, "dense_convs": n_dense}), flush=True)
    for line in sys.stdin:
        cmd, n = line.split()
        n = int(n)
        if cmd == "matmul":  # a loop's mean, not profile_quick.matmul_peak's best single: two at once must overlap
            a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
            a @ b
            t = time.perf_counter()
            for _ in range(n):
                a @ b
            print(json.dumps({"gflops": 2 * 1024 ** 3 * n / (time.perf_counter() - t) / 1e9}), flush=True)
            continue
        t = time.perf_counter()
        for _ in range(n):
            tr.train_step()
        tr.check_finite()
        print(json.dumps({"ms": (time.perf_counter() - t) / n * 1e3}), flush=True)


class Worker:
    def __init__(self, kind: str, lever: str):
        self.kind, self.lever = kind, lever
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", kind, lever], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.info = self.read()

    def send(self, cmd: str, n: int) -> None:
        self.proc.stdin.write(f"{cmd} {n}\n")
        self.proc.stdin.flush()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.kind} / {self.lever} worker ended (exit {self.proc.wait()}); "
                               f"its error is printed above")
        return json.loads(line)

    def ask(self, cmd: str, n: int) -> dict:
        self.send(cmd, n)
        return self.read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def side_by_side(kinds, levers, rounds: int, steps: int, warmup: int) -> list[dict]:
    """Median ms per step of each (kind, lever), the workers one at a time, alternating per round."""
    workers = [Worker(k, lv) for k in kinds for lv in levers]
    try:
        for w in workers:  # one at a time: a compiling worker does not slow another's timing
            w.ask("warm", warmup)
        ms = {id(w): [] for w in workers}
        for r in range(rounds):
            order = workers if r % 2 == 0 else workers[::-1]
            for w in order:
                ms[id(w)].append(w.ask("time", steps)["ms"])
    finally:
        for w in workers:
            w.close()
    rows = []
    for k in kinds:
        base = statistics.median(next(ms[id(w)] for w in workers if w.kind == k and w.lever == "eager"))
        for w in (w for w in workers if w.kind == k):
            med = statistics.median(ms[id(w)])
            rows.append({"kind": k, "lever": w.lever, "dense_convs": w.info["dense_convs"], "ms_per_step": med,
                         "ms_rounds": ms[id(w)], "speedup_vs_eager": base / med})
    return rows


def two_cores(rounds: int, steps: int, matmuls: int) -> dict:
    """What the second core adds: two eager MT+MUR workers (and two matmul loops) alone, then at once."""
    pair = [Worker("MT+MUR r=1", "eager") for _ in range(2)]
    try:
        for w in pair:
            w.ask("warm", 20)
        solo_ms, pair_ms, solo_gf, pair_gf = [], [], [], []
        for _ in range(rounds):
            solo_ms += [w.ask("time", steps)["ms"] for w in pair]
            for w in pair:
                w.send("time", steps)
            pair_ms += [w.read()["ms"] for w in pair]
            solo_gf += [w.ask("matmul", matmuls)["gflops"] for w in pair]
            for w in pair:
                w.send("matmul", matmuls)
            pair_gf += [w.read()["gflops"] for w in pair]
    finally:
        for w in pair:
            w.close()
    return {"step_ms_alone": statistics.median(solo_ms), "step_ms_two_at_once": statistics.median(pair_ms),
            "matmul_gflops_alone": statistics.median(solo_gf), "matmul_gflops_two_at_once": statistics.median(pair_gf),
            "throughput_two_vs_one_step": 2 * statistics.median(solo_ms) / statistics.median(pair_ms),
            "throughput_two_vs_one_matmul": 2 * statistics.median(pair_gf) / statistics.median(solo_gf)}


def quick_start_projection(rows: list[dict], trials: dict[str, int], steps_per_trial: int) -> dict:
    """The quick start's training steps, s of one thread: today (eager) against each kind's fastest lever.
    trials: how many trials each kind's step prices (quick_start())."""
    today = best = 0.0
    best_lever = {}
    for k, n in trials.items():
        mine = [r for r in rows if r["kind"] == k]
        eager = next(r for r in mine if r["lever"] == "eager")["ms_per_step"]
        fast = min(mine, key=lambda r: r["ms_per_step"])
        today += n * steps_per_trial * eager / 1e3
        best += n * steps_per_trial * fast["ms_per_step"] / 1e3
        best_lever[k] = fast["lever"]
    return {"training_s_today": today, "training_s_best": best, "speedup": today / best, "best_lever": best_lever,
            "trials": trials, "steps_per_trial": steps_per_trial}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="JSON file to write (default: print only)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds; the median is kept")
    ap.add_argument("--steps", type=int, default=60, help="timed steps per worker and round")
    ap.add_argument("--warmup", type=int, default=20, help="steps before timing (compiles under `model`)")
    ap.add_argument("--levers", default=",".join(LEVERS), help=f"comma-separated, of {', '.join(LEVERS)}")
    ap.add_argument("--no-two-cores", action="store_true", help="skip the two-workers-at-once part")
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "LEVER"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(*a.worker)
    levers = a.levers.split(",")
    bad = [lv for lv in levers if lv not in LEVERS]
    if bad or "eager" not in levers:
        ap.error(f"unknown lever(s) {bad}; choose from {', '.join(LEVERS)}, eager included (the baseline)")
    if min(a.rounds, a.steps, a.warmup) < 1:
        ap.error("--rounds, --steps and --warmup must be >= 1")
    from benchmarks.provenance import commit, cpu_name
    configs, trials = quick_start()
    load_before = os.getloadavg()[0]
    rows = side_by_side(list(TIMED), levers, a.rounds, a.steps, a.warmup)
    out = {"benchmark": "cpu_levers", "machine": f"{cpu_name()}, {os.cpu_count()} cores, 1 thread per worker",
           "cpu_kernels": torch.backends.cpu.get_cpu_capability(), "python_version": platform.python_version(),
           "torch_version": torch.__version__, "commit": commit(ROOT), "rounds": a.rounds, "steps": a.steps,
           "warmup": a.warmup, "load_1min_before": load_before, "rows": rows,
           "quick_start": quick_start_projection(rows, trials, configs["MT"]["steps"])}
    if not a.no_two_cores:
        out["two_cores"] = two_cores(a.rounds, a.steps, 20)
    out["load_1min_after"] = os.getloadavg()[0]
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        tmp = Path(a.out + ".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(a.out)


if __name__ == "__main__":
    main()
