"""The runs committed under docs/runs/: reading them for the generated docs, and adding a finished one.

`python -m study.docs add results/<sweep>-<stamp>` copies a results folder's small files (sweep.json
without the machine's paths, summary.csv, table.md, the PNGs the docs show; for the quick start also
table.csv, table.json and trials.parquet, which its report picture's page reads) into
docs/runs/<sweep>-<preset>-s<first>-<last>/ (-2, -3, ... where another run has that span), with trials.csv
(one row per trial, what the claims read) and machine.json (the machine `add` runs on, the CPU kernels the
trials ran on, the run's dates and wall time less any stop before a `--resume`, the load the driver saw).
`read_run` reads one back for study/docs.py; runs of one sweep share a seed only where they ran
different cells on it, as `--cells` runs do (`check_disjoint`).

    python -m study.docs add results/ablation_radius-<stamp>
"""
from __future__ import annotations

import csv
import json
import os
import platform
import shlex
import shutil
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from study import claims as claimlib
from sweeper.analysis.aggregate import HISTORY
from sweeper.trial_identity import identity, row_config
from study.run_prices import ROOT, RUNS
from sweeper.driver.provenance import cpu_kernels, cpu_name
from study.picture import QUICKSTART, public_trials
from trainables.files import KERNELS_KEY, MIXED

RUN_FILES = ("sweep.json", "summary.csv", "table.md")  # and, for the quick start only, its picture's inputs
PNGS = ("paired_diffs.png",)  # the plots the docs show, copied by `add` when the run made them


class DocsError(ValueError):
    """A committed file the generator cannot use; the message names it and the fix."""


def run_dirs(root: Path = ROOT) -> list[Path]:
    return sorted(p.parent for p in (root / RUNS).glob("*/summary.csv"))


def read_run(folder: Path) -> dict:
    """A committed run: its sweep.json, machine.json, summary rows, table and seeds."""
    for name in (*RUN_FILES, "machine.json"):
        if not (folder / name).is_file():
            raise DocsError(f"{folder}: no {name}; add the run with `python -m study.docs add RESULTS_DIR`")
    meta = json.loads((folder / "sweep.json").read_text())
    with open(folder / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    seeds = sorted({int(s) for r in rows for s in (r.get("seeds") or "").split(",") if s.strip()})
    trials = claimlib.read_trials(folder)
    return {"folder": folder, "name": folder.name, "sweep": meta["name"], "preset": meta.get("preset") or "paper",
            "meta": meta, "machine": json.loads((folder / "machine.json").read_text()), "rows": rows,
            "table": (folder / "table.md").read_text().strip(), "seeds": seeds,
            "trials": trials, "configs": [row_config(t, meta) for t in trials],
            "pngs": sorted(p.name for p in folder.glob("*.png"))}


def runs_of(runs: list[dict], sweep: str, preset: str) -> list[dict]:
    return [r for r in runs if (r["sweep"], r["preset"]) == (sweep, preset)]


def check_disjoint(runs: list[dict]) -> None:
    """DocsError where two runs of one sweep share seeds and, on them, one run's cells are all among the
    other's: a second copy of a run. Runs of different cells on one seed span (`--cells`) may share
    seeds, and the baseline cell both ran: evidence.index counts each of its trials once."""
    by_seed: dict[str, dict[int, set]] = {}  # run name -> seed -> its trials' identities, built once per run

    def cells(run: dict, seeds: set[int]) -> set[tuple]:
        if run["name"] not in by_seed:
            table = by_seed[run["name"]] = {}
            for row in run["trials"]:
                table.setdefault(int(row["seed"]), set()).add(identity(row_config(row, run["meta"])))
        return set().union(*(by_seed[run["name"]].get(s, set()) for s in seeds))

    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            shared = set(a["seeds"]) & set(b["seeds"])
            if (a["sweep"], a["preset"]) != (b["sweep"], b["preset"]) or not shared:
                continue
            ours, theirs = cells(a, shared), cells(b, shared)
            if ours <= theirs or theirs <= ours:
                raise DocsError(f"docs/runs/{a['name']} and docs/runs/{b['name']} share seeds and ran the same cells "
                                f"on them; keep one of them (runs of one sweep share a seed only where they ran "
                                f"different cells on it, as --cells runs do)")


def seed_span(seeds: list[int]) -> str:
    return f"s{seeds[0]}-{seeds[-1]}" if seeds else "s-"


def command_line(argv: list[str]) -> str:
    """The shell command that reruns a recorded sweeper.run argv (quoted: a --cells value may hold '|')."""
    return "python -m sweeper.run " + shlex.join(public_args(argv))


def public_args(argv: list[str]) -> list[str]:
    """sweeper.run's arguments without the script path and `--storage`: both are paths of the machine
    that ran the sweep, and neither changes a number."""
    args, out = list(argv[1:]), []
    while args:
        a = args.pop(0)
        if a == "--storage":
            args = args[1:]
        elif not a.startswith("--storage="):
            out.append(a)
    return out


def run_load(exp: Path) -> dict | None:
    """The 1-minute load averages the driver sampled at each heartbeat (live.json), summarised; None for
    a run without them (the live report off, or an older run)."""
    from sweeper.analysis.html import stored_loads  # the results pipeline (pandas) only where `add` runs

    loads = stored_loads(exp)
    if not loads:
        return None
    return {"mean": round(sum(loads) / len(loads), 2), "max": max(loads), "samples": len(loads)}


def read_trials(exp: Path):
    """The results folder's trials.parquet as a DataFrame, read once for all that `add` takes from it;
    None for a folder without one."""
    if not (exp / "trials.parquet").is_file():
        return None
    import pandas as pd  # only `add` reads parquet; the docs test never calls it

    return pd.read_parquet(exp / "trials.parquet")


def machine_info(exp: Path, meta: dict, trials=None) -> dict:
    """The machine this runs on (`add`, or a benchmark reading a results folder made here: where the sweep
    is expected to have run), the run's dates, and the load it ran under where the driver sampled it.
    `trials`: the folder's read_trials, where the caller has it."""
    from sweeper.analysis.aggregate import run_span  # pandas: only `add` comes here

    trials = read_trials(exp) if trials is None else trials

    cpu = cpu_name()
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    written = (exp / "summary.csv").stat().st_mtime
    start, end, paused = run_span(exp, written) or ((exp / "sweep.json").stat().st_mtime, written, 0.0)
    out = {"cpu": cpu, "cores": os.cpu_count(), "torch": torch, **trial_kernels(trials),
           "python": platform.python_version(),
           "date": datetime.fromtimestamp(end).strftime("%Y-%m-%d"),
           "wall_min": round((end - start - paused) / 60, 1),
           "command": command_line(meta.get("argv", []))}
    if paused:
        out["paused_min"] = round(paused / 60, 1)
    out.update(trial_time(trials))
    load = run_load(exp)
    return {**out, "load_avg": load} if load else out


def trial_kernels(trials) -> dict:
    """{"cpu_kernels": ...} as the run's trials (read_trials) reported it: their one kind, or "mixed"
    with {"cpu_kernels_trials": {kind: trials}} where a run resumed elsewhere, or a cluster's nodes, ran
    them on several (evidence.same_cpu then never pairs its copies of a trial with another run's). From a
    run whose trials did not report it: the kernels of the machine `add` runs on."""
    kinds: dict[str, int] = {}
    if trials is not None and KERNELS_KEY in trials.columns:
        kinds = {str(k): int(n) for k, n in trials[KERNELS_KEY].value_counts().items()}  # NaN left out
    if not kinds:
        return {KERNELS_KEY: cpu_kernels()}
    if len(kinds) == 1:
        return {KERNELS_KEY: next(iter(kinds))}
    return {KERNELS_KEY: MIXED, f"{KERNELS_KEY}_trials": dict(sorted(kinds.items()))}


def trial_time(trials) -> dict:
    """{"trials": how many, "trial_min": their own wall times summed, in minutes} from the run's trials
    (read_trials): the CPU time a run spent (each trial holds one CPU), which its wall time hides when
    trials run side by side. {} for a folder without trials.parquet."""
    if trials is None:
        return {}
    wall = trials["wall_time_s"]
    return {"trials": int(len(wall)), "trial_min": round(float(wall.fillna(0).sum()) / 60, 1)}


def write_trials_csv(trials, meta: dict, dest: Path) -> None:
    """One row per trial of the results folder: the config keys its trials vary, seed, status, the final
    metrics the claims read (claims.METRICS), the trial's own wall time and the CPU kernels it reported,
    from the run's trials (read_trials). A key every trial shares is read back from sweep.json
    (trial_identity.row_config: the row's variant, the base, the default)."""
    config = [k for k in (meta.get("base") or {}) if k in trials.columns]
    keys = sorted({k for v in meta.get("variants") or [] for k in v} | set(meta.get("grid") or {}) | set(config))
    varying = [k for k in keys if k in trials.columns and k != "seed" and trials[k].astype(str).nunique() > 1]
    metrics = [c for c in claimlib.METRICS.values() if c in trials.columns]
    timed = ["wall_time_s"] if "wall_time_s" in trials.columns else []  # what a cell costs (docs.needs_md)
    # which trajectory a trial is (evidence.index): the kernels it reported, where it did
    kernels = [KERNELS_KEY] if KERNELS_KEY in trials.columns and trials[KERNELS_KEY].notna().any() else []
    out = trials[[*varying, "seed", "status", *metrics, *timed, *kernels]].sort_values([*varying, "seed"],
                                                                                       kind="stable")
    out.to_csv(dest, index=False, float_format="%.6g")


def check_cells_as_defined(exp: Path, meta: dict, trials) -> None:
    """DocsError where a trial's config leaves its sweep's definition (a --set that changes what trials
    do): trials.csv records only the keys the sweep varies, so the claims would read such trials as the
    sweep's own cells and pool them with runs of those. Keys that change no number (NOT_COMPARED:
    data_dir, device, compile, ...) may differ. `trials`: the folder's read_trials."""
    from sweeper.trial_identity import DEFAULTS, typed
    from trainables.config import NOT_COMPARED, full_config

    base = full_config(meta.get("base") or {})
    varied = {k for v in meta.get("variants") or [] for k in v} | set(meta.get("grid") or {})
    for k in trials.columns:
        if k not in DEFAULTS or k in varied or k in NOT_COMPARED:
            continue
        want = base[k]
        # compared as the claims identify a trial (trial_identity.typed): a value they would read as the sweep's own
        off = [v for v in trials[k].dropna() if typed(k, v.tolist() if hasattr(v, "tolist") else v) != typed(k, want)]
        if off:
            raise DocsError(f"{exp}: its trials ran {k}={off[0]!r} where sweep {meta['name']} sets {want!r} (a --set); "
                            f"the claims would read them as the sweep's own cells: commit runs of the sweep as "
                            f"defined, or make the variation a sweep of its own in search_spaces/")


def destination(runs: Path, name: str, meta: dict) -> Path:
    """The folder under docs/runs/ a run goes to: the one that already holds it (the same command from the
    same commit: adding it again refreshes it), else the first free of NAME, NAME-2, NAME-3, ... Two runs
    over one seed span (`--cells` runs of different cells, say) both stay: a committed run is never
    replaced by another. One that a new run supersedes goes with `git rm -r`."""
    def same_run(folder: Path) -> bool:
        try:
            old = json.loads((folder / "sweep.json").read_text())
        except (OSError, ValueError):
            return False
        return (old.get("argv"), old.get("commit")) == (meta.get("argv"), meta.get("commit"))

    taken = [name] + [f"{name}-{i}" for i in range(2, 1000)]
    found = [runs / n for n in taken if (runs / n).exists()]
    return next((f for f in found if same_run(f)), next(runs / n for n in taken if not (runs / n).exists()))


def add(exp: Path, root: Path = ROOT) -> Path:
    """Copy the small top-level files of a finished local results folder into docs/runs/ (+ machine.json)."""
    missing = [n for n in (*RUN_FILES, "trials.parquet") if not (exp / n).is_file()]  # trials.csv comes from it
    if missing:
        raise DocsError(f"{exp}: no {', '.join(missing)}; give a finished local results folder "
                        f"(results/<sweep>-<stamp>, after the sweep printed its table)")
    meta = json.loads((exp / "sweep.json").read_text())
    trials = read_trials(exp)
    check_cells_as_defined(exp, meta, trials)
    with open(exp / "summary.csv", newline="") as f:
        seeds = sorted({int(s) for r in csv.DictReader(f) for s in (r.get("seeds") or "").split(",") if s.strip()})
    meta["argv"] = ["sweeper.run", *public_args(meta.get("argv", []))]  # no path of the machine that ran it
    dest = destination(root / RUNS, f"{meta['name']}-{meta.get('preset') or 'paper'}-{seed_span(seeds)}", meta)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in RUN_FILES + tuple(p for p in (*PNGS, HISTORY) if (exp / p).is_file()):  # the page's curves
        shutil.copyfile(exp / name, dest / name)
    write_trials_csv(trials, meta, dest / claimlib.TRIALS_CSV)
    if (meta["name"], meta.get("preset") or "paper") == QUICKSTART:  # the report picture's page needs them;
        # elsewhere they would hold trials.csv's and summary.csv's numbers a second time
        for name in ("table.csv", "table.json"):
            if (exp / name).is_file():
                shutil.copyfile(exp / name, dest / name)
        public_trials(exp / "trials.parquet", dest / "trials.parquet")  # without the machine's paths
    (dest / "sweep.json").write_text(json.dumps(meta, indent=1) + "\n")
    (dest / "machine.json").write_text(json.dumps(machine_info(exp, meta, trials), indent=1) + "\n")
    return dest
