"""A GPU sweep's price before it runs: each trial's minutes on a named GPU kind, and the sweep's wall time on N GPUs.

Prices come from sweeper/gpu_prices.json, the measured training steps/s of one trial alone on a GPU per
variant (network, method, VD, MUR kind, bf16), which the study writes from the committed trainer
benchmarks; nothing else is read. A trial's price is `steps / steps_per_s` (evaluations and start-up left
out: a lower bound; a compiled row priced at eager speed: an upper bound on that part) by the first rule
that applies:
  measured      its variant measured on the kind
  scaled        measured on another kind, times the ratio of the two kinds' steps/s over the variants
                measured on both (geometric mean); an unmeasured kind (an A100) uses the most recently
                measured kind, unscaled
  as MT         Pi, ICT and MUT (a student and a teacher pass a step, as MT) at MT's row of the same VD and MUR
  PGA k         PGA at k steps: direct MUR's time plus (k - 1) / 4 of the difference to PGA at 5 steps
  planning      none of those (another network, WRN-28-2, is never priced as ConvNet-13): the sweep's
                planning value (Sweep.minutes_per_trial)
`makespan` simulates the scheduler: trials start in the given order as soon as a GPU slot is free; a
trial with a fraction g of a GPU shares it with floor(1 / g) - 1 others, which share its throughput.

    python -m sweeper.run table_cifar --dry-run --gpu-kind H100 --gpus 8
"""
from __future__ import annotations

import functools
import heapq
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

from trainables.config import TrainConfig

TABLE = Path(__file__).resolve().parent / "gpu_prices.json"
LIKE_MT = ("pi", "ict", "mut")  # a student and an EMA teacher forward a step, as MT does


@functools.cache
def rows() -> tuple[dict, ...]:
    return tuple(json.loads(TABLE.read_text())["rows"])


def kinds() -> list[str]:
    """The measured GPU kinds, most recently measured first."""
    latest: dict[str, str] = {}
    for r in rows():
        latest[r["gpu"]] = max(latest.get(r["gpu"], ""), r["measured"])
    return sorted(latest, key=lambda k: (latest[k], k), reverse=True)


KIND = re.compile(r"\b([A-Z]\d{2,4}[A-Z]?)\b")  # "NVIDIA H100 80GB HBM3" -> H100


def gpu_kind(device: str) -> str | None:
    m = KIND.search(device.upper())
    return m.group(1) if m else None


def seen_kind() -> str | None:
    """The kind of this machine's first GPU as nvidia-smi names it (no torch import), None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return gpu_kind(out.splitlines()[0]) if out.strip() else None


def pick_kind(asked: str | None) -> tuple[str, str]:
    """(kind, how it was chosen): --gpu-kind, else the GPU this machine has, else the most recently measured."""
    if asked:
        return asked.upper(), "--gpu-kind"
    seen = seen_kind()
    if seen:
        return seen, "this machine's GPU"
    return kinds()[0], "the most recently measured kind; --gpu-kind names another"


def _sps(kind: str, key: tuple) -> tuple[float, dict] | None:
    """(steps/s, row) of a variant key (arch, method, vd, mur, bf16) measured on `kind`, else None."""
    for r in rows():
        if (r["gpu"], r["arch"], r["method"], r["vd"], r["mur"], r["bf16"]) == (kind, *key):
            return r["steps_per_s"], r
    return None


def ratio(kind: str, other: str) -> tuple[float, int] | None:
    """How many times faster `kind` trains than `other`: the geometric mean over the variants measured on both."""
    logs = []
    for r in rows():
        if r["gpu"] == other and (mine := _sps(kind, (r["arch"], r["method"], r["vd"], r["mur"], r["bf16"]))):
            logs.append(math.log(mine[0] / r["steps_per_s"]))
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


def measured_sps(kind: str, key: tuple) -> tuple[float, str] | None:
    """(steps/s, rule and measurement) of a variant key (arch, method, vd, mur, bf16) on `kind`, measured or scaled."""
    if hit := _sps(kind, key):
        return hit[0], f"measured on {kind} ({hit[1]['source']}, {hit[1]['measured']})"
    known = kinds()
    for other in known:
        if other == kind or not (hit := _sps(other, key)):
            continue
        if kind not in known:
            return hit[0], f"{kind} unmeasured: {other}'s ({hit[1]['source']}), unscaled"
        if scale := ratio(kind, other):
            return hit[0] * scale[0], (f"scaled from {other} ({hit[1]['source']}) by {kind}/{other} = {scale[0]:.2f} "
                                       f"over {scale[1]} variants measured on both")
    return None


def price(cfg: dict, kind: str, planning_min: float) -> tuple[float, str]:
    """(minutes, rule) of one trial config on `kind` (see the module docstring)."""
    c = TrainConfig.from_dict(cfg)
    mur = "direct" if c.mur == "pga" and c.mur_steps == 1 else c.mur
    method, note = (("mt", f"as MT ({c.method}) ") if c.method in LIKE_MT else (c.method, ""))
    if mur == "pga" and not c.vd:
        lo, hi = (measured_sps(kind, (c.arch, method, False, "direct", c.bf16)),
                  measured_sps(kind, (c.arch, method, False, "pga", c.bf16)))
        if lo and hi:
            per_step = 1 / lo[0] + (1 / hi[0] - 1 / lo[0]) * (c.mur_steps - 1) / 4
            return c.steps * per_step / 60, f"{note}PGA {c.mur_steps} steps between direct MUR and PGA 5, {hi[1]}"
    if mur in ("none", "direct") and (hit := measured_sps(kind, (c.arch, method, c.vd, mur, c.bf16))):
        return c.steps / hit[0] / 60, note + hit[1]
    return planning_min, "planning value (Sweep.minutes_per_trial): no measured variant is close"


def slots(gpus: float, per_trial: float) -> int:
    """Trials that run at once on `gpus` GPUs at `per_trial` GPUs each (Ray packs fractions on one GPU)."""
    if per_trial <= 1:
        return int(gpus) * max(1, int(1 / per_trial + 1e-9))
    return max(1, int(gpus // per_trial))


def makespan(minutes: list[float], order: list[int], gpus: float, per_trial: float) -> float:
    """Minutes until the last trial ends when they start in `order`, each as soon as a slot is free; a trial
    sharing a GPU with k - 1 others (fractions) runs k times slower."""
    share = max(1, int(1 / per_trial + 1e-9)) if per_trial < 1 else 1
    free = [0.0] * slots(gpus, per_trial)
    for i in order:
        heapq.heappush(free, heapq.heappop(free) + minutes[i] * share)
    return max(free) if free else 0.0


def longest_first(minutes: list[float]) -> list[int]:
    """Trial indices by price, longest first (grid order among equals)."""
    return sorted(range(len(minutes)), key=lambda i: (-minutes[i], i))


def gpu_hours(minutes: list[float], per_trial: float) -> float:
    """GPU-hours the trials hold: a trial of more than one GPU holds them all (its price is one GPU's)."""
    return sum(minutes) * max(1.0, per_trial) / 60


def cost_lines(trials: list[dict], planning_min: float, asked_kind: str | None, gpus: float,
               per_trial: float) -> list[str]:
    """The dry run's GPU lines: the kind and how it was chosen, the price with each rule's count and
    measurement, GPU-hours, and the wall time on `gpus` GPUs in grid order and longest first."""
    kind, chosen = pick_kind(asked_kind)
    priced = [price(t, kind, planning_min) for t in trials]
    minutes = [m for m, _ in priced]
    rules: dict[str, int] = {}
    for _, rule in priced:
        rules[rule] = rules.get(rule, 0) + 1
    out = [f"gpu: {kind} ({chosen}); measured kinds: {', '.join(kinds())}" +
           ("" if kind in kinds() else f"; {kind} is not measured")]
    out += [f"  {n} trial(s): {rule}" for rule, n in rules.items()]
    grid = makespan(minutes, list(range(len(minutes))), gpus, per_trial)
    first = makespan(minutes, longest_first(minutes), gpus, per_trial)
    out.append(f"price: {len(trials)} trials = {gpu_hours(minutes, per_trial):.1f} GPU-hours on {kind}; on {gpus:g} "
               f"GPU(s) at {per_trial:g} GPU per trial the sweep takes {grid / 60:.1f} h in grid order, "
               f"{first / 60:.1f} h longest first (the order the driver launches a grid's trials in)")
    return out
