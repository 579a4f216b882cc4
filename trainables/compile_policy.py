"""Which TrainConfig.compile mode "auto" runs: a compiled training step only where it was measured faster
than eager on CUDA, and only for runs long enough that compiling costs at most 1 % of the run.

    PYTHONPATH=. python benchmarks/trainer_throughput.py --device cuda --compile none,step,graphs   # remeasure
    pytest tests/test_compile.py -q -k auto
"""
from __future__ import annotations

import torch

from trainables.config import TrainConfig

# (vd, mur) of Mean Teacher on ConvNet-13 (batch 25+75, fp32, no bn_clean_pass) -> the compiled modes
# clearly faster than eager, fastest first, as (mode, steps/s, compile seconds); from
# benchmarks/results/trainer_throughput_h200_{graphs,compile}_mt*.json (tests/test_compile.py checks it).
# A graphs row measured after step's in one process is counted at step's compile seconds: graphs
# compiles what step compiles, and the second compile found inductor's caches warm.
MEASURED_CUDA = {
    (False, "none"): [("graphs", 233.9, 18.7)],
    (True, "none"): [("graphs", 127.8, 27.6), ("step", 93.3, 26.1)],
    (True, "direct"): [("graphs", 46.7, 60.7), ("step", 44.6, 60.7)],
}
MAX_COMPILE_SHARE = 0.01  # compiling may cost at most 1 % of the run


def resolve_compile(mode: str, device: torch.device, cfg: TrainConfig) -> str:
    """TrainConfig.compile as run. "auto" is, on CUDA, the fastest mode in MEASURED_CUDA for the config
    whose compile is at most MAX_COMPILE_SHARE of the run at the measured speed, i.e. the run has at
    least 99 x compile_s x steps/s steps. Everything else runs eagerly: configs the table does not list
    (other methods and architectures, bf16, bn_clean_pass, MT+MUR, PGA), shorter runs, and the CPU.
    An explicit mode (--set compile=graphs) is kept whatever its compile share."""
    if mode != "auto":
        return mode
    if device.type != "cuda" or cfg.method != "mt" or cfg.arch != "convnet13" or cfg.bf16 or cfg.bn_clean_pass:
        return "none"
    for m, steps_per_s, compile_s in MEASURED_CUDA.get((cfg.vd, cfg.mur), []):
        if compile_s <= MAX_COMPILE_SHARE * (cfg.steps / steps_per_s + compile_s):
            return m
    return "none"
