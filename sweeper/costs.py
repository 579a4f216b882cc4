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
import math
from pathlib import Path

from sweeper.trial_identity import DEFAULTS, full_config, identity, typed
from trainables.files import KERNELS_KEY, MIXED

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
                    "machine": machine_text({k: machine.get(k) for k in ("cpu", "cores", KERNELS_KEY)})})
    return out


def timed_trials(preset: str, root: Path = ROOT, sweep: str | None = None
                 ) -> list[tuple[str, tuple, str | None, float]]:
    """(sweep, trial identity, CPU kernels, trial-min) of each finished trial of the committed runs at `preset`
    (of `sweep` alone where given) whose trials.csv records its own wall time (one CPU thread each). The
    kernels are the trial's own record, else its run's machine.json's where that names one kind."""
    out = []
    for folder in sorted((root / RUNS).glob(f"{sweep or '*'}-{preset}-s*")):
        meta = json.loads((folder / "sweep.json").read_text())
        table = folder / "trials.csv"
        name = meta.get("name")
        if (meta.get("preset") or "paper") != preset or (sweep and name != sweep) or not table.exists():
            continue
        run_kind = json.loads((folder / "machine.json").read_text()).get(KERNELS_KEY)
        run_kind = None if run_kind == MIXED else run_kind
        with table.open(newline="") as f:
            for row in csv.DictReader(f):
                if row.get("status") not in (None, "", "finished") or row.get("wall_time_s") in (None, ""):
                    continue
                out.append((name, identity(full_config(row, meta)), row.get(KERNELS_KEY) or run_kind,
                            float(row["wall_time_s"]) / 60))
    return out


def config_minutes(sweep: str, preset: str, root: Path = ROOT, on=lambda kernels: True,
                   rows: list[tuple] | None = None) -> dict[tuple, float]:
    """{trial identity: mean trial-min} over the finished trials of `sweep`'s committed runs at `preset`
    whose trials.csv records each trial's own wall time (one CPU thread each), and whose CPU kernels
    satisfy `on` (all of them by default). `rows`: timed_trials(preset) where the caller has read them."""
    times: dict[tuple, list[float]] = {}
    for name, key, kind, minutes in timed_trials(preset, root, sweep) if rows is None else rows:
        if name == sweep and on(kind):
            times.setdefault(key, []).append(minutes)
    return {k: sum(v) / len(v) for k, v in times.items()}


def kernel_ratio(preset: str, here: str, root: Path = ROOT, rows: list[tuple] | None = None
                 ) -> tuple[float, int] | None:
    """How many times a trial's time on `here` CPU kernels is its time on the others: the geometric mean,
    over the configurations of every sweep at `preset` with committed timed trials on both, of their mean
    trial-min's ratio; with the count of those configurations. None where no configuration has both.
    A vector instruction set is one of a CPU's traits, so the ratio is a planning figure for the CPUs
    the runs came from, not a law. `rows`: timed_trials(preset) where the caller has read them."""
    times: dict[tuple, dict[bool, list[float]]] = {}
    for name, key, kind, minutes in timed_trials(preset, root) if rows is None else rows:
        if kind is not None:
            times.setdefault((name, key), {}).setdefault(kind == here, []).append(minutes)
    logs = [math.log((sum(t[True]) / len(t[True])) / (sum(t[False]) / len(t[False])))
            for t in times.values() if len(t) == 2]
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


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


def kernel_prices(sweep: str, preset: str, here: str, planned: list[dict], root: Path = ROOT
                  ) -> tuple[list[float | None], str | None]:
    """Each planned trial's trial-min on `here` CPU kernels: its configuration's committed mean on `here`,
    else its mean on the other kernels times kernel_ratio (unscaled where no configuration ran on both),
    else None; with the words saying on which kernels and how."""
    rows = timed_trials(preset, root)  # every committed trials.csv at the preset, read once for all three
    same = config_minutes(sweep, preset, root, on=lambda kind: kind == here, rows=rows)
    other = config_minutes(sweep, preset, root, on=lambda kind: kind != here, rows=rows)
    scale = kernel_ratio(preset, here, root, rows)
    prices, moved = [], 0
    for key in map(planned_identity, planned):
        if key in same or key not in other:
            prices.append(same.get(key))
        else:
            prices.append(other[key] * (scale[0] if scale else 1.0))
            moved += 1
    if not moved:
        return prices, f"each on this machine's {here} kernels"
    how = (f"x {scale[0]:.2f}, {here} against the others over the {scale[1]} configurations committed on both"
           if scale else f"unscaled: no configuration is committed on both {here} and another kind")
    return prices, (f"on this machine's {here} kernels, {len(planned) - moved} priced on {here} and {moved} at "
                    f"their configuration's trial-min on other kernels ({how})")


def trial_prices(sweep: str, preset: str, planned: list[dict], kernels: str | None = None, root: Path = ROOT
                 ) -> tuple[list[float | None], str | None]:
    """Each planned trial's committed trial-min (None where its configuration has none): on `kernels`
    where given (kernel_prices, with the words saying how), else the mean over every CPU."""
    if kernels:
        return kernel_prices(sweep, preset, kernels, planned, root)
    own = config_minutes(sweep, preset, root)
    return [own.get(planned_identity(t)) for t in planned], None


def cost_lines(sweep: str, preset: str, n_trials: int, minutes_per_trial: float, changed: bool = False,
               root: Path = ROOT, planned: list[dict] | None = None, kernels: str | None = None) -> list[str]:
    """The committed runs' costs, or "no committed run" and the labelled estimate; `changed`: the command
    changes the preset's trials (--seeds, --cells, --set), so the estimate follows its runs' costs: each of
    the `planned` trials (config dicts) at its configuration's committed trial-min where one is recorded,
    the others at the runs' trial-min per trial. `kernels`: this machine's CPU kernels, where a trial's
    time on them is wanted (kernel_prices): one configuration's trials take longer on AVX2 than on
    AVX-512, so the preset's own trials are priced for this machine too, beside runs made on others."""
    runs = committed(sweep, preset, root)
    if not runs:
        return [f"{NO_RUN}; {estimate_text(n_trials, minutes_per_trial, preset)}"]
    out = [f"committed run of the preset: {run_text(r)}" for r in runs]
    if not (changed or kernels and planned):
        return out
    rate = per_trial(runs)
    prices, how = trial_prices(sweep, preset, planned, kernels, root) if planned else ([], None)
    known = [m for m in prices if m is not None]
    rest = len(prices) - len(known)
    lead = "this command changes its trials" if changed else "its trials on this machine"
    if known and (rate is not None or not rest):
        total = sum(known) + rest * (rate or 0.0)
        out.append(f"{lead}: {n_trials} trials = {total / 60:.1f} trial-hours, "
                   f"{len(known)} at their configuration's committed trial-min (the mean of its trials' own times)"
                   + (f", {rest} at the committed runs' {rate:.2f} trial-min per trial" if rest else "")
                   + (f"; {how}" if how else ""))
    elif not changed:  # none of the preset's own trials is timed: the committed runs' lines say it all
        return out
    elif rate is not None:
        out.append(f"this command changes its trials: {n_trials} trials x {rate:.2f} trial-min (its committed "
                   f"runs' trial-min per trial) = {n_trials * rate / 60:.1f} trial-hours")
    else:
        out.append(f"this command changes its trials: {estimate_text(n_trials, minutes_per_trial, preset)}")
    return out
