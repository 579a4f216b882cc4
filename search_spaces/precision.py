"""MT+VD+MUR with bf16 autocast against fp32: does the fast GPU route change the error?

Hypothesis: bf16 autocast (convolutions and matmuls in bfloat16; losses, the KL and MUR's finite
difference in float32) leaves MT+VD+MUR's test error within the seeds' spread of fp32's. bf16 with
channels_last and compile="graphs" is the fast GPU route (benchmarks/results/
trainer_throughput_h200_graphs_mt_vd_mur{,_bf16}.json), but bf16 stays off by default until runs like
these show it harmless. One knob per row: bf16. The paper preset runs both rows with compile="graphs" and
channels_last (the fast route; a layout and a compiler checked equal to eager), set explicitly, so
that the two rows differ in bf16 alone.
    python -m sweeper.run precision                  # CIFAR-10 1000 labels, 2 rows x 3 seeds of 280k steps (GPU)
    python -m sweeper.run precision --preset quick   # digits, 2 rows x 5 seeds
The quick preset runs CPU autocast (oneDNN's bf16 kernels): a proxy for CUDA's, whose op lists and
kernels differ; only the paper preset on a GPU answers for the GPU.
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, QUICK, QUICK_SEEDS, variants
from search_spaces.table_cifar import QUICK_ROWS

PRESETS = ("paper", "quick")
QUICK_ROW = next(r for r in QUICK_ROWS if r.get("vd") and r.get("mur") == "direct" and not r.get("entmin_coef"))
PAPER_ROW = next(r for r in variants("mt", "cifar10") if r["vd"] and r["mur"] == "direct")  # authors' entmin


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    row = QUICK_ROW if quick else PAPER_ROW
    return Sweep(name="precision", paper_ref="none (a check of the bf16 option)",
                 description="MT+VD+MUR test error in fp32 vs bf16 autocast",
                 base={**(QUICK if quick else CIFAR), **row, **({} if quick else {"compile": "graphs", "channels_last": True})},
                 variants=[{"bf16": False}, {"bf16": True}], baseline={"bf16": False},
                 seeds=QUICK_SEEDS if quick else 3, rows=("bf16",),
                 minutes_per_trial=1.2 if quick else 150)
