"""What a sweep's preset costs: its committed runs' wall time, else the sweep's estimate.

The prices come from sweeper/run_prices.json, which the repository's study writes from its committed
runs (study/run_prices.py: each run's trials, wall time and machine; the finished trials' own wall
times grouped by configuration and CPU kernels); this module reads nothing else. A committed run is
the cost `sweeper.list` and `sweeper.run --dry-run` show, and a command that changes the trials
(--seeds, --cells, --set) is priced trial by trial: at the mean of its configuration's committed
trials' own times (the cells of one sweep differ in price, MUR's PGA steps against direct MUR), else
at those runs' trial-min per trial. A preset with no committed run (every paper preset) shows "no
committed run" and the sweep's planning estimate, `Sweep.minutes_per_trial`, labelled as one.

    python -m sweeper.list
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path

from sweeper.trial_identity import identity, typed
from trainables.config import full_config
from trainables.files import KERNELS_KEY

TABLE = Path(__file__).resolve().parent / "run_prices.json"
NO_RUN = "no committed run"


@functools.cache
def packaged() -> dict:
    """sweeper/run_prices.json: {"runs": [...], "configs": [...]} (study/run_prices.py writes it)."""
    return json.loads(TABLE.read_text())


def config_key(ident: tuple) -> str:
    """A configuration's short, stable key in the price table: a digest of its identity."""
    return hashlib.sha256(json.dumps([list(p) for p in ident], default=list).encode()).hexdigest()[:16]


def committed(sweep: str, preset: str, table: dict | None = None) -> list[dict]:
    """{"name", "trials", "wall_min", "trial_min", "machine"} of each committed run of `sweep` at `preset`, by name."""
    return [r for r in (table or packaged())["runs"] if (r["sweep"], r["preset"]) == (sweep, preset)]


def timed_trials(preset: str, table: dict | None = None, sweep: str | None = None
                 ) -> list[tuple[str, str, str | None, int, float]]:
    """(sweep, configuration key, CPU kernels, trials, their minutes' sum) of the committed runs' timed trials
    at `preset` (of `sweep` alone where given), grouped: the trial's own kernels, else its run's."""
    return [(r["sweep"], r["config"], r["kernels"], r["n"], r["minutes"]) for r in (table or packaged())["configs"]
            if r["preset"] == preset and (sweep is None or r["sweep"] == sweep)]


def config_minutes(sweep: str, preset: str, table: dict | None = None, on=lambda kernels: True,
                   rows: list[tuple] | None = None) -> dict[str, float]:
    """{configuration key: mean trial-min} over the finished timed trials of `sweep`'s committed runs at
    `preset` whose CPU kernels satisfy `on` (all of them by default). `rows`: timed_trials(preset) where
    the caller has read them."""
    times: dict[str, list[float]] = {}
    for name, key, kind, n, minutes in timed_trials(preset, table, sweep) if rows is None else rows:
        if name == sweep and on(kind):
            acc = times.setdefault(key, [0, 0.0])
            acc[0] += n
            acc[1] += minutes
    return {k: m / n for k, (n, m) in times.items()}


def kernel_ratio(preset: str, here: str, table: dict | None = None, rows: list[tuple] | None = None
                 ) -> tuple[float, int] | None:
    """How many times a trial's time on `here` CPU kernels is its time on the others: the geometric mean,
    over the configurations of every sweep at `preset` with committed timed trials on both, of their mean
    trial-min's ratio; with the count of those configurations. None where no configuration has both.
    A vector instruction set is one of a CPU's traits, so the ratio is a planning figure for the CPUs
    the runs came from, not a law. `rows`: timed_trials(preset) where the caller has read them."""
    times: dict[tuple, dict[bool, list[float]]] = {}
    for name, key, kind, n, minutes in timed_trials(preset, table) if rows is None else rows:
        if kind is not None:
            acc = times.setdefault((name, key), {}).setdefault(kind == here, [0, 0.0])
            acc[0] += n
            acc[1] += minutes
    logs = [math.log((t[True][1] / t[True][0]) / (t[False][1] / t[False][0])) for t in times.values() if len(t) == 2]
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


def planned_key(trial: dict) -> str:
    """The configuration key of a planned trial (a config dict as the driver builds it)."""
    return config_key(identity({k: typed(k, v) for k, v in full_config(trial).items()}))


def per_trial(runs: list[dict]) -> float | None:
    """Trial-min per trial (each trial's own wall time, one CPU thread each) over the runs ({"trials",
    "trial_min"}) that record their trials' times; None where none does."""
    timed = [r for r in runs if r.get("trial_min") is not None and r.get("trials")]
    return sum(r["trial_min"] for r in timed) / sum(r["trials"] for r in timed) if timed else None


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


def kernel_prices(sweep: str, preset: str, here: str, planned: list[dict], table: dict | None = None
                  ) -> tuple[list[float | None], str | None]:
    """Each planned trial's trial-min on `here` CPU kernels: its configuration's committed mean on `here`,
    else its mean on the other kernels times kernel_ratio (unscaled where no configuration ran on both),
    else None; with the words saying on which kernels and how."""
    rows = timed_trials(preset, table)  # every committed trials.csv at the preset, read once for all three
    same = config_minutes(sweep, preset, table, on=lambda kind: kind == here, rows=rows)
    other = config_minutes(sweep, preset, table, on=lambda kind: kind != here, rows=rows)
    scale = kernel_ratio(preset, here, table, rows)
    prices, moved = [], 0
    for key in map(planned_key, planned):
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


def trial_prices(sweep: str, preset: str, planned: list[dict], kernels: str | None = None, table: dict | None = None
                 ) -> tuple[list[float | None], str | None]:
    """Each planned trial's committed trial-min (None where its configuration has none): on `kernels`
    where given (kernel_prices, with the words saying how), else the mean over every CPU."""
    if kernels:
        return kernel_prices(sweep, preset, kernels, planned, table)
    own = config_minutes(sweep, preset, table)
    return [own.get(planned_key(t)) for t in planned], None


def cost_lines(sweep: str, preset: str, n_trials: int, minutes_per_trial: float, changed: bool = False,
               table: dict | None = None, planned: list[dict] | None = None, kernels: str | None = None) -> list[str]:
    """The committed runs' costs, or "no committed run" and the labelled estimate; `changed`: the command
    changes the preset's trials (--seeds, --cells, --set), so the estimate follows its runs' costs: each of
    the `planned` trials (config dicts) at its configuration's committed trial-min where one is recorded,
    the others at the runs' trial-min per trial. `kernels`: this machine's CPU kernels, where a trial's
    time on them is wanted (kernel_prices): one configuration's trials take longer on AVX2 than on
    AVX-512, so the preset's own trials are priced for this machine too, beside runs made on others."""
    runs = committed(sweep, preset, table)
    if not runs:
        return [f"{NO_RUN}; {estimate_text(n_trials, minutes_per_trial, preset)}"]
    out = [f"committed run of the preset: {run_text(r)}" for r in runs]
    if not (changed or kernels and planned):
        return out
    rate = per_trial(runs)
    prices, how = trial_prices(sweep, preset, planned, kernels, table) if planned else ([], None)
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
