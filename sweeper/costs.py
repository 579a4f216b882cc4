"""What a sweep's preset costs: its committed runs' wall time (docs/runs/), else the sweep's estimate.

A committed run (`python -m sweeper.docs add`) holds its trials (trials.csv, one row each: a `--seeds
auto` run's sweep.json n_trials counts only its first look's) and the wall time and machine it ran on
(machine.json); that is the cost `sweeper.list` and `sweeper.run --dry-run` show, and a command that
changes the trials (--seeds, --cells, --set) is priced trial by trial: at the mean of its configuration's
committed trials' own times (trials.csv's wall_time_s: the cells of one sweep differ in price, MUR's
PGA steps against direct MUR), else at those runs' trial-min per trial. A preset with
no committed run (every paper preset) shows "no committed run" and the sweep's planning estimate,
`Sweep.minutes_per_trial`, labelled as one.

    python -m sweeper.list
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from sweeper.trial_identity import DEFAULTS, full_config, identity, typed
from trainables.files import KERNELS_KEY

ROOT = Path(__file__).resolve().parent.parent  # the repository
RUNS = Path("docs/runs")  # the committed runs (sweeper/docgen/committed_runs.py adds them)
NO_RUN = "no committed run"


def committed(sweep: str, preset: str, root: Path = ROOT) -> list[dict]:
    """{"name", "trials", "wall_min", "machine"} of each run of `sweep` at `preset` under docs/runs/, by name."""
    out = []
    for folder in sorted((root / RUNS).glob(f"{sweep}-{preset}-s*")):
        meta = json.loads((folder / "sweep.json").read_text())
        machine = json.loads((folder / "machine.json").read_text())
        if (meta.get("name"), meta.get("preset") or "paper") != (sweep, preset) or not machine.get("wall_min"):
            continue
        out.append({"name": folder.name, "trials": trial_count(folder, meta.get("n_trials")),
                    "wall_min": machine["wall_min"], "trial_min": machine.get("trial_min"),
                    "machine": machine_text({k: machine.get(k) for k in ("cpu", "cores")})})
    return out


def config_minutes(sweep: str, preset: str, root: Path = ROOT) -> dict[tuple, float]:
    """{trial identity: mean trial-min} over the finished trials of `sweep`'s committed runs at `preset`
    whose trials.csv records each trial's own wall time (one CPU thread each)."""
    times: dict[tuple, list[float]] = {}
    for folder in sorted((root / RUNS).glob(f"{sweep}-{preset}-s*")):
        meta = json.loads((folder / "sweep.json").read_text())
        table = folder / "trials.csv"
        if (meta.get("name"), meta.get("preset") or "paper") != (sweep, preset) or not table.exists():
            continue
        with table.open(newline="") as f:
            for row in csv.DictReader(f):
                if row.get("status") not in (None, "", "finished") or row.get("wall_time_s") in (None, ""):
                    continue
                times.setdefault(identity(full_config(row, meta)), []).append(float(row["wall_time_s"]) / 60)
    return {k: sum(v) / len(v) for k, v in times.items()}


def planned_identity(trial: dict) -> tuple:
    """The identity of a planned trial (a config dict as the driver builds it)."""
    return identity({k: typed(k, v) for k, v in {**DEFAULTS, **trial}.items()})


def per_trial(runs: list[dict]) -> float | None:
    """Trial-min per trial (each trial's own wall time, one CPU thread each) over the runs ({"trials",
    "trial_min"}) that record their trials' times; None where none does."""
    timed = [r for r in runs if r.get("trial_min") is not None and r.get("trials")]
    return sum(r["trial_min"] for r in timed) / sum(r["trials"] for r in timed) if timed else None


def trial_count(folder: Path, planned: int | None) -> int | None:
    """The trials a committed run holds: the rows of its trials.csv, else sweep.json's `planned` count."""
    table = folder / "trials.csv"
    if not table.exists():
        return planned
    with table.open(newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def machine_text(m: dict) -> str:
    parts = [m.get("cpu") or "unknown CPU", f"{m['cores']} cores" if m.get("cores") else None,
             f"torch {m['torch']}" if m.get("torch") else None,
             f"{m[KERNELS_KEY]} kernels" if m.get(KERNELS_KEY) else None,
             f"Python {m['python']}" if m.get("python") else None]
    if m.get("load_avg"):
        load = m["load_avg"]
        parts.append(f"1-minute load average {load['mean']:g} (at most {load['max']:g}) while it ran")
    return ", ".join(p for p in parts if p)


def run_text(run: dict) -> str:
    trials = f" for {run['trials']} trials" if run.get("trials") else ""
    return f"{run['wall_min']:.1f} min{trials} on {run['machine']} (docs/runs/{run['name']})"


def estimate_text(n_trials: int, minutes_per_trial: float, preset: str) -> str:
    where = "a 2-core CPU machine" if preset == "quick" else "one GPU per trial"
    return (f"estimate {n_trials} trials x {minutes_per_trial:g} min = {n_trials * minutes_per_trial / 60:.1f} "
            f"trial-hours on {where} (Sweep.minutes_per_trial, a planning value)")


def cost_lines(sweep: str, preset: str, n_trials: int, minutes_per_trial: float, changed: bool = False,
               root: Path = ROOT, planned: list[dict] | None = None) -> list[str]:
    """The committed runs' costs, or "no committed run" and the labelled estimate; `changed`: the command
    changes the preset's trials (--seeds, --cells, --set), so the estimate follows its runs' costs: each of
    the `planned` trials (config dicts) at its configuration's committed trial-min where one is recorded,
    the others at the runs' trial-min per trial."""
    runs = committed(sweep, preset, root)
    if not runs:
        return [f"{NO_RUN}; {estimate_text(n_trials, minutes_per_trial, preset)}"]
    out = [f"committed run of the preset: {run_text(r)}" for r in runs]
    if not changed:
        return out
    rate = per_trial(runs)
    own = config_minutes(sweep, preset, root) if planned else {}
    prices = [own.get(planned_identity(t)) for t in planned or []]
    known = [m for m in prices if m is not None]
    rest = len(prices) - len(known)
    if known and (rate is not None or not rest):
        total = sum(known) + rest * (rate or 0.0)
        out.append(f"this command changes its trials: {n_trials} trials = {total / 60:.1f} trial-hours, "
                   f"{len(known)} at their configuration's committed trial-min (the mean of its trials' own times)"
                   + (f", {rest} at the committed runs' {rate:.2f} trial-min per trial" if rest else ""))
    elif rate is not None:
        out.append(f"this command changes its trials: {n_trials} trials x {rate:.2f} trial-min (its committed "
                   f"runs' trial-min per trial) = {n_trials * rate / 60:.1f} trial-hours")
    else:
        out.append(f"this command changes its trials: {estimate_text(n_trials, minutes_per_trial, preset)}")
    return out
