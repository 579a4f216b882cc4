"""One trial counted once: the full configuration of a committed trial, and every committed seed of it.

Two sweeps that run the same configuration on the same seed run the same trial (MT and MT + MUR at r = 1
are cells of table_cifar, ablation_radius, ablation_mur_vs_rr and ablation_mur_steps): a claim about that
pair is graded on the union of their seeds, each (configuration, seed) once. A trial's full configuration
is TrainConfig's defaults, overridden by its sweep's base, the variant it ran and the keys trials.csv gives
for it (sweeper/trial_identity.py); only the keys that change what such a run does count
(trainables.config.applies, without NOT_COMPARED), so MT + MUR's unused `mur_steps` or MT's unused radius
never tells two runs of it apart.

    python -c "from study import evidence; from study.committed_runs import read_run, run_dirs; \
print(len(evidence.index([read_run(p) for p in run_dirs()])))"
    pytest tests/test_claims.py -q
"""
from __future__ import annotations

import math

from sweeper.trial_identity import identity, row_config
from trainables.files import KERNELS_KEY, MIXED


class EvidenceError(ValueError):
    """Two committed runs hold one trial with different results; the message names both."""


def index(runs: list[dict]) -> dict[tuple, dict[int, tuple[list[str], dict]]]:
    """{identity: {seed: ([the runs whose copy of it counts], trials.csv row)}} over the finished trials of every
    committed run. A trial two runs on one kind of CPU hold is kept once (a metric one copy lacks is taken
    from the other); two such runs disagreeing on one of its final metrics is an error. Runs on different
    CPUs (machine.json's `cpu`, or one name with other vector kernels, `cpu_kernels`: as the trial reported
    it, else as its run's machine.json records it, where both copies have them) round differently, so
    their copies of a trial are two trajectories of one seed: the copy of the run whose name sorts first
    is kept whole, a rule blind to the results."""
    out: dict[tuple, dict[int, tuple[list[str], dict]]] = {}
    cpu_of = {run["name"]: run.get("machine") or {} for run in runs}
    for run in sorted(runs, key=lambda r: r["name"]):
        for row in run["trials"]:
            if row.get("status") not in (None, "", "finished"):
                continue
            key, seed = identity(row_config(row, run["meta"])), int(row["seed"])
            seen = out.setdefault(key, {})
            if seed not in seen:
                seen[seed] = ([run["name"]], dict(row))
                continue
            holders, kept = seen[seed]
            if not same_cpu(trial_cpu(cpu_of[run["name"]], row), trial_cpu(cpu_of[holders[0]], kept)):
                continue  # another trajectory: not cited either
            holders.append(run["name"])
            for col in (k for k in row if k.startswith("final_")):
                a, b = as_number(row.get(col)), as_number(kept.get(col))
                if math.isnan(b):
                    kept[col] = row[col]
                elif not math.isnan(a) and a != b:
                    raise EvidenceError(f"docs/runs/{run['name']} and docs/runs/{holders[0]} hold one trial (seed "
                                        f"{seed}, same configuration) with different {col} ({a} vs {b}) from "
                                        f"one kind of CPU; they ran different code: rerun one of them from the "
                                        f"other's commit")
    return out


def trial_cpu(machine: dict, row: dict) -> dict:
    """The CPU one trials.csv row ran on: its run's machine.json, with the kernels the trial itself
    reported where trials.csv has them (a run resumed elsewhere holds trials of several kinds)."""
    return {**machine, KERNELS_KEY: row[KERNELS_KEY]} if row.get(KERNELS_KEY) else machine


def same_cpu(a: dict, b: dict) -> bool:
    """Two runs' machine.json describe one kind of CPU: one name, and one set of vector kernels where both
    record it (the earliest runs do not; a name then stands for its kernels). A run whose trials ran on
    several kinds ("mixed") is one kind with no other run: which of its trials ran where is not kept."""
    ka, kb = a.get(KERNELS_KEY), b.get(KERNELS_KEY)
    if MIXED in (ka, kb):
        return False
    return a.get("cpu") == b.get("cpu") and (ka is None or kb is None or ka == kb)


def as_number(v) -> float:
    """A trials.csv cell as a float; empty or not a number: NaN."""
    try:
        return float(v) if v not in (None, "") else math.nan
    except ValueError:
        return math.nan
