"""Ray Tune experiment folder -> one tidy row per trial -> mean ± std per config, seeds pooled.

Reads the files Ray Tune leaves on disk, WITHOUT importing or starting Ray, so it works on a
finished, an interrupted or a still running experiment:
  <exp>/sweep.json                  the Sweep (written by sweeper.run; optional)
  <exp>/experiment_state-*.json     Ray's trial states (optional; used for the status only)
  <exp>/<trial dir>/params.json     the trial's config (the TrainConfig fields)
  <exp>/<trial dir>/result.json     one JSON object per report; the last line may be torn, and a
                                    line cut short by a kill may carry the resumed trial's next report
  <exp>/<trial dir>/error.txt|.pkl  present once the trial has failed (possibly then retried)

Status of a trial (`STATUSES`):
  diverged    its last report has diverged=1 (the trainer stopped on a non-finite loss)
  finished    its last report reached the trial's configured `steps`; for a trial whose config
              has no `steps`: its last report has done=True (or, with no `done` key, Ray marked it
              TERMINATED)
  failed      error.txt / error.pkl exists, or Ray marked it ERROR, and it did not finish; or its last
              report has `resume_error` (a checkpoint its config cannot continue: trainables/tune.py) or
              `config_error` (a config the trial cannot run)
  stopped     ended short of its `steps` without an error: Tune marks the last report of a trial
              that a scheduler (ASHA) stopped done=True too, so `done` alone cannot tell; with no
              `steps` in the config: Ray TERMINATED it before done=True
  incomplete  none of the above: still running, or interrupted (the files cannot tell which)
Only finished trials are averaged; the others are counted beside the mean, never in it. A trial
whose params.json holds Tune's placeholders instead of values (a grid resumed without its
trials.json: sweeper/driver/tuner.py) ran no config of the sweep: it is left out, with a warning
that names it.

Which point of a trial's curve (`WHICH`): `final_<m>` is the metric at the last report (the honest
default: what the run ends with); `bestval_<m>` is the metric at the report whose `val_error`
(held-out validation split of the training set) is lowest, the first such report on ties, with
`bestval_step` (early stopping selected on validation, the test error reported at that choice);
`best_<m>` is the minimum over all reports of each error metric, with `best_step` for test_error
(what the paper's authors kept: the best test accuracy seen during training, selected on the test
set, an optimistic number). Trials that report no finite `val_error` (val_size=0: no
validation split) get NaN `bestval_*` columns and still aggregate. `medlast_<m>` is the median of
the metric over the last MEDIAN_LAST reports with a finite value (FixMatch's statistic), with
`medlast_n` (the reports in that median) and `medlast_of` (the reports with a finite test_error).

    python -c "from sweeper.analysis.aggregate import load_trials; print(load_trials('results/EXP'))"
    pytest tests/test_aggregate.py -q
"""
from __future__ import annotations

import functools
import json
import math
import platform
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from sweeper.storage import TRIAL_DIR_PREFIX
from trainables.config import BOOKKEEPING, NOT_COMPARED, full_config, train_config_defaults  # no torch, no Ray
from trainables.files import KERNELS_KEY, atomic_write, refusal, unresolved
from trainables.selection import chosen_on_val

STATUSES = ("finished", "failed", "diverged", "stopped", "incomplete")
# Columns of the trials table that are not config keys and carry no metric prefix.
BOOK_COLS = ("sweep", "trial_id", "trial_dir", "status", "n_reports", "n_failures", "wall_time_s",
             "hostname", "python_version", "torch_version", "ray_version", "versions_source", KERNELS_KEY)
# Config keys never grouped by: those that change no number (the seed among them), and the trial's index.
NON_GROUP_KEYS = (*NOT_COMPARED, *BOOKKEEPING)
# Percent errors on the test set, and on the validation split held out of the training set.
TEST_METRICS = ("test_error", "test_error_student", "test_error_teacher")
VAL_METRICS = ("val_error", "val_error_student", "val_error_teacher")
# Metrics whose best value is the minimum over reports, and that bestval_* records.
ERROR_METRICS = TEST_METRICS + VAL_METRICS
SELECT_METRIC = "val_error"  # what best_val selects the report by (the evaluated network's validation error)
# Points of a trial's curve a summary can take.
WHICH = ("final", "best_val", "best_test", "median_last")
WHICH_PREFIX = {"final": "final_", "best_val": "bestval_", "best_test": "best_", "median_last": "medlast_"}
# FixMatch's tooling (google-research/fixmatch scripts/extract_accuracy.py, its 'last20') reports the median
# accuracy of a run's last 20 evaluations: median_last takes the same number of reports.
MEDIAN_LAST = 20
METRIC_PREFIXES = tuple(WHICH_PREFIX.values())  # the trials table's metric columns
# Keys Ray adds to every report that are not metrics of ours.
RAY_KEYS = ("config", "timestamp", "checkpoint_dir_name", "should_checkpoint", "date", "pid", "node_ip",
            "hostname", "time_this_iter_s", "time_since_restore", "iterations_since_restore", "trial_id")
VERSION_KEYS = ("python_version", "torch_version", "ray_version")


class AggregateError(ValueError):
    """The folder or a file in it is not what a Ray Tune experiment holds; the message says which."""


# ---------------------------------------------------------------- reading one experiment folder

def trial_dirs(exp_dir: str | Path) -> list[Path]:
    """The experiment's trial folders (those holding params.json), sorted by name."""
    return sorted(p.parent for p in Path(exp_dir).glob("*/params.json"))


def check_experiment(exp_dir: str | Path) -> Path:
    """The folder as a Path if it is a Ray Tune experiment folder; else AggregateError naming the problem."""
    exp = Path(exp_dir).expanduser()
    if not exp.exists():
        raise AggregateError(f"{exp} does not exist; pass a Ray Tune experiment folder such as results/<sweep>-<stamp>")
    if not exp.is_dir():
        raise AggregateError(f"{exp} is a file, not a folder; pass a Ray Tune experiment folder such as "
                             f"results/<sweep>-<stamp>")
    if trial_dirs(exp):
        return exp
    inner = sorted(p.parent.parent.name for p in exp.glob("*/*/params.json"))
    if inner:
        names = sorted(set(inner))
        raise AggregateError(f"{exp} holds {len(names)} experiment folder(s), not trials; pass one of them, "
                             f"e.g. {exp / names[-1]}")
    if list(exp.glob("experiment_state-*.json")) or (exp / "sweep.json").is_file():
        raise AggregateError(f"{exp} is an experiment folder with no trial folders yet (no */params.json); "
                             f"wait for the first trial to start")
    raise AggregateError(f"{exp} is not a Ray Tune experiment folder (no trial folders with params.json); "
                         f"pass the folder printed at the end of `python -m sweeper.run`")


def _resumed_after_tear(line: str) -> list[dict] | None:
    """The records of a line where an interrupted write was followed by a resumed trial's append.

    Tune writes each report and its newline in one flush and appends after a restore, so a trial
    killed mid-flush and then resumed leaves `<cut-short record><whole record>` on one line (or
    `<whole record><whole record>` when only the newline was lost). The cut-short piece is dropped:
    the resumed trial reports again from its checkpoint. None when the line is not of that shape.
    """
    if not line.startswith("{"):  # Tune starts every record at the start of a line
        return None
    for j in (i for i, c in enumerate(line) if c == "{" and i > 0):
        try:
            rec = json.loads(line[j:])
        except json.JSONDecodeError:
            continue
        try:
            head = [json.loads(line[:j])]  # a whole record whose newline was lost
        except json.JSONDecodeError:
            head = []  # cut short: dropped
        return [*head, rec]
    return None


def read_json_lines(path: Path) -> tuple[list[dict], bool]:
    """The reports in a result.json and whether its last line was torn (cut short by an interrupt).

    A torn LAST line is expected of a trial killed while writing and is dropped; so is a torn record
    that a resumed trial's next report was appended to (see _resumed_after_tear). Any other unreadable
    line before the last means the file is corrupt, and raises.
    """
    if not path.is_file():
        return [], False
    lines = [(i, s) for i, s in enumerate(path.read_text(errors="replace").split("\n"), 1) if s.strip()]
    out, torn = [], False
    for k, (lineno, line) in enumerate(lines):
        try:
            recs = [json.loads(line)]
        except json.JSONDecodeError as e:
            recs = _resumed_after_tear(line)
            if recs is None:
                if k < len(lines) - 1:
                    raise AggregateError(f"{path}: line {lineno} is not JSON ({e.msg}) and is not the last line, "
                                         f"so the file is corrupt; move this trial folder aside and rerun the "
                                         f"report") from None
                torn = True
                break
        for rec in recs:
            if not isinstance(rec, dict):
                raise AggregateError(f"{path}: line {lineno} is a JSON {type(rec).__name__}, not a report object; "
                                     f"move this trial folder aside and rerun the report")
            out.append(rec)
    return out, torn


def read_reports(tdir: Path) -> list[dict]:
    """All reports of a trial, oldest first (result.json)."""
    reports, _ = read_json_lines(tdir / "result.json")
    return reports


def read_params(tdir: Path) -> dict:
    """The trial's config, flattened (nested dicts as "a/b" keys, lists as JSON text)."""
    return flatten(_params(tdir))


def _params(tdir: Path) -> dict:
    path = tdir / "params.json"
    try:
        params = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise AggregateError(f"{path} is not JSON ({e.msg}); restore it from params.pkl or move the trial "
                             f"folder aside") from None
    if not isinstance(params, dict):
        raise AggregateError(f"{path} holds a JSON {type(params).__name__}, not a config object")
    return params


def read_sweep(exp_dir: str | Path) -> dict | None:
    """sweep.json (the Sweep as JSON, written by sweeper.run before the Tuner starts), or None."""
    path = Path(exp_dir) / "sweep.json"
    if not path.is_file():
        return None
    try:
        sweep = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise AggregateError(f"{path} is not JSON ({e.msg}); delete or fix it to aggregate without it") from None
    if not isinstance(sweep, dict):
        raise AggregateError(f"{path} holds a JSON {type(sweep).__name__}, not a Sweep object")
    return sweep


def newest_ray_state(exp_dir: str | Path) -> Path | None:
    """The experiment_state-<start time>.json that Tune restores: the greatest name (its drivers' start
    times), as Tune picks it; None if there is none."""
    return max(Path(exp_dir).glob("experiment_state-*.json"), default=None)


def read_ray_states(exp_dir: str | Path) -> dict[str, dict]:
    """trial folder name -> {"status": Ray's TERMINATED|ERROR|RUNNING|..., "trial_id", "config"} from the newest
    experiment_state-*.json; {} if there is none or its layout is not the one Ray 2.x writes."""
    state = newest_ray_state(exp_dir)
    if state is None:
        return {}
    try:
        data = json.loads(state.read_text())
    except json.JSONDecodeError as e:
        warnings.warn(f"{state} is not JSON ({e.msg}); trial status is taken from the trial files only")
        return {}
    out = {}
    for item in data.get("trial_data", []) if isinstance(data, dict) else []:
        trial = item[0] if isinstance(item, list) and item else item
        trial = json.loads(trial) if isinstance(trial, str) else trial
        if isinstance(trial, dict) and isinstance(trial.get("relative_logdir"), str):
            out[trial["relative_logdir"]] = {"status": trial.get("status"), "trial_id": trial.get("trial_id"),
                                             "config": trial.get("config") or {}}
    return out


# ---------------------------------------------------------------- one trial -> one row

def trial_status(reports: list[dict], has_error: bool, ray_status: str | None, steps=None) -> str:
    """One of STATUSES; see the module docstring for the rules. steps: the trial's configured length."""
    last = reports[-1] if reports else {}
    if _truthy(last.get("diverged")):
        return "diverged"
    if refusal(last):
        return "failed"
    step, steps = _num(last.get("step")), _num(steps)
    if math.isfinite(steps):
        if step >= steps:
            return "finished"
        if has_error or ray_status == "ERROR":
            return "failed"
        return "stopped" if _truthy(last.get("done")) or ray_status == "TERMINATED" else "incomplete"
    if _truthy(last.get("done")):
        return "finished"
    if has_error or ray_status == "ERROR":
        return "failed"
    if ray_status == "TERMINATED":
        return "stopped" if "done" in last else "finished"
    return "incomplete"


def environment_versions() -> dict:
    """Python, torch and Ray versions installed here (read from package metadata; nothing imported)."""
    out = {"python_version": platform.python_version()}
    for pkg in ("torch", "ray"):
        try:
            out[f"{pkg}_version"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[f"{pkg}_version"] = None
    return out


def trial_row(tdir: Path, sweep: str, ray_states: dict[str, dict], env: dict, params: dict | None = None) -> dict:
    """The trials-table row of one trial folder: bookkeeping, config keys, final_* and best_* metrics
    (`params`: its params.json as read_params gives it, where the caller has read it)."""
    reports = read_reports(tdir)
    params = read_params(tdir) if params is None else params
    unknown = sorted(k for k in params if k not in config_cols())
    if unknown:  # the trainable refuses such a key (TrainConfig.from_dict): other code wrote this trial
        raise AggregateError(f"{tdir / 'params.json'}: key(s) {unknown} are not TrainConfig fields, so no row of "
                             f"the tables can name them; report this experiment with the code that ran it")
    state = ray_states.get(tdir.name, {})
    error_txt = tdir / "error.txt"
    has_error = error_txt.is_file() or (tdir / "error.pkl").is_file()
    last = reports[-1] if reports else {}
    row = {
        "sweep": sweep,
        "trial_id": _trial_id(tdir, last, state),
        "trial_dir": tdir.name,
        "status": trial_status(reports, has_error, state.get("status"), params.get("steps")),
        "n_reports": len(reports),
        "n_failures": error_txt.read_text(errors="replace").count("Failure #") if error_txt.is_file()
        else int(has_error),
        "wall_time_s": _num(last.get("wall_time", last.get("time_total_s"))),
        "hostname": last.get("hostname"),
        KERNELS_KEY: last.get(KERNELS_KEY),
    }
    reported = {k: last.get(k) for k in VERSION_KEYS}
    if any(v is not None for v in reported.values()):
        row.update(reported, versions_source="reported")
    else:
        row.update(env, versions_source="aggregation_env")
    row.update(params)
    metrics = {k: v for k, v in last.items() if k not in RAY_KEYS and k not in VERSION_KEYS and k != KERNELS_KEY}
    row.update({f"final_{k}": _scalar(v) for k, v in flatten(metrics).items()})
    row.update(best_metrics(reports))
    row.update(bestval_metrics(reports))
    row.update(median_last_metrics(reports))
    return row


def best_metrics(reports: list[dict]) -> dict:
    """best_<m> = min over reports of each error metric (NaNs skipped), and the step it was reached at."""
    out = {}
    for m in ERROR_METRICS:
        vals = np.array([_num(r.get(m)) for r in reports], dtype=float)
        if not np.isfinite(vals).any():
            out[f"best_{m}"] = math.nan
            continue
        i = int(np.nanargmin(np.where(np.isfinite(vals), vals, np.nan)))
        out[f"best_{m}"] = float(vals[i])
        if m == "test_error":
            out["best_step"] = _num(reports[i].get("step", reports[i].get("training_iteration")))
    return out


def median_last_metrics(reports: list[dict], last: int = MEDIAN_LAST) -> dict:
    """medlast_<m>: the median of each error metric over its last `last` finite values (NaN without any);
    medlast_n: how many test_error values that median took, medlast_of: how many the trial reported."""
    out = {}
    for m in ERROR_METRICS:
        vals = np.array([_num(r.get(m)) for r in reports], dtype=float)
        vals = vals[np.isfinite(vals)]
        out[f"medlast_{m}"] = float(np.median(vals[-last:])) if len(vals) else math.nan
        if m == "test_error":
            out["medlast_n"], out["medlast_of"] = min(len(vals), last), len(vals)
    return out


def bestval_metrics(reports: list[dict]) -> dict:
    """bestval_<m> for every error metric at the report whose val_error is lowest (the first such
    report on ties; non-finite val_error skipped), and that report's step as bestval_step. All NaN
    when no report has a finite val_error (val_size=0: no validation split)."""
    i = chosen_on_val(_num(r.get(SELECT_METRIC)) for r in reports)  # the trainer's rule (trainables/selection.py)
    if i is None:
        return {f"bestval_{m}": math.nan for m in ERROR_METRICS} | {"bestval_step": math.nan}
    out = {f"bestval_{m}": _num(reports[i].get(m)) for m in ERROR_METRICS}
    out["bestval_step"] = _num(reports[i].get("step", reports[i].get("training_iteration")))
    return out


# ---------------------------------------------------------------- the whole experiment

def load_trials(exp_dir: str | Path) -> pd.DataFrame:
    """One row per trial of a Ray Tune experiment folder (finished, interrupted or running).

    Columns: BOOK_COLS (sweep, trial_id, trial_dir, status, n_reports, n_failures, wall_time_s,
    hostname, python/torch/ray versions and `versions_source`: "reported" if the trial reported
    them, else "aggregation_env" = what is installed where this function runs; `cpu_kernels` only as
    the trial reported it), every config key of params.json (a key some trials lack is filled with the
    TrainConfig default, which is what those trials ran with), `final_<metric>` (last report),
    `bestval_<error metric>` (at the report of lowest val_error) with `bestval_step`, and
    `best_<error metric>` (minimum over reports) with `best_step`. Ray is not imported.
    """
    exp = check_experiment(exp_dir)
    sweep_meta = read_sweep(exp) or {}
    sweep = sweep_meta.get("name") or exp.name
    states, env = read_ray_states(exp), environment_versions()
    raw = {t: _params(t) for t in trial_dirs(exp)}
    blank = [t.name for t, p in raw.items() if unresolved(p)]
    if blank:
        warnings.warn(f"{len(blank)} trial(s) of {exp} have Tune's placeholders instead of a config (resumed "
                      f"without the grid's trials.json), so they ran nothing of the sweep and are left out: "
                      f"{', '.join(blank)}")
    rows = [trial_row(t, sweep, states, env, flatten(p)) for t, p in raw.items() if t.name not in blank]
    if not rows:
        raise AggregateError(f"no trial of {exp} has a config (each holds Tune's placeholders); run the sweep anew")
    df = pd.DataFrame(rows)
    config = [c for c in df.columns if is_config(c)]
    full = pd.DataFrame([full_config({k: v for k, v in r.items() if is_config(k) and not _blank(v)}) for r in rows],
                        index=df.index)
    for c in config:
        if df[c].isna().any() and c not in BOOKKEEPING:  # what a trial without the key ran with
            df[c] = df[c].astype(object).where(df[c].notna(), full[c])
            df[c] = df[c].infer_objects()
    return df.sort_values(["trial_id"], kind="stable").reset_index(drop=True)


PAUSE_S = 600  # this long with no trial training: the run was stopped and resumed later, not working


def run_span(exp: Path, written: float | None = None) -> tuple[float, float, float] | None:
    """(start, end, paused) of the sweep in `exp`, in seconds since the epoch, from Tune's result.json in
    each trial folder (a trial trained during each report's [timestamp - time_this_iter_s, timestamp]);
    None for a folder without reports.
    start: sweep.json written, or the first trial's start where that is earlier (Tune rewrites the
      experiment's files, sweep.json too, when a resumed run ends).
    end: `written` (the report's summary.csv, say) where it came within PAUSE_S of the newest report,
      else the newest report (a report rebuilt later is no part of the run).
    paused: the seconds of [start, end] in stretches of PAUSE_S or more in which no trial trained, the
      time between a stopped run and its `--resume`, which a wall time must not count."""
    spans = []
    for f in exp.glob("*/result.json"):
        for line in f.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:  # the last line of a trial the stop cut off mid-write
                continue
            if isinstance(r.get("timestamp"), (int, float)) and isinstance(r.get("time_this_iter_s"), (int, float)):
                spans.append((r["timestamp"] - r["time_this_iter_s"], r["timestamp"]))
    if not spans:
        return None
    spans.sort()
    made = exp / "sweep.json"
    start = min(made.stat().st_mtime, spans[0][0]) if made.is_file() else spans[0][0]
    last = max(b for _, b in spans)
    end = written if written is not None and last <= written < last + PAUSE_S else last
    paused, edge = 0.0, start
    for a, b in spans:
        if a - edge >= PAUSE_S:
            paused += a - edge
        edge = max(edge, b)
    return start, end, paused


def load_history(exp_dir: str | Path,
                 metrics: tuple[str, ...] = ("test_error", "g0_norm", "sparsity")) -> pd.DataFrame:
    """Every report of every trial: columns trial_id, step, and the given metrics where reported.

    A step reported twice (a trial restored from its checkpoint repeats steps) keeps the last.
    """
    exp = check_experiment(exp_dir)
    states, frames = read_ray_states(exp), []
    for tdir in trial_dirs(exp):
        reports = read_reports(tdir)
        if not reports:
            continue
        tid = _trial_id(tdir, reports[-1], states.get(tdir.name, {}))
        step = [_num(r.get("step", r.get("training_iteration", i + 1))) for i, r in enumerate(reports)]
        cols = {m: [_num(r.get(m)) for r in reports] for m in metrics if any(m in r for r in reports)}
        frames.append(pd.DataFrame({"trial_id": tid, "step": step, **cols}))
    if not frames:
        return pd.DataFrame(columns=["trial_id", "step"])
    hist = pd.concat(frames, ignore_index=True)
    return hist.drop_duplicates(["trial_id", "step"], keep="last").reset_index(drop=True)


TRIALS = "trials.parquet"
HISTORY = "history.parquet"
HISTORY_METRICS = ("test_error", "val_error")  # what history.parquet keeps of each report: the error curves


def history_frame(history: pd.DataFrame) -> pd.DataFrame:
    """history.parquet's frame from load_history's: (n_evaluations, 4) with trial_id (text), step (int32),
    test_error and val_error (float32, NaN where a report has none); reports with neither error and steps
    that are not finite are left out. float32 and no other metric: long runs' curves stay small."""
    out = pd.DataFrame({"trial_id": history["trial_id"].astype(str) if len(history) else pd.Series(dtype=str)})
    step = pd.to_numeric(history.get("step", pd.Series(dtype=float)), errors="coerce")
    for m in HISTORY_METRICS:
        col = history[m] if m in history.columns else pd.Series(np.nan, index=history.index)
        out[m] = pd.to_numeric(col, errors="coerce").astype(np.float32)
    keep = np.isfinite(step) & out[list(HISTORY_METRICS)].notna().any(axis=1)
    out.insert(1, "step", step.where(keep, 0).astype(np.int32))
    return out[keep].reset_index(drop=True)


def write_history(history: pd.DataFrame, path: str | Path) -> Path:
    """history.parquet (history_frame of load_history's frame), written atomically beside trials.parquet."""
    out = history_frame(history)
    return atomic_write(path, lambda tmp: out.to_parquet(tmp, engine="pyarrow", index=False))


def read_history(exp_dir: str | Path) -> pd.DataFrame | None:
    """A run's history.parquet (trial_id, step, test_error, val_error), or None for a folder without one
    (a committed run under docs/runs/ keeps none)."""
    path = Path(exp_dir) / HISTORY
    return pd.read_parquet(path) if path.is_file() else None


def stored_run(exp_dir: str | Path) -> bool:
    """A finished run kept without its trial folders (docs/runs/<run>): trials.parquet and no */params.json,
    which the report rebuilds its tables, plots and page from."""
    exp = Path(exp_dir).expanduser()
    return exp.is_dir() and (exp / TRIALS).is_file() and not trial_dirs(exp)


def read_trials(exp_dir: str | Path) -> pd.DataFrame:
    """The trials table of a run: load_trials of its trial folders, or a stored run's trials.parquet;
    AggregateError (check_experiment's) for a folder with neither."""
    if stored_run(exp_dir):
        return pd.read_parquet(Path(exp_dir).expanduser() / TRIALS)
    return load_trials(exp_dir)


def config_columns(df: pd.DataFrame) -> list[str]:
    """The config keys among the trials table's columns."""
    return [c for c in df.columns if is_config(c)]


def group_keys(df: pd.DataFrame) -> list[str]:
    """Config keys a summary groups by: all of them except the seed and bookkeeping (NON_GROUP_KEYS)."""
    return [c for c in config_columns(df) if c not in NON_GROUP_KEYS]


def check_which(which: str) -> str:
    """One of WHICH; AggregateError naming the choices otherwise."""
    if which not in WHICH:
        raise AggregateError(f"which must be one of {', '.join(WHICH)}; got {which!r}")
    return which


def metric_column(df: pd.DataFrame, metric: str, which: str) -> str:
    """The trials-table column holding `metric` at the `which` point: final_<m>, bestval_<m> (best_val)
    or best_<m> (best_test)."""
    which = check_which(which)
    if which != "final" and metric not in ERROR_METRICS:
        raise AggregateError(f"'{which}' is defined for the error metrics {list(ERROR_METRICS)} only, not "
                             f"{metric!r}; use which='final'")
    col = f"{WHICH_PREFIX[which]}{metric}"
    if col not in df.columns:
        have = sorted(c[len("final_"):] for c in df.columns if c.startswith("final_"))
        raise AggregateError(f"no trial reported {metric!r} (no column {col}); reported metrics: "
                             f"{', '.join(have) or 'none yet'}")
    return col


def summarize(df: pd.DataFrame, metric: str = "test_error", which: str = "final") -> pd.DataFrame:
    """Mean ± std of `metric` per config, seeds pooled: one row per distinct `group_keys(df)` value.

    which="final": the metric at each trial's last report (the honest default); "best_val": at the
    report of lowest val_error (early stopping on the validation split; NaN for trials without
    val_error); "best_test": its minimum over the reports (selected on the test set,
    optimistic; what the paper's authors reported); "median_last": its median over the last
    MEDIAN_LAST reports (FixMatch's). Error metrics only for the last three.
    std is the SAMPLE standard deviation (ddof=1), as the paper's ± over 3 runs; NaN when n < 2.
    Only finished trials with a finite value are averaged: `n` counts them. `n_failed`,
    `n_diverged`, `n_incomplete` (stopped, running or interrupted) and `n_trials` are shown beside
    them and never averaged in. `seeds` lists the seeds averaged.
    """
    col = metric_column(df, metric, which)
    which = check_which(which)
    keys = group_keys(df)
    stats = []
    groups = df.groupby(keys, dropna=False, sort=True) if keys else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        ok = g[(g["status"] == "finished") & np.isfinite(pd.to_numeric(g[col], errors="coerce"))]
        vals = ok[col].to_numpy(dtype=float)
        seeds = sorted(ok["seed"].tolist()) if "seed" in ok.columns else []
        stats.append({**dict(zip(keys, key)), "metric": metric, "which": which,
                      "mean": float(vals.mean()) if len(vals) else math.nan,
                      "std": float(vals.std(ddof=1)) if len(vals) > 1 else math.nan,
                      "n": len(vals),
                      "n_failed": int((g["status"] == "failed").sum()),
                      "n_diverged": int((g["status"] == "diverged").sum()),
                      "n_incomplete": int(g["status"].isin(("stopped", "incomplete")).sum()),
                      "n_trials": len(g),
                      "seeds": ",".join(str(_plain(s)) for s in seeds)})
    return pd.DataFrame(stats)


def seed_values(df: pd.DataFrame, metric: str = "test_error", which: str = "final") -> dict[tuple, dict]:
    """{config_key(config, group_keys(df)): {seed: value}}: what `summarize` averages, seed by seed
    (finished trials with a finite value only), for pairing two configs over their common seeds.
    A seed that ran twice in one config (a repeated run in one folder) keeps the mean of its values."""
    col = metric_column(df, metric, which)
    keys = group_keys(df)
    if "seed" not in df.columns:
        return {}
    ok = df[(df["status"] == "finished") & np.isfinite(pd.to_numeric(df[col], errors="coerce"))]
    out: dict[tuple, dict] = {}
    for _, r in ok.iterrows():
        out.setdefault(config_key(r, keys), {}).setdefault(_plain(r["seed"]), []).append(float(r[col]))
    return {k: {s: float(np.mean(v)) for s, v in by_seed.items()} for k, by_seed in out.items()}


def config_key(row, keys) -> tuple:
    """A hashable key of a config (a trials or summary row): its values at `keys`, NaN as None."""
    return tuple(None if _isnan(row[k]) else _plain(row[k]) for k in keys)


def write_trials(df: pd.DataFrame, path: str | Path) -> Path:
    """trials.parquet (pyarrow), written atomically. Columns mixing text and numbers become text."""
    out = _parquet_safe(df)
    return atomic_write(path, lambda tmp: out.to_parquet(tmp, engine="pyarrow", index=False))


def write_summary(summary: pd.DataFrame, folder: str | Path) -> dict[str, Path]:
    """summary.parquet and summary.csv in `folder`, each written atomically."""
    folder = Path(folder)
    out = _parquet_safe(summary)
    return {"summary.parquet": atomic_write(folder / "summary.parquet",
                                            lambda tmp: out.to_parquet(tmp, engine="pyarrow", index=False)),
            "summary.csv": atomic_write(folder / "summary.csv", lambda tmp: summary.to_csv(tmp, index=False))}


# ---------------------------------------------------------------- small helpers

@functools.cache
def config_cols() -> frozenset[str]:
    """The trials table's config columns, declared: every TrainConfig field and the keys the driver adds
    to a trial's params (trainables.config.BOOKKEEPING)."""
    return frozenset(train_config_defaults()) | frozenset(BOOKKEEPING)


def _blank(v) -> bool:
    """A value the trials table shows as missing (None, NaN)."""
    return v is None or isinstance(v, float) and math.isnan(v)


def is_config(col: str) -> bool:
    """Whether a trials-table column is a config key; AggregateError for a column of no declared kind."""
    if col in config_cols():
        return True
    if col in BOOK_COLS or col.startswith(METRIC_PREFIXES):
        return False
    raise AggregateError(f"trials-table column {col!r} is undeclared: neither a config key (a TrainConfig field "
                         f"or trainables.config.BOOKKEEPING), nor bookkeeping (aggregate.BOOK_COLS), nor a metric "
                         f"({', '.join(p + '*' for p in METRIC_PREFIXES)}); declare it where it belongs")


def _trial_id(tdir: Path, last: dict, state: dict) -> str:
    if isinstance(last.get("trial_id"), str):
        return last["trial_id"]
    if isinstance(state.get("trial_id"), str):
        return state["trial_id"]
    return tdir.name.removeprefix(TRIAL_DIR_PREFIX)


def flatten(d: dict, prefix: str = "") -> dict:
    """Nested dicts become "a/b" keys (Ray's convention); lists become JSON text."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (list, tuple)) else v
    return out


def _truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and bool(v)


def _num(v) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    return math.nan


def _scalar(v):
    return json.dumps(v) if isinstance(v, (list, tuple, dict)) else v


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def _isnan(v) -> bool:
    return isinstance(v, (float, np.floating)) and math.isnan(v)


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy whose object columns hold one kind of value each (pyarrow rejects str mixed with float)."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype != object:
            continue
        kinds = {type(v) for v in out[c] if v is not None and not (isinstance(v, float) and math.isnan(v))}
        numeric = all(issubclass(t, (int, float, np.integer, np.floating)) and not issubclass(t, bool)
                      for t in kinds)
        if len(kinds) > 1 and not numeric:
            out[c] = out[c].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v))
                                else str(v))
    return out
