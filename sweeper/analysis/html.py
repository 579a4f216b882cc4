"""report.html: one self-contained page per sweep, built from the files the report writes.

The page shows what table.md, table_sensitivity.md and table_ranked.md show, cell for cell (it renders the
text those are written from: table.json, table_sensitivity.json and table_ranked.json, render.grid), plus
the sweep's hypothesis and baseline (its module's docstring), the command, preset and provenance (commit,
versions, machine, start and wall time: a committed run's machine.json where it has one), the progress
line (trials finished / running / failed / diverged of the total), each cell's test error by step
(curves.png from history.parquet, or one line saying the run keeps no such history), every PNG the report
made, each cell's per-seed values on demand (<details>), the failed and diverged trials with their error
line and folder, and for a search (hpo, hpo_base) the figures optuna.visualization draws from the study
the search used (optuna.db; matplotlib backend). Everything is inline: CSS as a <style>, images as base64
data URIs, no script and no request to any network, so the file reads the same offline, from a bucket or
as an e-mail attachment. While the sweep runs (live.json says so, sweeper/driver/live.py) the page reloads
itself every 30 s.

    python -m sweeper.report results/ablation_radius-20260101-120000   # writes report.html beside table.md
    python -m sweeper.report docs/runs/ablation_radius-quick-s0-7 --out /tmp/page   # into /tmp/page
    pytest tests/test_html.py -q
"""
from __future__ import annotations

import base64
import html
import importlib
import io
import json
import math
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

from search_spaces import names as sweep_names
from sweeper import storage as store
from sweeper.analysis.aggregate import HISTORY, TRIALS, config_columns, metric_column, read_sweep, run_span
from trainables.files import atomic_write, one_line

PAGE = "report.html"
LIVE = "live.json"   # {"state": "running" | "ended", "updated": epoch seconds, "load_avg": [...], "stalled", "ended_stalled": {trial: {...}}}: the driver's heartbeat (sweeper/driver/live.py)
STALE_S = 600        # a "running" heartbeat older than this: the driver is gone (killed, machine lost)
TABLES = (("table.json", "Results"), ("table_sensitivity.json", "Sensitivity (Table 3)"),
          ("table_ranked.json", "Search: trials ranked"))  # each a grid (render.grid, ranking.ranking_grid)
FIRST_PLOT = "paired_diffs.png"  # drawn right under the table it summarises
CURVES = "curves.png"  # plots.plot_curves: each cell's test error by step, in its own section
CURVE_CAPTION = ("Test error vs step: each cell's mean over its finished seeds (line) and their minimum to maximum "
                 "(band); one panel per table column, one line per table row")
RELOAD_S = 30
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em auto;max-width:1200px;
color:#1b1b1b;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right}.progress{font-weight:600;font-size:1.05em}.stalled{color:#b00;font-weight:600}
.state-running{color:#a15c00}.state-finished{color:#176117}.state-interrupted{color:#a11}
details summary{cursor:pointer;color:#555;font-size:.85em}details table{font-size:.85em}
img{max-width:100%;border:1px solid #eee}figure{margin:1em 0}figcaption{color:#555;font-size:.9em}
ul.notes{color:#333;font-size:.9em}code,pre{background:#f6f6f6;padding:.1em .3em}pre{white-space:pre-wrap}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:600}dd{margin:0}
"""


# ---------------------------------------------------------------- per-seed values of a cell

def _equal(a, b) -> bool:
    """Config values from table.csv and trials.parquet compare equal (10 == 10.0, "True" == True, NaN == NaN)."""
    if isinstance(a, (bool,)) or isinstance(b, (bool,)):
        return str(a).lower() == str(b).lower()
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    return fa == fb or (math.isnan(fa) and math.isnan(fb))


def cell_trials(cells: pd.DataFrame, trials: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """(row label, column label) of each table.csv line -> the trials of that cell: those whose
    values of the table's row and column keys are the cell's."""
    keys = [k for k in config_columns(trials) if k in cells.columns]
    out = {}
    for _, c in cells.iterrows():
        hit = pd.Series(True, index=trials.index)
        for k in keys:
            hit &= trials[k].map(lambda v, want=c[k]: _equal(v, want))
        out[(str(c["row"]), str(c["col"]))] = trials[hit]
    return out


def _seed_table(tr: pd.DataFrame, col: str | None) -> str:
    rows = "".join(
        f"<tr><td class=num>{html.escape(str(r['seed']))}</td><td>{html.escape(str(r['status']))}</td>"
        f"<td class=num>{_num(r.get(col)) if col else '—'}</td><td><code>{html.escape(str(r['trial_dir']))}</code></td></tr>"
        for _, r in tr.sort_values("seed", kind="stable").iterrows())
    return (f"<details><summary>{len(tr)} seed(s)</summary><table><tr><th>seed</th><th>status</th>"
            f"<th>{html.escape(col or 'value')}</th><th>folder</th></tr>{rows}</table></details>")


def _num(v) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return html.escape(str(v))
    return "—" if math.isnan(f) else f"{f:.2f}"


# ---------------------------------------------------------------- where the sweep stands

def read_live(exp: store.Folder) -> dict | None:
    """The driver's heartbeat (live.json) of the experiment folder `exp`, local or on a bucket; None where
    it has none. A torn file raises ValueError, an unreadable one OSError or StorageError: each caller
    says whether that is an error or a fresh start."""
    live = exp / LIVE
    if not store.is_file(live):
        return None
    beat = json.loads(store.read_text(live))
    if not isinstance(beat, dict):
        raise ValueError(f"a JSON {type(beat).__name__}, not the driver's heartbeat object")
    return beat


_WARNED: set[str] = set()


def page_live(exp: store.Folder) -> dict | None:
    """read_live for a report: a torn or unreadable live.json (a side file) never stops it; the report
    leaves the heartbeat out, with one warning on stderr per file."""
    try:
        return read_live(exp)
    except (OSError, store.StorageError, ValueError) as e:
        if str(exp) not in _WARNED:
            _WARNED.add(str(exp))
            print(f"warning: {exp / LIVE} is unreadable ({one_line(e)}); the report leaves the driver's "
                  f"heartbeat out (running or stalled trials are judged from the trials' own files)", file=sys.stderr)
        return None


def sweep_state(exp: Path, trials: pd.DataFrame, total: int, now: float | None = None) -> str:
    """finished: every one of the `total` trials ended (finished, stopped, failed or diverged);
    running: the driver's heartbeat (live.json, sweeper/driver/live.py) says running and is fresh (STALE_S),
    or, for a folder without one, a trial reported within STALE_S; interrupted: anything else
    (Ctrl+C, a killed driver, a lost machine: `--resume` continues it)."""
    now = time.time() if now is None else now
    ended = trials["status"].isin(("finished", "stopped", "failed", "diverged")).sum() if len(trials) else 0
    if len(trials) >= total and ended == len(trials):
        return "finished"
    beat = page_live(exp)
    if beat is not None:
        fresh = beat.get("state") == "running" and now - float(beat.get("updated", 0)) < STALE_S
    else:
        newest = max((p.stat().st_mtime for p in exp.glob("*/result.json")), default=0.0)
        fresh = now - newest < STALE_S
    return "running" if fresh else "interrupted"


def stored_loads(exp: store.Folder) -> list[float]:
    """The load averages live.json holds from the experiment's earlier drivers (a run resumed with
    --resume), else []: so its load covers the whole wall time, not only the last part."""
    try:
        return (read_live(exp) or {}).get("load_avg") or []
    except (OSError, store.StorageError, ValueError):  # unreadable or torn: start a new list
        return []
def stalled_trials(exp: Path, key: str = "stalled") -> dict[str, dict]:
    """The running trials the driver's heartbeat names stalled (live.json's "stalled", sweeper/driver/stalls.py),
    or with key="ended_stalled" those --end-stalled ended: {trial folder: {"silent_s", "pace_s"}}, as of
    its last beat; {} without one."""
    return (page_live(exp) or {}).get(key) or {}


def stalled_text(stalled: dict[str, dict], lead: str = "Stalled") -> str:
    """"Stalled: train_tune_3 (no report for 61 s; its reports came at most 2.1 s apart)" for the page."""
    return f"{lead}: " + "; ".join(f"{t} (no report for {s['silent_s']:g} s; its reports came at most "
                                   f"{s['pace_s']:g} s apart)" for t, s in sorted(stalled.items()))


# ---------------------------------------------------------------- pieces of the page

def table_html(grid: dict, cells: pd.DataFrame | None = None, trials: pd.DataFrame | None = None,
               value_col: str | None = None) -> str:
    """A table's grid (render.grid: title, header, rows, notes) as an HTML <table> with the same cell strings
    as its Markdown; with table.csv's `cells` and the trials, each result cell gets its seeds in a <details>
    below its text."""
    title, header, body, notes = grid["title"], grid["header"], grid["rows"], grid["notes"]
    by_cell = cell_trials(cells, trials) if cells is not None and trials is not None else {}
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    lines = []
    for row in body:
        tds = [f"<th scope=row>{html.escape(row[0])}</th>"]
        for h, text in zip(header[1:], row[1:]):
            tr = by_cell.get((row[0], h))
            seeds = _seed_table(tr, value_col) if tr is not None and len(tr) else ""
            tds.append(f"<td><span class=cell>{html.escape(text)}</span>{seeds}</td>")
        lines.append("<tr>" + "".join(tds) + "</tr>")
    out = f"<p><b>{html.escape(title)}</b></p>" if title else ""
    out += f"<table class=results><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table>"
    if notes:
        out += "<ul class=notes>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"
    return out


def img_html(data: bytes, caption: str) -> str:
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    return f"<figure><img src=\"{uri}\" alt=\"{html.escape(caption)}\"><figcaption>{html.escape(caption)}</figcaption></figure>"


def hypothesis(name: str) -> str:
    """The paragraph of search_spaces/<name>.py's docstring that begins "Hypothesis:" (to the first
    command line or blank line); "" for a sweep without a module (a --confirm run) or without one."""
    if name not in sweep_names():  # a --confirm run, or a name edited in sweep.json ("a.b", "../x")
        return ""
    doc = importlib.import_module(f"search_spaces.{name}").__doc__ or ""
    lines, out = doc.splitlines(), []
    for line in lines:
        if line.startswith("Hypothesis:") or out:
            if not line.strip() or line.startswith("    "):
                break
            out.append(line)
    return " ".join(out)


def progress(trials: pd.DataFrame, total: int, state: str) -> str:
    """"3 of 8 trials finished, 1 running, 0 failed, 0 diverged" (+ stopped early by ASHA, not started):
    the trials' statuses (sweeper/analysis/aggregate.py); an unfinished trial is running while the sweep
    runs and interrupted otherwise."""
    n = trials["status"].value_counts() if len(trials) else pd.Series(dtype=int)
    word = "interrupted" if state == "interrupted" else "running"
    parts = [f"{int(n.get('finished', 0))} of {total} trials finished", f"{int(n.get('incomplete', 0))} {word}",
             f"{int(n.get('failed', 0))} failed", f"{int(n.get('diverged', 0))} diverged"]
    if n.get("stopped", 0):
        parts.append(f"{int(n['stopped'])} stopped early by ASHA")
    if total > len(trials):
        parts.append(f"{total - len(trials)} not started")
    return ", ".join(parts)


def total_trials(meta: dict, trials: pd.DataFrame) -> int:
    """The sweep's trial count: a search's samples, a grid's trials (sweep.json), else (and for --seeds auto)
    the folders found."""
    search = meta.get("search") or {}
    if meta.get("max_seeds"):  # --seeds auto: the results decide how many trials run
        return len(trials)
    return int(search.get("num_samples") or meta.get("n_trials") or len(trials))


MACHINE = "machine.json"  # a committed run's machine (docs/runs/<run>/, study/committed_runs.py): cpu, cores, wall_min, date


def read_machine(exp: Path) -> dict | None:
    """The run's machine.json ({"cpu", "cores", "cpu_kernels", "date", "wall_min", "paused_min", "wall_note",
    ...}), or None where it has none or it is not a JSON object (the page then says what the trials tell)."""
    try:
        m = json.loads((exp / MACHINE).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def machine_line(machine: dict | None, hosts: list[str]) -> str:
    """"AMD EPYC, 2 cores, AVX512 kernels (machine.json); host vm": the CPU machine.json records, then the
    host names the trials reported; "unknown" with neither."""
    parts = []
    if machine:
        cpu = [machine.get("cpu") or "unknown CPU", f"{machine['cores']} cores" if machine.get("cores") else "",
               f"{machine['cpu_kernels']} kernels" if machine.get("cpu_kernels") else ""]
        parts.append(", ".join(c for c in cpu if c) + f" ({MACHINE})")
    if hosts:
        parts.append(("host " if len(hosts) == 1 else "hosts ") + ", ".join(hosts))
    return "; ".join(parts) or "unknown"


def machine_wall(machine: dict) -> str:
    """The wall time machine.json records: "<minutes> min (machine.json)", with its stop before a --resume and its note."""
    text = f"{float(machine['wall_min']):.1f} min ({MACHINE}"
    if machine.get("paused_min"):
        text += f"; stopped and resumed: {float(machine['paused_min']):.0f} min between, not counted"
    return text + ")" + (f"; {machine['wall_note']}" if machine.get("wall_note") else "")


def run_times(exp: Path, machine: dict | None) -> list[tuple[str, str]]:
    """The page's start and wall time: machine.json's wall time where it has one, else the trials' reports
    (sweep.json to the newest report, a stop before a --resume left out); the start from the reports or
    sweep.json, or for a run kept without its trials' files machine.json's date (the day it ended)."""
    span = run_span(exp)  # (start, newest report, a stop before a --resume in between)
    made = (exp / "sweep.json").stat().st_mtime if (exp / "sweep.json").is_file() else None
    if not span and machine and machine.get("date"):
        when = ("date", f"{machine['date']} (the day the run ended, {MACHINE})")
    else:
        start = span[0] if span else made
        when = ("started", time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(start)) if start else "unknown")
    if machine and isinstance(machine.get("wall_min"), (int, float)):
        wall = machine_wall(machine)
    elif span:
        wall = f"{(span[1] - span[0] - span[2]) / 60:.1f} min (sweep.json to the newest report" \
            + (f"; stopped and resumed: {span[2] / 60:.0f} min between, not counted)" if span[2] else ")")
    else:
        wall = "—"
    return [when, ("wall time", wall)]


def provenance(exp: Path, meta: dict, trials: pd.DataFrame) -> list[tuple[str, str]]:
    argv = meta.get("argv") or []
    command = "python -m sweeper.run " + shlex.join([str(a) for a in argv[1:]]) if argv else "unknown"
    machine = read_machine(exp)
    versions = {c: sorted({str(v) for v in trials[c].dropna()}) for c in
                ("python_version", "torch_version", "ray_version", "hostname") if c in trials.columns}
    return [("command", command), ("preset", str(meta.get("preset", "unknown"))),
            ("commit", str(meta.get("commit") or "unknown (not recorded: run outside a git checkout)")),
            ("machine", machine_line(machine, versions.get("hostname", []))),
            ("versions", "; ".join(f"{k.removesuffix('_version')} {', '.join(v)}" for k, v in versions.items()
                                   if k != "hostname" and v) or "unknown"),
            *run_times(exp, machine), ("folder", str(exp))]


def curves_html(out: Path) -> str:
    """The curves section: curves.png (plots.plot_curves) with its caption, else one line saying why there
    is none: no history.parquet in the folder (a committed run keeps none), or no finished trial with a
    test error in it yet."""
    if (out / CURVES).is_file():
        return img_html((out / CURVES).read_bytes(), CURVE_CAPTION)
    if not (out / HISTORY).is_file():
        return (f"<p class=no-curves>No curves: this run keeps no per-evaluation history ({HISTORY}), "
                f"only each trial's summary in {TRIALS}.</p>")
    return f"<p class=no-curves>No curves yet: no finished trial has a test error in {HISTORY}.</p>"


def problems_html(exp: Path, trials: pd.DataFrame) -> str:
    """Failed and diverged trials: status, seed, folder and the error line (the last line of error.txt)
    or where the loss went non-finite."""
    bad = trials[trials["status"].isin(("failed", "diverged"))] if len(trials) else trials
    if not len(bad):
        return "<p>None.</p>"
    rows = []
    for _, r in bad.iterrows():
        if r["status"] == "failed":
            err = exp / r["trial_dir"] / "error.txt"
            lines = [s for s in err.read_text(errors="replace").splitlines() if s.strip()] if err.is_file() else []
            what = lines[-1].strip() if lines else "no error.txt (Ray marked it ERROR)"
        else:
            what = f"non-finite loss; stopped at step {_num(r.get('final_step'))}"
        rows.append(f"<tr><td>{html.escape(str(r['status']))}</td><td class=num>{html.escape(str(r.get('seed')))}</td>"
                    f"<td><code>{html.escape(str(exp / r['trial_dir']))}</code></td><td>{html.escape(what)}</td></tr>")
    return ("<table class=problems><tr><th>status</th><th>seed</th><th>folder</th><th>error</th></tr>"
            + "".join(rows) + "</table>")


def study_figures(db: Path, study_name: str) -> list[tuple[str, bytes]]:
    """optuna.visualization's optimisation history, parallel coordinates and parameter importances of
    the search's study, as PNGs (matplotlib backend). Each needs two complete trials; fewer: none."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    import warnings
    from optuna.visualization import matplotlib as ovm

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{db}")
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < 2:
        return []
    out = []
    figures = [("Optimisation history (Optuna; trials ASHA stopped count with their value where stopped)",
                ovm.plot_optimization_history),
               ("Parallel coordinates (Optuna)", ovm.plot_parallel_coordinate)]
    if len({tuple(sorted(t.params.items())) for t in complete}) > 1:
        figures.append(("Parameter importances (Optuna, fANOVA)", ovm.plot_param_importances))
    for caption, plot in figures:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            ax = plot(study)
        fig = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
        fig.set_size_inches(9, 5)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=80)
        plt.close(fig)
        out.append((caption, buf.getvalue()))
    return out


# ---------------------------------------------------------------- the page

def build_page(exp: Path, which: str = "final", now: float | None = None, out: Path | None = None) -> str:
    """The HTML of report.html for a run whose report (table.json, table.csv, trials.parquet, PNGs) has been
    written to `out` (default: the run's folder `exp`, which holds sweep.json, live.json, machine.json and
    the trials' folders); `now` (epoch seconds, default the clock): when the page says it was written."""
    now = time.time() if now is None else now
    out = exp if out is None else Path(out)
    meta = read_sweep(exp) or {}
    name = meta.get("name") or exp.name
    trials = pd.read_parquet(out / TRIALS)
    total = total_trials(meta, trials)
    state = sweep_state(exp, trials, total, now)
    cells = pd.read_csv(out / "table.csv") if (out / "table.csv").is_file() else None
    parts = [f"<h1>{html.escape(name)}</h1>",
             f"<p>{html.escape(meta.get('description', ''))}"
             + (f" ({html.escape(meta['paper_ref'])})" if meta.get("paper_ref") else "") + "</p>"]
    hyp = hypothesis(name)
    if hyp:
        parts.append(f"<p class=hypothesis>{html.escape(hyp)}</p>")
    if meta.get("baseline"):
        parts.append(f"<p>Baseline (sweep.json): <code>{html.escape(json.dumps(meta['baseline']))}</code></p>")
    parts.append(f"<p class=\"progress state-{state}\" id=progress>{html.escape(progress(trials, total, state))}</p>"
                 f"<p>Sweep <span id=state>{state}</span>; page written "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(now))}"
                 + (f", reloads every {RELOAD_S} s" if state == "running" else "") + ".</p>")
    stalled = stalled_trials(exp) if state == "running" else {}
    if stalled:
        parts.append(f"<p class=stalled id=stalled>{html.escape(stalled_text(stalled))}</p>")
    ended = stalled_trials(exp, "ended_stalled")
    if ended:
        parts.append(f"<p class=stalled id=ended-stalled>"
                     f"{html.escape(stalled_text(ended, 'Ended as stalled (--end-stalled)'))}</p>")
    parts.append("<dl class=provenance>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                                                    for k, v in provenance(exp, meta, trials)) + "</dl>")
    shown = set()
    for fname, heading in TABLES:
        if not (out / fname).is_file():
            continue
        main = fname == "table.json"
        value_col = None
        if main and cells is not None and len(cells):
            value_col = metric_column(trials, str(cells["metric"].iloc[0]), str(cells["which"].iloc[0]))
        parts.append(f"<h2>{heading}</h2>" + table_html(json.loads((out / fname).read_text()), cells if main else None,
                                                         trials if main else None, value_col))
        if main and (out / FIRST_PLOT).is_file():
            parts.append(img_html((out / FIRST_PLOT).read_bytes(), "Paired differences from the baseline "
                                  "(95% t-intervals over seeds)"))
            shown.add(FIRST_PLOT)
    parts.append("<h2>Curves</h2>" + curves_html(out))
    shown.add(CURVES)
    search = meta.get("search") or {}
    if search.get("space") and (exp / "optuna.db").is_file():
        figs = study_figures(exp / "optuna.db", name)
        parts.append("<h2>Search: Optuna's figures</h2>" + ("".join(img_html(png, c) for c, png in figs) if figs
                     else "<p>Fewer than two complete trials in the study yet.</p>"))
    plots = [p for p in sorted(out.glob("*.png")) if p.name not in shown]
    if plots:
        parts.append("<h2>Plots</h2>" + "".join(img_html(p.read_bytes(), p.name) for p in plots))
    parts.append("<h2>Failed and diverged trials</h2>" + problems_html(exp, trials))
    refresh = f"<meta http-equiv=refresh content={RELOAD_S}>" if state == "running" else ""
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8>{refresh}"
            f"<meta name=viewport content=\"width=device-width,initial-scale=1\">"
            f"<title>{html.escape(name)}: {html.escape(exp.name)}</title><style>{CSS}</style></head>"
            f"<body>{''.join(parts)}</body></html>\n")


def write_page(exp: str | Path, which: str = "final", out: str | Path | None = None) -> Path:
    """Write report.html into `out` (default the run's folder `exp`), atomically: a reader never sees
    half a page."""
    exp = Path(exp)
    out = exp if out is None else Path(out)
    page = build_page(exp, which, out=out)
    return atomic_write(out / PAGE, lambda t: Path(t).write_text(page))
