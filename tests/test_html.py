"""report.html (sweeper/analysis/html.py), the index of a results root (sweeper/analysis/index.py), the live rebuild
(sweeper/driver/live.py) and the study's marks of ASHA-stopped trials (sweeper/driver/optuna_search.py).

The fast tests build pages from synthetic experiment folders and read them back with the stdlib's
HTML parser; the slow ones run a cut-down quick sweep through a real local Ray and open its pages in
headless Chromium (tests/browser.py).

    pytest tests/test_html.py -q -m "not slow"
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from browser import need_chromium, open_page
from conftest import write_trial
from test_report import make_search_exp, make_table_exp, reports

from sweeper.costs import machine_text
from study import committed_runs
from sweeper.analysis.html import LIVE, STALE_S, build_page, sweep_state
from sweeper.report import build_report, main
from sweeper.analysis.layout import SUMMARY_COLS
from search_spaces import get_sweep
from sweeper.analysis.aggregate import read_reports
from sweeper.driver.preflight import select_cells

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"
BASELINE = {"method": "mt", "vd": False, "mur": "none"}


def parse_markdown_table(md: str) -> tuple[str, list[str], list[list[str]], list[str]]:
    """(title, header, body rows, notes) of a table.md as a reader of the Markdown sees it: "### title", a
    pipe table (cells unescaped, "\\|" -> "|"), then "- note" lines. The page is rendered from table.json,
    never from this: the tests read the Markdown back to show that both say the same."""
    title, header, body, notes = "", [], [], []
    for line in md.splitlines():
        if line.startswith("### "):
            title = line[4:]
        elif line.startswith("|"):
            cells = [c.strip().replace("\0", "|") for c in line.strip()[1:-1].replace("\\|", "\0").split("|")]
            if all(set(c) <= set(":-") and c for c in cells):
                continue  # the alignment row
            if header:
                body.append(cells)
            else:
                header = cells
        elif line.startswith("- "):
            notes.append(line[2:])
    return title, header, body, notes


class Page(HTMLParser):
    """The parts of report.html the tests read: the results table's cells (text of .cell), the
    progress line, every src / href, <details> count."""

    def __init__(self, text: str):
        super().__init__()
        self.urls, self.rows, self.head, self.progress, self.details = [], [], [], "", 0
        self._in, self._table, self._row, self._buf = None, 0, None, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.urls += [a[k] for k in ("src", "href") if k in a]
        if self._in == "details":  # a cell's seeds: not part of the cell's text
            return
        cls = (a.get("class") or "").split()
        if tag == "table" and "results" in cls:
            self._table += 1
        if self._table == 1:
            if tag == "tr":
                self._row = []
            elif tag in ("th", "td") and self._row is not None:
                self._in, self._buf = tag, []
            elif tag == "span" and "cell" in cls:
                self._in, self._buf = "cell", []
            elif tag == "details":
                self.details += 1
                self._in = "details"
        if tag == "p" and a.get("id") == "progress":
            self._in, self._buf = "progress", []

    def handle_endtag(self, tag):
        if self._in == "details":
            if tag == "details":
                self._in = None
            return
        if self._in == "cell" and tag == "span":
            self._row.append("".join(self._buf))
            self._in = "td-done"
        elif self._in in ("th", "td") and tag == self._in:
            if self._row is not None:
                self._row.append("".join(self._buf))
            self._in = None
        elif self._in == "td-done" and tag == "td":
            self._in = None
        elif self._in == "progress" and tag == "p":
            self.progress, self._in = "".join(self._buf), None
        if tag == "tr" and self._row is not None and self._table == 1:
            if self.head:
                self.rows.append(self._row)
            else:
                self.head = self._row
            self._row = None
        if tag == "table" and self._table == 1:
            self._table = 2

    def handle_data(self, data):
        if self._in in ("th", "td", "cell", "progress"):
            self._buf.append(data)


def _signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def expected_cells(exp: Path) -> dict[tuple[str, str], str]:
    """(row, col) -> the cell's leading "mean ± std" and, where it has one, its difference from the
    baseline with the interval and the star, formatted here from summary.csv's numbers (the star
    computed from the interval's ends)."""
    summary, table = pd.read_csv(exp / "summary.csv"), pd.read_csv(exp / "table.csv")
    keys = [k for k in table.columns if k in summary.columns and k not in SUMMARY_COLS]
    out = {}
    for _, c in table.iterrows():
        s = summary
        for k in keys:
            s = s[s[k].astype(str) == str(c[k])]
        assert len(s) == 1, (c["row"], c["col"])
        s = s.iloc[0]
        text = f"{s['mean']:.2f} ± {s['std']:.2f}" if s["n"] > 1 else f"{s['mean']:.2f}"
        if not bool(s["is_baseline"]) and s["n_paired"] >= 2:
            star = "*" if s["diff_ci_low"] > 0 or s["diff_ci_high"] < 0 else ""
            text += f" · {_signed(s['diff_vs_baseline'])} [{_signed(s['diff_ci_low'])}, {_signed(s['diff_ci_high'])}]{star}"
        out[(c["row"], c["col"])] = text
    return out


@pytest.fixture(scope="module")
def table_page(tmp_path_factory):
    exp, _ = make_table_exp(tmp_path_factory.mktemp("page"), baseline=BASELINE)
    write_trial(exp, 99, {"method": "mt", "vd": False, "mur": "none", "entmin_coef": 0.0, "dataset": "cifar10",
                          "num_labels": 1000, "mur_radius": 10.0, "steps": 280_000, "val_size": 0, "seed": 7,
                          "trial_index": 99}, reports([40.0], done=False), error=True)
    err = next(exp.glob("train_tune_ab12c_00099_*")) / "error.txt"
    err.write_text("Failure # 1 (occurred at 2026-01-01)\nTraceback (most recent call last):\n  File x\n"
                   "RuntimeError: CUDA out of memory\n")
    meta = json.loads((exp / "sweep.json").read_text())
    (exp / "sweep.json").write_text(json.dumps({**meta, "n_trials": 40, "preset": "paper", "commit": "abc123",
                                                "argv": ["sweeper/run.py", "table_cifar", "--seeds", "3"]}))
    (exp / LIVE).write_text(json.dumps({"state": "ended", "updated": time.time()}))
    return exp, build_report(exp)


def test_page_cells_are_the_markdown_tables_and_summary_csvs(table_page):
    exp, paths = table_page
    page = Page(paths["report.html"].read_text())
    _, md_head, md_body, _ = parse_markdown_table(paths["table.md"].read_text())
    assert page.head == md_head and [r[0] for r in page.rows] == [r[0] for r in md_body]
    assert page.rows == md_body  # every cell string as table.md shows it: paper, Δ, "no Δ" reasons
    want = expected_cells(exp)
    col_of = {h: j for j, h in enumerate(md_head)}
    for (row, col), text in want.items():
        got = page.rows[[r[0] for r in page.rows].index(row)][col_of[col]]
        assert got.startswith(text), (row, col, got, text)
    assert page.details == len(want)  # each cell's seeds on demand


def test_the_page_is_rendered_from_the_tables_text_never_from_the_markdown(table_page, tmp_path):
    """table.json holds what table.md shows (title, header, cells, notes, read back from the Markdown by
    this file's own parser); the page follows table.json and does not read table.md: a copy of the run
    whose table.md is garbled and whose table.json names one cell anew gets a page with that cell's text."""
    exp, paths = table_page
    grid = json.loads(paths["table.json"].read_text())
    assert tuple(grid.values()) == parse_markdown_table(paths["table.md"].read_text())
    copy = tmp_path / exp.name
    shutil.copytree(exp, copy)
    (copy / "table.md").write_text("| garbled | table |\n")
    grid["rows"][0][1] = "planted text"
    (copy / "table.json").write_text(json.dumps(grid))
    page = Page(build_page(copy))
    assert page.rows[0][1].startswith("planted text")
    assert page.rows[1:] == Page(paths["report.html"].read_text()).rows[1:]


def test_page_cell_seeds_are_the_trials_of_that_cell(table_page):
    exp, paths = table_page
    text = paths["report.html"].read_text()
    trials = pd.read_parquet(exp / "trials.parquet")
    one = trials[(trials["method"] == "ict") & trials["vd"] & (trials["dataset"] == "cifar100")]
    m = re.search(r"<th scope=row>ICT \+ VD [^<]*</th>(.*?)(?=<th scope=row>|</tbody>)", text)
    cells = re.findall(r"<details>(.*?)</details>", m.group(1))
    assert len(cells) == 2  # CIFAR-10 and CIFAR-100
    for _, r in one.iterrows():
        assert f"{r['final_test_error']:.2f}" in cells[1] and r["trial_dir"] in cells[1]


def test_progress_line_and_problems_are_the_trials_statuses(table_page):
    exp, paths = table_page
    text = paths["report.html"].read_text()
    st = pd.read_parquet(exp / "trials.parquet")["status"].value_counts()
    assert (st["finished"], st["failed"], st["diverged"]) == (36, 1, 1)
    # 38 folders of 40 trials; live.json "ended": the sweep was interrupted, none is running
    assert Page(text).progress == "36 of 40 trials finished, 0 interrupted, 1 failed, 1 diverged, 2 not started"
    assert "RuntimeError: CUDA out of memory" in text and "non-finite loss; stopped at step" in text
    assert "python -m sweeper.run table_cifar --seeds 3" in text and "abc123" in text
    assert "Hypothesis: VD and MUR each lower the error" in text  # from search_spaces/table_cifar.py


def test_page_is_one_file_with_every_plot_inline(table_page):
    exp, paths = table_page
    page = Page(paths["report.html"].read_text())
    assert page.urls and all(u.startswith("data:image/png;base64,") for u in page.urls)  # no link, no request
    pngs = {n for n in paths if n.endswith(".png")}
    assert "paired_diffs.png" in pngs and len(page.urls) == len(pngs)
    inline = {base64.b64decode(u.split(",", 1)[1]) for u in page.urls}
    assert inline == {paths[n].read_bytes() for n in pngs}


def test_sweep_state_from_the_heartbeat(tmp_path):
    done = pd.DataFrame({"status": ["finished", "stopped", "failed"]})
    part = pd.DataFrame({"status": ["finished", "incomplete"]})
    now = 1e9
    assert sweep_state(tmp_path, done, 3, now) == "finished"
    (tmp_path / LIVE).write_text(json.dumps({"state": "running", "updated": now - 10}))
    assert sweep_state(tmp_path, part, 2, now) == "running"
    assert sweep_state(tmp_path, done, 4, now) == "running"  # one not started yet
    assert sweep_state(tmp_path, part, 2, now + STALE_S) == "interrupted"  # the driver stopped beating
    (tmp_path / LIVE).write_text(json.dumps({"state": "ended", "updated": now}))
    assert sweep_state(tmp_path, part, 2, now) == "interrupted"


@pytest.mark.slow
def test_search_page_has_the_ranked_table_and_optuna_figures(tmp_path):
    import optuna

    exp = make_search_exp(tmp_path / "hpo-20260101-000000")
    study = optuna.create_study(study_name="hpo", storage=f"sqlite:///{exp / 'optuna.db'}")
    for lr, r, v in ((0.1, 1.0, 8.0), (0.03, 2.0, 12.0), (0.2, 0.5, 10.5)):
        study.add_trial(optuna.trial.create_trial(
            params={"lr": lr, "mur_radius": r}, value=v,
            distributions={"lr": optuna.distributions.FloatDistribution(0.01, 0.3, log=True),
                           "mur_radius": optuna.distributions.FloatDistribution(0.25, 4.0, log=True)}))
    text = build_report(exp)["report.html"].read_text()
    assert "Search: trials ranked" in text and "Optimisation history" in text and "Parameter importances" in text
    ranked = pd.read_csv(exp / "table_ranked.csv")
    first = re.search(r"<h2>Search: trials ranked</h2>.*?<tbody>(.*?)</tbody>", text).group(1)
    assert f"<td><span class=cell>{ranked['trial_id'][0]}</span></td>" in first
    figs = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="(Optimisation|Parallel|Parameter)', text)
    assert len(figs) == 3 and all(base64.b64decode(b).startswith(PNG) for b, _ in figs)


@pytest.mark.slow
def test_index_of_a_results_root(tmp_path, capsys):
    a, _ = make_table_exp(tmp_path / "a", baseline=BASELINE)
    root = tmp_path / "results"
    root.mkdir()
    a = a.rename(root / "table_cifar-20260101-000000")
    build_report(a)
    b = make_search_exp(root / "hpo-20260102-000000")  # report not built yet
    assert main([str(root)]) == 0
    out = capsys.readouterr().out
    rows = Page((root / "index.html").read_text())
    assert [u for u in rows.urls] == ["./table_cifar-20260101-000000/report.html"]
    lines = out.splitlines()
    assert lines[0].startswith("hpo-20260102-000000  ?  ") and " 2/7  finished  —" in lines[0]
    assert lines[1].startswith("table_cifar-20260101-000000  ?  ") and "36/37  " in lines[1]
    # headline: the non-baseline cell of lowest mean, as table.md writes it
    t = pd.read_csv(a / "table.csv")
    best = t[~t["is_baseline"].astype(bool)].sort_values("mean").iloc[0]
    _, head, body, _ = parse_markdown_table((a / "table.md").read_text())
    md_row = next(r for r in body if r[0] == best["row"])
    assert f"{best['row']} ({best['col']}): {md_row[head.index(best['col'])]}" in lines[1]
    assert f"index: {root / 'index.html'}" in out and b.is_dir()


@pytest.mark.slow
def test_a_folder_name_cannot_make_a_link_run_script(tmp_path):
    """A results folder named like a URL with a scheme (`javascript:...`) is linked as a relative path
    below the index: every href of index.html and report.html has no scheme and, resolved against
    the page's own address, stays in the results root."""
    from urllib.parse import unquote, urljoin, urlparse

    root = tmp_path / "results"
    root.mkdir()
    a, _ = make_table_exp(tmp_path / "a", baseline=BASELINE)
    names = ["javascript:alert(document.domain)", "data:text,x", "https:evil.example"]
    for name in names:
        shutil.copytree(a, root / name)
        build_report(root / name)
    assert main([str(root)]) == 0
    base = "https://host.example/results/index.html"
    hrefs = Page((root / "index.html").read_text()).urls
    assert len(hrefs) == len(names)
    for href in hrefs:
        assert urlparse(href).scheme == "", href
        target = urlparse(urljoin(base, href))
        assert target.netloc == "host.example" and target.path.startswith("/results/"), href
        assert (root / unquote(target.path[len("/results/"):])).is_file(), href
    for name in names:
        page = Page((root / name / "report.html").read_text())
        assert all(urlparse(u).scheme in ("", "data") for u in page.urls)  # plots are inline data: images


class FakeChild:
    """A rebuild that runs until the fake clock reaches `until`, then exits with `rc`."""

    def __init__(self, clock, until, rc=0):
        import io

        self.clock, self.until, self.returncode, self.err = clock, until, None, io.StringIO("boom\n")
        self.rc = rc

    def poll(self):
        if self.clock[0] >= self.until:
            self.returncode = self.rc
        return self.returncode

    def wait(self, timeout=None):
        self.returncode = self.rc
        return self.rc


def test_live_callback_rebuilds_at_most_every_window_one_at_a_time(tmp_path, monkeypatch, capsys):
    from sweeper.driver import live

    builds, clock = [], [0.0]
    rcs = iter([0, 1, 0, 0])  # the second rebuild fails: due again after the window

    def start(exp):
        builds.append(clock[0])
        return FakeChild(clock, clock[0] + 5, next(rcs))

    monkeypatch.setattr(live, "start_rebuild", start)
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    cb = live.live_callback(tmp_path, every_s=30, heartbeat_s=60)
    cb.setup()
    assert json.loads((tmp_path / LIVE).read_text())["state"] == "running"
    for t, event in ((1, "complete"), (10, "complete"), (20, "step"), (31, "step"), (32, "step"), (40, "error"),
                     (61, "step"), (63, "step"), (70, "complete"), (92, "step"), (95, "step"), (96, "complete")):
        clock[0] = t
        if event == "complete":
            cb.on_trial_complete(0, [], SimpleNamespace(relative_logdir=f"trial_{t}"))
        elif event == "error":
            cb.on_trial_error(0, [], SimpleNamespace(relative_logdir=f"trial_{t}"))
        else:
            cb.on_step_end(0, [])
    # the end at 10 waits for the window (31); the rebuild of 31 fails (seen at 40), so one is due again,
    # at 61; the end at 70 waits for the window (92); the one at 96 for the rebuild of 92, still running
    assert builds == [1, 31, 61, 92]
    assert "live report: not rebuilt, trying again in 30 s: boom" in capsys.readouterr().err
    cb.on_experiment_end([])  # waits for the last rebuild, then says the driver ended
    assert cb.child is None and json.loads((tmp_path / LIVE).read_text())["state"] == "ended"


def test_the_heartbeat_keeps_the_load_it_saw_at_each_beat(tmp_path, monkeypatch):
    from sweeper.driver import live

    loads, clock = iter([1.5, 3.25, 2.0]), [0.0]
    monkeypatch.setattr(live.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    cb = live.live_callback(tmp_path, every_s=0, heartbeat_s=60)
    cb.setup()                   # beat 1
    clock[0] = 30
    cb.on_step_end(0, [])        # inside the heartbeat window: no beat
    clock[0] = 61
    cb.on_step_end(0, [])        # beat 2
    cb.on_experiment_end([])     # beat 3
    beat = json.loads((tmp_path / LIVE).read_text())
    assert beat["state"] == "ended" and beat["load_avg"] == [1.5, 3.25, 2.0]
    assert committed_runs.run_load(tmp_path) == {"mean": 2.25, "max": 3.25, "samples": 3}
    assert "1-minute load average 2.25 (at most 3.25) while it ran" in machine_text(
        {"cpu": "c", "load_avg": committed_runs.run_load(tmp_path)})
    (tmp_path / LIVE).write_text(json.dumps({"state": "ended", "updated": 0.0}))  # a run from before sampling
    assert committed_runs.run_load(tmp_path) is None


def test_a_resumed_run_keeps_the_load_its_earlier_driver_saw(tmp_path, monkeypatch):
    """Tune stores the callback before its first beat, so a resumed driver starts with no samples of its
    own; the samples already in live.json come first, and the run's load covers all its drivers."""
    from sweeper.driver import live

    monkeypatch.setattr(live.os, "getloadavg", lambda: (4.0, 0.0, 0.0))
    (tmp_path / LIVE).write_text(json.dumps({"state": "running", "updated": 0.0, "load_avg": [1.0, 2.5]}))
    cb = live.live_callback(tmp_path, every_s=0, heartbeat_s=60)
    cb.setup()
    cb.on_experiment_end([])
    assert json.loads((tmp_path / LIVE).read_text())["load_avg"] == [1.0, 2.5, 4.0, 4.0]
    assert committed_runs.run_load(tmp_path) == {"mean": 2.88, "max": 4.0, "samples": 4}


def test_the_pages_wall_time_leaves_out_a_stop_before_a_resume(tmp_path):
    """sweep.json at t0, the newest report at t0 + 3800 s: a trial trained until t0 + 100 s, the run stood
    stopped for an hour, then a trial trained 100 s after --resume. The page's wall time is 3800 - 3600 s
    = 3.3 min and names the 60 min stop; a run with no such stretch keeps its whole span (1300 s)."""
    from sweeper.analysis.html import provenance

    t0 = 1_800_000_000.0
    for name, spans, words in (("stopped", [(t0 + 10, t0 + 100), (t0 + 3700, t0 + 3800)],
                                "3.3 min (sweep.json to the newest report; stopped and resumed: 60 min between, not counted)"),
                               ("continuous", [(t0 + 10, t0 + 300), (t0 + 800, t0 + 1300)],
                                "21.7 min (sweep.json to the newest report)")):
        exp = tmp_path / name
        for i, (a, b) in enumerate(spans):
            f = exp / f"trial_{i}" / "result.json"
            f.parent.mkdir(parents=True)
            f.write_text(json.dumps({"timestamp": b, "time_this_iter_s": b - a}) + "\n")
            os.utime(f, (b, b))
        (exp / "sweep.json").write_text("{}")
        os.utime(exp / "sweep.json", (t0, t0))
        assert dict(provenance(exp, {}, pd.DataFrame()))["wall time"] == words


def test_marked_search_says_which_trials_asha_stopped():
    import optuna
    from ray import tune

    from sweeper.driver.optuna_search import MarkedOptunaSearch

    algo = MarkedOptunaSearch(space={"lr": tune.loguniform(0.01, 0.3)}, metric="val_error", mode="min", seed=0,
                              steps=100)
    for tid, result in (("a", {"val_error": 3.0, "step": 100}), ("b", {"val_error": 5.0, "step": 40})):
        algo.suggest(tid)
        algo.on_trial_complete(tid, result)
    trials = algo._ot_study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2  # as Ray's OptunaSearch tells it
    assert [t.value for t in trials] == [3.0, 5.0]
    assert [(t.user_attrs["tune_trial_id"], t.user_attrs["stopped_early"], t.user_attrs["step"]) for t in trials] \
        == [("a", False, 100), ("b", True, 40)]


# ---------------------------------------------------------------- a real sweep in a real browser

# three of the quick start's rows: LabelSpreading, MT + MUR (r = 1) and MT, the row it is compared with
CELLS = "method=labelspreading|mur=direct,mur_radius=1"
N_TRIALS = len(select_cells(get_sweep("ablation_radius", "quick"), [CELLS]).trials(seeds=2))  # those rows x 2 seeds
CUT = ["--cells", CELLS, "--seeds", "2", "--set", "steps=100", "--set", "eval_every=25", "--set", "lr_rampdown=50",
       "--set", "sensitivity_samples=20"]


def trial_reports(exp: Path) -> dict[str, list[dict]]:
    """Each trial's reports in the results folder, which gets them at Tune's saves of its state."""
    return {f.parent.name: read_reports(f.parent) for f in exp.glob("trial_*/result.json")}


def staged_reports(head, exp: Path) -> dict[str, list[dict]]:
    """Each trial's reports as the driver has taken them: Tune's staging copy of its result.json, which the
    driver writes at once (a report names the trial process's PID)."""
    files = head.temp.glob(f"session_*/artifacts/*/{exp.name}/driver_artifacts/trial_*/result.json")
    return {f.parent.name: read_reports(f.parent) for f in files}


def let_go(*pids: int | None) -> None:
    """SIGCONT to each held trial process still there (one let go earlier may have ended since)."""
    for pid in pids:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def running_pids(head, exp: Path) -> tuple[list[int], int]:
    """(the PIDs of the trial processes that have reported but not finished, the number of finished
    trials), as the driver has taken their reports."""
    staged = staged_reports(head, exp).values()
    return [r[-1]["pid"] for r in staged if r and not r[-1]["done"]], sum(bool(r) and r[-1]["done"] for r in staged)


def _consistent_snapshot(exp: Path):
    """(report.html text, trials.parquet) from one rebuild: the page is written after trials.parquet,
    so both are read between two equal page mtimes with the parquet no newer than the page."""
    page, parquet = exp / "report.html", exp / "trials.parquet"
    before = page.stat().st_mtime_ns
    text, trials = page.read_text(), pd.read_parquet(parquet)
    if page.stat().st_mtime_ns == before and parquet.stat().st_mtime_ns <= before:
        return text, trials
    return None


@pytest.mark.slow
def test_quick_sweep_pages_live_and_in_chromium(ray_head, tmp_path):
    """A cut-down quick sweep (three of its rows x 2 seeds of 100 steps): report.html appears after trials
    end and shows a partial table and the progress of that moment while the sweep runs (two trials' processes
    held with SIGSTOP meanwhile, so that the sweep cannot end before a rebuild has read a finished trial); the
    final page and the root's index open in Chromium with no network request, no console error,
    every image decoded, cells equal summary.csv's, the progress line the trials' statuses."""
    need_chromium()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper.run", "ablation_radius", "--preset", "quick", *CUT,
                             "--live-every", "1", "--stall-after", "0", "--storage", str(tmp_path),
                             "--address", ray_head.address],
                            cwd=ROOT, env={**ray_head.env, "TUNE_GLOBAL_CHECKPOINT_S": "1"},  # Tune's saves each second
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Two trial processes held (SIGSTOP) make the partial page certain whatever the machine's speed: the
    # first (X) once a trial has finished, so that the sweep cannot end; the second (Y) is let go only
    # once the results folder (which gets the trials at Tune's saves of its state) holds a finished
    # trial, and its end starts a rebuild that reads that trial with X still running.
    mid, x, y, released, unseen = None, None, None, False, False
    try:
        deadline = time.time() + 600
        while proc.poll() is None and time.time() < deadline and mid is None:
            time.sleep(0.05)
            exp = next(tmp_path.glob("ablation_radius-*"), None)
            if exp is None:
                continue
            pids, finished = running_pids(ray_head, exp)
            if x is None and finished and pids and finished + 2 < N_TRIALS:
                x = pids[0]
                os.kill(x, signal.SIGSTOP)
            elif x is not None and y is None and (others := [p for p in pids if p != x]):
                y = others[0]
                os.kill(y, signal.SIGSTOP)
            elif x is not None and y is None and finished + 1 >= N_TRIALS:
                unseen = True  # every other trial ended before a look saw it running: no Y to hold
                break
            if y is not None and not released and any(r and r[-1]["done"] for r in trial_reports(exp).values()):
                let_go(y)
                released = True
            if not (exp / "report.html").is_file():
                continue
            snap = _consistent_snapshot(exp)  # a page of the sweep under way that shows a finished trial
            if snap is not None and (snap[1]["status"] == "finished").any() and \
                    ((snap[1]["status"] != "finished").any() or len(snap[1]) < N_TRIALS):
                mid = snap
        let_go(x, None if released else y)
        out, _ = proc.communicate(timeout=600)
    finally:
        let_go(x, y)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert not unseen, "every trial but the held one ended before a look saw it running: no second trial to hold"
    assert mid is not None, "no report.html was written while the sweep ran"
    text, trials = mid
    n = trials["status"].value_counts()
    want = (f"{n.get('finished', 0)} of {N_TRIALS} trials finished, {n.get('incomplete', 0)} running, 0 failed, "
            f"0 diverged" + (f", {N_TRIALS - len(trials)} not started" if len(trials) < N_TRIALS else ""))
    page = Page(text)
    assert page.progress == want and n.get("finished", 0) < N_TRIALS
    assert "<meta http-equiv=refresh content=30>" in text and "Sweep <span id=state>running</span>" in text
    done = int(n.get("finished", 0))
    filled = sum(bool(re.match(r"\d", c)) for r in page.rows for c in r[1:])
    assert 0 < filled <= done  # a partial table: the cells of the finished trials only

    exp = next(tmp_path.glob("ablation_radius-*"))
    seen = open_page(exp / "report.html", tmp_path / "report.png")
    assert seen["blocked"] == [] and seen["errors"] == []
    assert len(seen["images"]) >= 4 and all(ok and w > 0 for ok, w in seen["images"])
    assert seen["progress"] == f"{N_TRIALS} of {N_TRIALS} trials finished, 0 running, 0 failed, 0 diverged"
    want = expected_cells(exp)
    col_of = {h: j for j, h in enumerate(seen["header"])}
    assert len(want) == N_TRIALS // 2 and sum(len(r[1]) for r in seen["table"]) >= len(want)  # one cell a config
    for (row, col), cell in want.items():
        got = next(cells for head, cells in seen["table"] if head == row)[col_of[col] - 1]
        assert got.startswith(cell), (row, col, got, cell)
    assert (tmp_path / "report.png").read_bytes().startswith(PNG)

    assert main([str(tmp_path)]) == 0
    idx = open_page(tmp_path / "index.html", tmp_path / "index.png")
    assert idx["blocked"] == [] and idx["errors"] == []
    assert idx["links"] == [(exp / "report.html").resolve().as_uri()]
    assert f"{exp.name}\tquick" in idx["text"] and f"{N_TRIALS} / {N_TRIALS}\tfinished" in idx["text"]


def test_a_corrupt_live_json_never_stops_a_report(tmp_path, capsys):
    """live.json is a side file: torn, or not the heartbeat's object, the report is built without it
    (one warning naming it) and the sweep's state comes from the trials' own files."""
    from sweeper.analysis.html import page_live

    exp, _ = make_table_exp(tmp_path)
    (exp / LIVE).write_text('{"state": "ended", "upd')
    assert main([str(exp)]) == 0
    err = capsys.readouterr().err
    assert (exp / "report.html").is_file() and err.count(f"warning: {exp / LIVE} is unreadable") == 1
    assert "finished" in (exp / "report.html").read_text()
    other = tmp_path / "other"
    other.mkdir()
    (other / LIVE).write_text("[1, 2]")
    assert page_live(other) is None and "not the driver's heartbeat object" in capsys.readouterr().err


def test_one_unreadable_experiment_does_not_hide_the_others_from_the_index(tmp_path, capsys):
    """A results root with a torn sweep.json in one experiment and a sweep name edited to hold a dot in
    another: exit 0, index.html lists every folder, the torn one as unreadable with its reason, one warning."""
    good, _ = make_table_exp(tmp_path)
    torn = tmp_path / "table_cifar-20260102-000000"
    shutil.copytree(good, torn)
    (torn / "sweep.json").write_text('{"name": "table_cif')
    dotted = tmp_path / "table_cifar-20260103-000000"
    shutil.copytree(good, dotted)
    (dotted / "sweep.json").write_text(json.dumps({**json.loads((good / "sweep.json").read_text()), "name": "a.b"}))
    assert main([str(dotted)]) == 0  # its page: no hypothesis for a name that is no sweep module
    capsys.readouterr()
    assert main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    page = (tmp_path / "index.html").read_text()
    assert all(e.name in page for e in (good, torn, dotted)) and "state-unreadable" in page and "is not JSON" in page
    reason = next(ln for ln in out.splitlines() if ln.startswith(torn.name)).split("unreadable  ")[1]
    assert "is not JSON" in reason
    assert err.strip().splitlines() == [f"warning: {torn.name} is unreadable ({reason}); its row in the index says so"]


# ---------------------------------------------------------------- a committed run: trials.parquet, no trial folders

COMMITTED = ROOT / "docs" / "runs" / "ablation_radius-quick-s0-7"


def folder_digest(folder: Path) -> dict[str, tuple]:
    """Every path under `folder`: a file's SHA-256 and modification time, a folder's mark; equal before and
    after means nothing was written, changed or added there."""
    import hashlib

    return {p.relative_to(folder).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            if p.is_file() else ("folder",) for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def committed_report(tmp_path_factory):
    """A copy of the quick start's committed run reported with --out into another folder: (run, out, exit
    status, the run's digest before, after)."""
    tmp = tmp_path_factory.mktemp("committed")
    run, out = tmp / COMMITTED.name, tmp / "page"
    shutil.copytree(COMMITTED, run)
    before = folder_digest(run)
    code = main([str(run), "--out", str(out)])
    return run, out, code, before, folder_digest(run)


def test_a_committed_run_is_reported_from_its_trials_parquet_into_out(committed_report):
    run, out, code, before, after = committed_report
    assert code == 0 and after == before  # the run's folder: not a file written, changed or added
    assert (out / "report.html").is_file() and (out / "trials.parquet").read_bytes() == (run / "trials.parquet").read_bytes()
    assert parse_markdown_table((out / "table.md").read_text())[:3] == \
        parse_markdown_table((COMMITTED / "table.md").read_text())[:3]  # title, header, every cell
    page = (out / "report.html").read_text()
    machine = json.loads((COMMITTED / "machine.json").read_text())
    assert machine["cpu"] == "AMD EPYC" and "<dt>machine</dt><dd>AMD EPYC, 2 cores" in page
    assert f"<dt>wall time</dt><dd>{machine['wall_min']:.1f} min (machine.json)</dd>" in page
    assert f"<dt>date</dt><dd>{machine['date']} (the day the run ended, machine.json)</dd>" in page
    n = len(pd.read_parquet(COMMITTED / "trials.parquet"))
    assert Page(page).progress == f"{n} of {n} trials finished, 0 running, 0 failed, 0 diverged"
    assert Page(page).rows == parse_markdown_table((COMMITTED / "table.md").read_text())[2]


def test_the_committed_run_draws_its_curves_and_a_run_without_history_says_so_in_one_line(committed_report, tmp_path):
    _, out, _, _, _ = committed_report
    page = (out / "report.html").read_text()
    assert (out / "history.parquet").read_bytes() == (COMMITTED / "history.parquet").read_bytes()
    assert (out / "curves.png").is_file() and "no-curves" not in re.search(r"<h2>Curves</h2>(.*?)<h2>", page).group(1)
    run = tmp_path / COMMITTED.name
    shutil.copytree(COMMITTED, run)
    (run / "history.parquet").unlink()                            # a run that kept no per-evaluation history
    assert main([str(run), "--out", str(tmp_path / "page")]) == 0
    page = (tmp_path / "page" / "report.html").read_text()
    assert not (tmp_path / "page" / "curves.png").exists()
    curves = re.search(r"<h2>Curves</h2>(.*?)<h2>", page).group(1)
    assert curves == ("<p class=no-curves>No curves: this run keeps no per-evaluation history (history.parquet), "
                      "only each trial's summary in trials.parquet.</p>")


def test_out_must_lie_outside_the_run_and_a_folder_of_neither_trials_nor_trials_parquet_waits(tmp_path, capsys):
    run = tmp_path / COMMITTED.name
    shutil.copytree(COMMITTED, run)
    before = folder_digest(run)
    assert main([str(run), "--out", str(run / "page")]) == 2
    assert "is inside the run's folder" in capsys.readouterr().err and folder_digest(run) == before
    (run / "trials.parquet").unlink()
    assert main([str(run), "--out", str(tmp_path / "page")]) == 2
    assert "no trial folders yet (no */params.json); wait for the first trial to start" in capsys.readouterr().err


def test_the_index_lists_a_committed_run_as_finished(tmp_path, capsys):
    """A results root holding a copy of the committed run: its row is n / n, finished, dated by machine.json;
    once the run's page is built, the row links it."""
    from sweeper.analysis.index import index_rows

    root = tmp_path / "runs"
    shutil.copytree(COMMITTED, root / COMMITTED.name)
    n = len(pd.read_parquet(COMMITTED / "trials.parquet"))
    date = json.loads((COMMITTED / "machine.json").read_text())["date"]
    (row,) = index_rows(root)
    assert (row.finished, row.total, row.state, row.started, row.has_page) == (n, n, "finished", date, False)
    assert main([str(root / COMMITTED.name)]) == 0 and main([str(root)]) == 0
    line = capsys.readouterr().out.splitlines()[-2]
    assert line.startswith(f"{COMMITTED.name}  quick  {date}  {n}/{n}  finished  MT + MUR (r=1): 3.00 ± 1.20")
    index = (root / "index.html").read_text()
    assert f"<td class=num>{n} / {n}</td><td class=state-finished>finished</td>" in index
    assert Page(index).urls == [f"./{COMMITTED.name}/report.html"]
