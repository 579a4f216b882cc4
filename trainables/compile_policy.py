"""Which TrainConfig.compile mode "auto" runs: a compiled training step only where it was measured clearly
faster than eager on CUDA, and only for runs long enough that compiling costs at most 1 % of the run.

The measurements are read from their committed result files (`measured_cuda`), not copied here.

    PYTHONPATH=. python benchmarks/trainer_throughput.py --device cuda --compile none,step,graphs   # remeasure
    pytest tests/test_compile.py -q -k auto
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from trainables.config import TrainConfig

# Mean Teacher on ConvNet-13 (batch 25+75, fp32, no bn_clean_pass), as benchmarks/trainer_throughput.py
# writes it on the H200: the runs of the compiled modes against eager in one process each
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
MEASURED_FILES = "trainer_throughput_h200_*_mt*.json"
MEASURED_METHOD, MEASURED_ARCH = "mt", "convnet13"
VARIANTS = {"MT": (False, "none"), "MT+VD": (True, "none"), "MT+VD+MUR": (True, "direct")}  # row -> (vd, mur)
AUTO_MODES = ("step", "graphs")  # the modes auto may pick
MIN_SPEEDUP = 1.25  # "clearly faster": at least this many times eager's steps/s in the same process
MAX_COMPILE_SHARE = 0.01  # compiling may cost at most 1 % of the run


@functools.cache
def measured_cuda(results: Path = RESULTS) -> dict[tuple[bool, str], list[tuple[str, float, float]]]:
    """(vd, mur) -> the AUTO_MODES at least MIN_SPEEDUP x eager, fastest first, as (mode, steps/s, compile
    seconds), each rounded to 0.1, from the fp32 MEASURED_FILES in `results`. A run that measured
    graphs (it also re-measured step beside it) supersedes a run without graphs for the modes both
    measured. A graphs row measured after step's in one process is counted at step's compile seconds:
    graphs compiles what step compiles, and the second compile found inductor's caches warm."""
    files = sorted(results.glob(MEASURED_FILES))
    if not files:
        raise FileNotFoundError(f"compile='auto' reads its measurements from {results / MEASURED_FILES}, which "
                                f"matched nothing; run from the repository checkout, or set compile to none, "
                                f"model, step or graphs")
    runs = [json.loads(f.read_text()) for f in files]
    runs = [r for r in runs if not r["bf16"] and not r["channels_last"] and r["family"] == MEASURED_METHOD]
    rows: dict[tuple[tuple[bool, str], str], tuple[bool, float, float, float]] = {}  # (with_graphs, speed-up, ...)
    for run in runs:
        with_graphs = "graphs" in run["compile_modes"]
        for variant, key in VARIANTS.items():
            by_mode = {r["compile"]: r for r in run["rows"] if r["variant"] == variant}
            for mode in AUTO_MODES:
                r = by_mode.get(mode)
                if r is None or (key, mode) in rows and rows[key, mode][0] and not with_graphs:
                    continue
                after_step = mode == "graphs" and "step" in by_mode
                compile_s = by_mode["step"]["compile_s"] if after_step else r["compile_s"]
                rows[key, mode] = (with_graphs, r["steps_per_s"] / by_mode["none"]["steps_per_s"],
                                   round(r["steps_per_s"], 1), round(compile_s, 1))
    out: dict[tuple[bool, str], list[tuple[str, float, float]]] = {}
    for (key, mode), (_, speedup, steps_per_s, compile_s) in rows.items():
        if speedup >= MIN_SPEEDUP:
            out.setdefault(key, []).append((mode, steps_per_s, compile_s))
    return {k: sorted(v, key=lambda m: -m[1]) for k, v in out.items()}


def resolve_compile(mode: str, device: torch.device, cfg: TrainConfig) -> str:
    """TrainConfig.compile as run. "auto" is, on CUDA, the fastest mode in measured_cuda() for the config
    whose compile is at most MAX_COMPILE_SHARE of the run at the measured speed, i.e. the run has at
    least 99 x compile_s x steps/s steps. Everything else runs eagerly: configs it does not list (other
    methods and architectures, bf16, bn_clean_pass, MT+MUR, PGA), shorter runs, and the CPU.
    An explicit mode (--set compile=graphs) is kept whatever its compile share."""
    if mode != "auto":
        return mode
    if (device.type != "cuda" or cfg.method != MEASURED_METHOD or cfg.arch != MEASURED_ARCH or cfg.bf16
            or cfg.bn_clean_pass):
        return "none"
    for m, steps_per_s, compile_s in measured_cuda().get((cfg.vd, cfg.mur), []):
        if compile_s <= MAX_COMPILE_SHARE * (cfg.steps / steps_per_s + compile_s):
            return m
    return "none"
