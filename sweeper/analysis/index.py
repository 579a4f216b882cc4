"""index.html of a results root: one row per sweep folder, linking to each sweep's report.html.

A row: the folder (its sweep's name and stamp), preset, start date, trials finished / total, the
state (running, finished, interrupted: html.sweep_state; unreadable, with the reason, where the folder's
files cannot be read), the headline cell and a link to the page.
The headline is the row with the lowest mean among those with a paired difference from the baseline
(table.csv), as the table shows it: "MT + MUR (r 1) · 3.11 ± 0.27 · −1.04 [−1.67, −0.40]*"; for a
search without a baseline, its first-ranked trial (table_ranked.csv). A folder whose report has not
been built yet (no table.csv) shows "—"; `python -m sweeper.report <folder>` builds it.

    python -m sweeper.report results/                      # writes results/index.html, prints the list
    python -m sweeper.report s3://BUCKET/results           # the same for a bucket (index.html uploaded)
"""
from __future__ import annotations

import html
import math
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sweeper import storage as store
from sweeper.analysis.aggregate import AggregateError, read_sweep, read_trials, stored_run, trial_dirs
from sweeper.analysis.html import CSS, PAGE, read_machine, sweep_state, total_trials
from sweeper.analysis.tables import cell_text
from trainables.files import atomic_write, one_line

INDEX = "index.html"
PULLED = ("table.csv", "table_ranked.csv", PAGE)  # besides the report's inputs: what a row and its link need


@dataclass(frozen=True)
class Row:
    folder: str      # relative to the root: the link is folder/report.html
    name: str
    preset: str
    started: str
    finished: int
    total: int
    state: str
    headline: str
    has_page: bool


def is_results_root(where: str | Path) -> bool:
    """A folder (or bucket prefix) holding experiment folders (*/sweep.json), not itself an experiment."""
    root = store.resolve(where)
    if isinstance(root, Path):
        return root.is_dir() and not (root / "sweep.json").is_file() and not trial_dirs(root) \
            and any(root.glob("*/sweep.json"))
    import pyarrow.fs as pafs

    if store.is_file(root / "sweep.json"):
        return False
    try:
        infos = root.fs.get_file_info(pafs.FileSelector(root.path, recursive=False, allow_not_found=True))
    except OSError as e:
        raise store.StorageError(store.explain(e, str(root))) from None
    return any(i.type == pafs.FileType.Directory and store.is_file(root / i.base_name / "sweep.json") for i in infos)


def headline(exp: Path) -> str:
    """The best row against the baseline with its interval (table.csv), else a search's first-ranked trial."""
    if (exp / "table.csv").is_file():
        t = pd.read_csv(exp / "table.csv")
        if "diff_vs_baseline" in t.columns:
            t["is_baseline"] = t["is_baseline"].astype(str).str.lower() == "true"
            t["within_baseline"] = t["within_baseline"].astype(str).str.lower() == "true"
            cand = t[~t["is_baseline"] & (t["n"] > 0) & t["n_paired"].gt(0)]
            if len(cand):
                r = cand.loc[cand["mean"].idxmin()]
                return f"{r['row']} ({r['col']}): {cell_text(r)}"
    if (exp / "table_ranked.csv").is_file():
        ranked = pd.read_csv(exp / "table_ranked.csv")
        metric = [c for c in ranked.columns if c.startswith("final_")]
        if len(ranked) and metric:
            r = ranked.iloc[0]
            return f"rank 1: trial {r['trial_id']}, " + ", ".join(f"{c} {r[c]:.2f}" for c in metric
                                                                  if not math.isnan(float(r[c])))
    return "—"


def sweep_row(root: Path, exp: Path) -> Row:
    """The index's row of one experiment folder; a run kept without its trial folders (aggregate.stored_run,
    as docs/runs/ keeps one) is judged from its trials.parquet's statuses and dated by its machine.json."""
    meta = read_sweep(exp) or {}
    stored = stored_run(exp)
    trials = read_trials(exp) if stored or trial_dirs(exp) else pd.DataFrame({"status": pd.Series(dtype=object)})
    total = total_trials(meta, trials)
    machine = read_machine(exp) if stored else None
    started = str(machine["date"]) if machine and machine.get("date") else \
        time.strftime("%Y-%m-%d %H:%M", time.localtime((exp / "sweep.json").stat().st_mtime))
    return Row(exp.relative_to(root).as_posix(), meta.get("name") or exp.name, str(meta.get("preset", "?")), started,
               int((trials["status"] == "finished").sum()), total, sweep_state(exp, trials, total),
               headline(exp), (exp / PAGE).is_file())


UNREADABLE = "unreadable"  # a row's state where the folder's files could not be read; its headline says why


def index_rows(root: Path) -> list[Row]:
    """Every experiment folder directly under root (those with sweep.json), newest first. A folder whose
    files cannot be read (a torn sweep.json, a corrupt result.json) is a row of state "unreadable" with its
    reason as headline: one bad folder never hides the others."""
    exps = sorted((p.parent for p in root.glob("*/sweep.json")), key=lambda p: (store.stamp(p.name), p.name),
                  reverse=True)
    rows = []
    for e in exps:
        try:
            rows.append(sweep_row(root, e))
        except (AggregateError, OSError, ValueError) as err:
            rows.append(Row(e.relative_to(root).as_posix(), e.name, "?", "?", 0, 0, UNREADABLE, one_line(err), False))
    return rows


def relative_href(*parts: str) -> str:
    """A link to the path `parts` below the page, that no folder name can turn into another scheme or
    place: each part percent-encoded whole (":" and "/" included), behind "./"
    (a folder named `javascript:alert(1)` is `./javascript%3Aalert%281%29/report.html`)."""
    return "./" + "/".join(urllib.parse.quote(p, safe="") for p in parts)


def index_html(root_name: str, rows: list[Row]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("sweep", "preset", "started", "finished / total", "state",
                                             "headline (best row vs baseline)", "page"))
    body = "".join(
        f"<tr><td>{html.escape(r.folder)}</td><td>{html.escape(r.preset)}</td><td>{html.escape(r.started)}</td>"
        f"<td class=num>{r.finished} / {r.total}</td><td class=state-{r.state}>{r.state}</td>"
        f"<td>{html.escape(r.headline)}</td><td>"
        + (f"<a href=\"{html.escape(relative_href(r.folder, PAGE))}\">{PAGE}</a>" if r.has_page else "not built yet")
        + "</td></tr>" for r in rows)
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>sweeps in {html.escape(root_name)}"
            f"</title><style>{CSS}</style></head><body><h1>Sweeps in {html.escape(root_name)}</h1>"
            f"<p>{len(rows)} sweep folder(s); written {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.</p>"
            f"<table class=index><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></body></html>\n")


def index_text(rows: list[Row]) -> str:
    return "\n".join(f"{r.folder}  {r.preset}  {r.started}  {r.finished}/{r.total}  {r.state}  {r.headline}"
                     for r in rows)


def write_index(root: Path, title: str | None = None) -> tuple[Path, list[Row]]:
    """root/index.html (atomically) and its rows."""
    rows = index_rows(root)
    page = index_html(title or str(root), rows)
    return atomic_write(root / INDEX, lambda t: Path(t).write_text(page)), rows


def pull_root(root: store.Location) -> Path:
    """A bucket's results root copied into the local cache: each experiment folder's report inputs
    (storage.report_inputs) and its table.csv, table_ranked.csv and report.html. Returns the cache
    folder of the root, under which each experiment's cache folder lies."""
    import pyarrow.fs as pafs

    try:
        infos = root.fs.get_file_info(pafs.FileSelector(root.path, recursive=False, allow_not_found=True))
    except OSError as e:
        raise store.StorageError(store.explain(e, str(root))) from None
    for info in infos:
        exp = root / info.base_name
        if info.type != pafs.FileType.Directory or not store.is_file(exp / "sweep.json"):
            continue
        _, cache = store.report_inputs(exp)
        for name in PULLED:
            store.pull_file(exp / name, cache / name)
    return store.local_folder(root)


def index_at(where: str | Path) -> tuple[Path, list[Row]]:
    """write_index for a local results root or a bucket URI (built in the local cache, then
    index.html uploaded to the root). Returns the local index.html and its rows."""
    root = store.resolve(where)
    if isinstance(root, Path):
        return write_index(root)
    path, rows = write_index(pull_root(root), title=str(root))
    store.write_bytes(root / INDEX, path.read_bytes())
    return path, rows
