"""The measured parts of the docs, generated from committed files, never typed.

docs/RESULTS.md comes from the run summaries in docs/runs/<sweep>-<preset>-s<first>-<last>/ (each
holds a finished results folder's sweep.json, summary.csv, table.md, trials.csv (one row per trial:
the keys it varies, seed, status, final metrics, its wall time), the PNGs the docs show, and
machine.json), the claims from docs/claims.json, docs/PERFORMANCE.md from benchmarks/results/*.json,
and the README's install figures (benchmarks/results/install.json), quick start (its time, machine and
table, one line per cell, from its run's machine.json and table.csv) and claims summary (the verdict
counts and docs/claims.png, drawn by study/claims_figure.py) from the same files (between the markers
`<!-- generated: NAME -->` and `<!-- end -->`).

    python -m study.docs                              # rewrite the generated files, redraw docs/claims.png
    python -m study.docs --check                      # exit 1 when a committed one differs
    python -m study.docs add results/<sweep>-<stamp>  # copy a finished run into docs/runs/, then rewrite
    python -m study.docs --picture                    # docs/report.png from the quick start's run (Chromium)

Claims are graded by study/claims.py from the committed runs' trials.csv (per-seed values), each
comparison once on every committed seed of it, split into two disjoint halves. docs/PERFORMANCE.md's
tables are drawn by study/benchmark_docs.py, and
study/committed_runs.py reads the committed runs and adds new ones. No torch, no Ray, no pandas (but in
`add`): this runs in CI's test of the docs.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import pandas as pd

from study.run_prices import RUNS, trial_count
from sweeper.costs import machine_text, per_trial
from study import claims as claimlib
from study import claims_figure
from study import gpu_prices, run_prices
from study.benchmark_docs import GENERATED_NOTE, INSTALL, performance_md
from study.committed_runs import (ROOT, DocsError, add, check_disjoint, command_line, public_args, read_run,
                                           run_dirs, runs_of)
from study.evidence import as_number
from sweeper.analysis.tables import diff_text, value_text
from study.picture import PAGE_INPUTS, QUICKSTART, PictureError, picture_is_current, write_picture
from trainables.files import one_line

CLAIMS = Path("docs/claims.json")


# ---------------------------------------------------------------- claims

def load_claims(root: Path = ROOT) -> list[dict]:
    return claimlib.load(root / CLAIMS)


def grade_claims(claims: list[dict], runs: list[dict]) -> list[tuple[dict, dict | None]]:
    """claims.grade_all, each claim with its grade (None for one the quick scale cannot test)."""
    return list(zip(claims, claimlib.grade_all(claims, runs)))


def command(sweep: str, preset: str) -> str:
    return f"python -m sweeper.run {sweep}" + ("" if preset == "paper" else f" --preset {preset}")


def _command(claim: dict) -> str:
    return command(claim["sweep"], claim["preset"]) if claim.get("testable", True) else ""


def verdict_key(g: dict | None) -> str:
    return "not testable here" if g is None else g["verdict"] or f"pending ({g['status']})"


def legend() -> list[str]:
    """One sentence per verdict: what it means, and what an undecided one needs."""
    return [f"- **{v}**: {claimlib.MEANING[v]}." for v in claimlib.VERDICTS]


def verdict_counts(graded: list[tuple[dict, dict | None]]) -> str:
    """How many claims got each verdict, in VERDICTS' order: "**25 yes** · 10 contradicted · …"."""
    counts: dict[str, int] = {}
    for _, g in graded:
        counts[verdict_key(g)] = counts.get(verdict_key(g), 0) + 1
    order = [*claimlib.VERDICTS, "pending (one seed set committed)", "pending (not committed)", "not testable here"]
    keys = sorted(counts, key=lambda k: order.index(k) if k in order else len(order))
    return " · ".join(f"**{counts[k]} {k}**" if k == "yes" else f"{counts[k]} {k}" for k in keys)


def claims_summary(graded: list[tuple[dict, dict | None]], figure: str, link: str | None = None) -> str:
    """The claims at a glance: the verdict counts, docs/claims.png (at the relative path `figure`), its
    caption, and the page with each claim's numbers (`link`, where given)."""
    lines = [f"Of {len(graded)} claims, on digits: {verdict_counts(graded)}.", "",
             f"![Each graded comparison's pooled Δ in units of its declared effect size]({figure})", "",
             claims_figure.caption(graded)]
    more = f"\nWhat each verdict means, and each claim with its Δ, interval and seeds, half by half: [{link}]({link})."
    return "\n".join(lines + ([more] if link else []))


def held_trials(run: dict, root: Path) -> int | None:
    """The trials a committed run holds, one count for every table: the trials.csv rows read_run parsed,
    else run_prices.trial_count (sweep.json's planned count where the run has no trials.csv)."""
    if run.get("trials"):
        return len(run["trials"])
    return trial_count(root / RUNS / run["name"], run["meta"].get("n_trials"))


def cost_md(runs: list[dict], root: Path) -> list[str]:
    """One row per committed run, by sweep: its trials, wall time and trial time (the trials' own wall
    times summed: CPU time, one CPU per trial), from its machine.json; a blank where it was not recorded."""
    rows = ["Trial-min: the trials' own wall times summed, the CPU time a run spent (each trial holds one CPU "
            "thread); a blank where the run's machine.json does not record it.", "",
            "| sweep | seeds | how | trials | wall min | trial-min | machine |", "|---|---|---|--:|--:|--:|---|"]
    for run in sorted(runs, key=lambda r: (r["sweep"], r["seeds"][0])):
        m, argv = run["machine"], run["meta"].get("argv") or []
        how = "--seeds auto" if "auto" in argv else "fixed"
        cells = [v for a, v in zip(argv, argv[1:]) if a == "--cells"]
        how += ", --cells-only" if "--cells-only" in argv else ""
        # two runs over one seed span: told apart; a "|" of --cells' alternatives escaped for the table
        how += f", --cells {' '.join(cells)}".replace("|", "\\|") if cells else ""
        trials = held_trials(run, root)
        rows.append(f"| `{run['sweep']}` | {run['seeds'][0]}-{run['seeds'][-1]} | {how} | {trials} | "
                    f"{m['wall_min']:.1f} | {'' if m.get('trial_min') is None else format(m['trial_min'], '.1f')} | "
                    f"{m.get('cpu', 'unknown CPU')} |")
    return rows


def sweep_cost_md(runs: list[dict], root: Path) -> list[str]:
    """cost_md's rows summed per sweep and over all: runs, trials, wall minutes, and trial-min over the runs
    whose machine.json records it (how many do, beside it)."""
    totals: dict[str, list] = {}  # sweep: [runs, trials, wall min, trial-min, runs that record it]
    for run in runs:
        m, t = run["machine"], totals.setdefault(run["sweep"], [0, 0, 0.0, 0.0, 0])
        timed = m.get("trial_min") is not None
        for i, v in enumerate((1, held_trials(run, root) or 0,
                               m["wall_min"], m.get("trial_min") or 0.0, int(timed))):
            t[i] += v
    totals = {f"`{k}`": totals[k] for k in sorted(totals)}
    totals["**all**"] = [sum(t[i] for t in totals.values()) for i in range(5)]
    return ["Sweep by sweep: the rows above summed, trial-min over the runs that record it.", "",
            "| sweep | runs | trials | wall min | trial-min | runs with trial-min |", "|---|--:|--:|--:|--:|--:|",
            *(f"| {k} | {n} | {trials} | {wall:.1f} | {format(cpu, '.1f') if timed else ''} | {timed} |"
              for k, (n, trials, wall, cpu, timed) in totals.items())]


def shared_md(graded: list[tuple[dict, dict | None]]) -> list[str]:
    """The comparisons more than one claim cites, with the sweeps whose trials they pool."""
    seen: dict[tuple, tuple[list[str], list[str]]] = {}
    for c, g in graded:
        for v in (g or {}).get("cells", []):
            if v["shared"]:
                key = tuple(sorted([c["claim"], *v["shared"]]))
                seen.setdefault(key, (list(key), v["sweeps"]))
    if not seen:
        return ["No two claims compare the same pair of configurations."]
    return [f"- {'; '.join(names)}: one grade, on the trials of {', '.join(sweeps)}" for names, sweeps in seen.values()]


def trial_cost(runs: list[dict]) -> dict[tuple[str, str], float]:
    """Trial-min per trial of each (sweep, preset), over its committed runs that record their trials' time."""
    by: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        by.setdefault((run["sweep"], run["preset"]), []).append(run["machine"])
    rates = {k: per_trial(ms) for k, ms in by.items()}
    return {k: r for k, r in rates.items() if r is not None}


def missing(g: dict) -> tuple[int, list[dict]] | None:
    """(seeds still to run, the configurations to train them on) for an undecided claim to reach the seeds
    per half its undecided comparisons need: twice the count, less the pairs each holds; None where a count
    is unknown or past claims.MAX_NEED."""
    views = [v for v in g["cells"] if v["verdict"] == "undecided"]
    if not views or any(v["need"][0] is None or v["need"][0] > claimlib.MAX_NEED for v in views):
        return None
    seeds = max(max(0, 2 * v["need"][0] - v["pooled"]["n"]) for v in views)
    configs = {repr(sorted(x.items())): x for v in views for x in (v["cell"], v["ref"])}
    return seeds, list(configs.values())


def cell_minutes(runs: list[dict], sweep: str, preset: str, cell: dict) -> float | None:
    """A cell's mean trial-min over the finished trials of the sweep's committed runs that record their own
    wall time (trials.csv's wall_time_s); None where none does."""
    times = [as_number(t.get("wall_time_s")) for r in runs if (r["sweep"], r["preset"]) == (sweep, preset)
             for t, _ in claimlib.matches(r["trials"], claimlib.run_configs(r), cell)]
    times = [t for t in times if math.isfinite(t)]
    return sum(times) / len(times) / 60 if times else None


def needs_md(graded: list[tuple[dict, dict | None]], runs: list[dict]) -> list[str]:
    """Per sweep, the undecided claims it grades, the most seeds per half they need, and what running the
    missing seeds of their cells alone (`--cells-only`) would cost: each cell at its own committed trial-min
    per trial, else at the sweep's."""
    cost = trial_cost(runs)
    by: dict[str, list[tuple[str, int | None, str]]] = {}
    for c, g in graded:
        if g is not None and g["verdict"] == "undecided":
            more, rate = missing(g), cost.get((c["sweep"], c["preset"]))
            plan = ""
            if more is not None and more[0] == 0:  # the count is a power-0.8 figure: it can miss
                plan = ": it holds that many already and both halves did not decide"
            elif more is not None:
                seeds, configs = more
                per = [cell_minutes(runs, c["sweep"], c["preset"], x) for x in configs]
                per = [rate if m is None else m for m in per]
                plan = f": {seeds:,} more seeds of {len(configs)} cells, {seeds * len(configs):,} trials" + (
                    f" ≈ {seeds * sum(per):,.0f} trial-min" if None not in per else "")
            by.setdefault(c["sweep"], []).append((c["claim"], g["need"][0], plan))
    if not by:
        return ["No claim is undecided."]
    out = []
    for sweep, items in by.items():
        ns = [n for _, n, _ in items if n is not None]
        top = (f"at most {max(ns)} seeds per half" if max(ns) <= claimlib.MAX_NEED else
               f"more than {claimlib.MAX_NEED} seeds per half for some") if ns else "no seed count follows"
        out.append(f"- `{sweep}` ({top}): " + "; ".join(
            f"{name} ({'?' if n is None else n if n <= claimlib.MAX_NEED else f'>{claimlib.MAX_NEED}'}{plan})"
            for name, n, plan in items))
    return out


# ---------------------------------------------------------------- RESULTS.md

def pooled_cells(claim: dict, g: dict | None) -> tuple[str, str]:
    """A claim's pooled Δ [95 % CI] and n, one line (`<br>`) per comparison, each named by the keys in which
    the claim's cells differ where it has several; ("—", "—") for a claim without a graded comparison."""
    if g is None or not g["cells"]:
        return "—", "—"
    metric = claim.get("metric", "test_error")
    unit = "" if metric == "test_error" else f" ({metric})"
    deltas = [(f"{label}: " if label else "") + claimlib.interval_text(v["pooled"], "test_error").removeprefix("Δ ")
              + unit for v, label in zip(g["cells"], claims_figure.cell_labels(claim))]
    return "<br>".join(deltas), "<br>".join(str(v["pooled"]["n"]) for v in g["cells"])


def run_command(run: dict) -> str:
    argv = run["meta"].get("argv") or []
    return command_line(argv) if public_args(argv) else command(run["sweep"], run["preset"])


def results_md(runs: list[dict], graded: list[tuple[dict, dict | None]], root: Path = ROOT) -> str:
    out = [GENERATED_NOTE, "# Results", "",
           "Every number here comes from a run summary committed under `docs/runs/` (a finished results",
           "folder's `sweep.json`, `summary.csv`, `table.md`, its per-seed `trials.csv` and the machine it ran",
           "on); the claims are declared",
           "in `docs/claims.json`. Final test error (%), mean ± sample std over seeds, and each cell's paired",
           "difference Δ from its baseline cell with a 95 % t-interval over the seeds both ran (`*`: excludes 0).",
           "",
           "CPU runs are deterministic: the same command on the same machine (CPU model, core count, torch",
           "version) prints the same digits; another CPU or torch version gives other digits, and the",
           "verdicts below are what to compare.",
           "",
           "## Claims", "",
           "Every finding of the paper's results sections, and the project's own claims about its quick preset,",
           "declared in `docs/claims.json` with the smallest difference that matters (`effect`, or `margin` for",
           "\"matches\"; the rule that gives each is beside it there) before the runs that grade it. Each",
           "testable one names cells and the cell each is compared with; Δ is the paired difference (cell −",
           "that cell). A comparison of two configurations is graded once, on every committed trial of both",
           "(a trial two sweeps ran counts once), at the smallest size the claims naming it declare: the seeds",
           "both ran, sorted, are split into two disjoint halves, and each half's 95 % t-interval is read as",
           "follows.", "", *legend(), "",
           "A claim of several cells is contradicted when one cell is, disagree when one disagrees, yes when",
           "every cell is, absent when one is, undecided otherwise.", "",
           claims_summary(graded, claims_figure.FIGURE.name), "", "### Each claim", "",
           "Pooled Δ: the paired difference over every committed seed of both cells, with its 95 % interval, one",
           "line per cell where a claim names several; n: the seeds both ran; the halves' intervals beside them.", ""]
    out.append("| claim | paper | sweep | verdict | pooled Δ [95 % CI] | n | evidence (per half) |")
    out.append("|---|---|---|---|---|--:|---|")
    for c, g in graded:
        sweep = f"`{c['sweep']}`" if c.get("testable", True) else "—"
        deltas, ns = pooled_cells(c, g)
        out.append(f"| {c['claim']} | {c['source']} | {sweep} | {claimlib.verdict_text(c, g, _command(c))} | "
                   f"{deltas} | {ns} | {claimlib.evidence_text(c, g)} |")
    out += ["", "### Claims that share evidence", "", *shared_md(graded),
            "", "### What the undecided claims need", "",
            "Seeds per half (power 0.8 at the pooled effect and spread), by the sweep that grades them; a",
            "comparison's seeds are split in two halves, so it needs twice as many in all, counting those it has.",
            "Beside each, the seeds still to run on every cell its undecided comparisons name, and their price",
            "with those cells alone (`--cells-only`): each cell at the mean trial-min of its committed trials that",
            "record their time, else at the sweep's trial-min per trial, on whichever CPUs they ran (a planning",
            "figure: the estimate of the seeds needed moves as seeds come in, and `--dry-run` prices a command",
            "for the CPU kernels of the machine it runs on):", "",
            *needs_md(graded, runs)]
    if runs:
        out += ["", "### What the committed runs cost", "", *cost_md(runs, root), "", *sweep_cost_md(runs, root)]
    else:
        out += ["", "No run is committed yet: `python -m study.docs add results/<sweep>-<stamp>` adds one."]
    for run in runs:
        m = run["machine"]
        out += ["", f"## {run['sweep']} ({run['preset']}, seeds {run['seeds'][0]}-{run['seeds'][-1]})", "",
                f"- command: `{run_command(run)}`",
                f"- machine: {machine_text(m)}",
                *([f"- code: commit {run['meta']['commit']}"] if run["meta"].get("commit") else []),
                f"- date: {m.get('date', 'unknown')}" + (f"; wall time {m['wall_min']:.1f} min" if m.get("wall_min") else "")
                + (f" (stopped and resumed: {m['paused_min']:.0f} min between, not counted)" if m.get("paused_min") else "")
                + (f"; {m['trials']} trials, {m['trial_min']:.1f} trial-min" if m.get("trial_min") is not None else ""),
                f"- files: [`docs/runs/{run['name']}/`](runs/{run['name']}/)", ""]
        out.append(run["table"])
        for png in run["pngs"]:
            out += ["", f"![{png}](runs/{run['name']}/{png})"]
        here = [(c, g) for c, g in graded if g is not None and any(run["name"] in v["runs"] for v in g["cells"])]
        if here:
            out += ["", "Claims whose grade uses trials of this run:", ""]
            out += [f"- {c['claim']}: {claimlib.verdict_text(c, g, '')}" for c, g in here]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- README blocks

def quickstart_md(runs: list[dict]) -> str:
    """The quick start's time and machine (machine.json) and its table, one line per cell (table.csv), from
    its committed run."""
    qs = runs_of(runs, *QUICKSTART)
    if not qs:
        return f"(no committed run of the quick start yet: `{command(*QUICKSTART)}`, then `python -m study.docs add`)"
    run = qs[0]
    cells = table_rows(run["folder"])
    if not cells:
        return (f"(the committed quick-start run {run['name']} has no {TABLE_CSV}: add it again with "
                f"`python -m study.docs add results/<sweep>-<stamp>`)")
    m, link = run["machine"], f"[docs/runs/{run['name']}](docs/runs/{run['name']}/)"
    return "\n".join([f"It {quickstart_time(m)}, and prints this table (one line per cell here):", "",
                      "```text", compact_table(run["table"], cells), "```", "", cells_note(cells),
                      f"Measured on {machine_text(m)} ({link})."])


def quickstart_time(m: dict) -> str:
    """"takes about 4.8 min on AMD EPYC, 2 cores": machine.json's wall time, CPU and cores."""
    where = m.get("cpu") or "an unknown CPU"
    where += f", {m['cores']} cores" if m.get("cores") else ""
    return f"takes about {m['wall_min']:.1f} min on {where}" if m.get("wall_min") else f"ran on {where}"


TABLE_CSV = "table.csv"


def table_rows(folder: Path) -> list[dict]:
    """The cells of a committed run's table.csv (one row per cell), in the table's order: rows as they come,
    columns by col_order; [] where the run has none."""
    if not (folder / TABLE_CSV).is_file():
        return []
    cells = pd.read_csv(folder / TABLE_CSV)
    order = list(dict.fromkeys(cells["row"]))
    return sorted(cells.to_dict("records"), key=lambda c: (order.index(c["row"]), float(c["col_order"])))


def compact_table(table_md: str, cells: list[dict]) -> str:
    """table.md's title, then one aligned line per cell: row, column, its value and its Δ from the baseline,
    each as table.md prints it (tables.value_text, tables.diff_text)."""
    baseline = next((c["baseline"] for c in cells if isinstance(c.get("baseline"), str)), "the baseline")
    lines = [("row", "column", "mean ± std", f"Δ from {baseline} [95 % CI]"),
             *((c["row"], c["col"], value_text(c), diff_text(c).removeprefix(" · ")) for c in cells)]
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    title = table_md.splitlines()[0].removeprefix("### ") if table_md else ""
    grid = ["  ".join([*(x.ljust(w) for x, w in zip(line[:3], widths)), line[3]]).rstrip() for line in lines]
    return "\n".join([title, "", *grid] if title else grid)


def cells_note(cells: list[dict]) -> str:
    """What a line of compact_table says: the metric and the seeds per cell, what Δ and `*` are."""
    metric = cells[0]["metric"].replace("_", " ") + (" (%)" if cells[0]["metric"].endswith("error") else "")
    seeds = sorted({int(c["n"]) for c in cells})
    over = f"{seeds[0]} seeds" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]} seeds"
    return (f"Each line: the {cells[0]['which']} {metric}, mean ± sample std over {over}, and Δ, its paired "
            f"difference from the baseline over the seeds both ran with the 95 % t-interval (`*`: it excludes 0).")


def install_md(root: Path = ROOT) -> str:
    """The install's size and the two test commands' wall times, from benchmarks/results/install.json."""
    if not (root / INSTALL).is_file():
        return f"(no `{INSTALL}` committed: measure `du -sm .venv` and the test command's time, and record them there)"
    d = json.loads((root / INSTALL).read_text())
    parts = sorted((d.get("venv_largest_mib") or {}).items(), key=lambda kv: -kv[1])[:3]
    largest = ", ".join(f"{name} {mib:,} MiB" for name, mib in parts)
    fast = d.get("fast_suite")
    fast_md = (f"the fast tests (`{fast['command']}`, {fast['counts']}) took {fast['wall_s'] / 60:.1f} min "
               f"({fast['wall_s']:,} s) on {fast['machine']} ({fast['date']}, load average "
               f"{fast['load_avg_before']:.1f} before); " if fast else
               "the fast tests' time is not measured yet (`python benchmarks/test_times.py`); ")
    return (f"Measured on {d['machine']}, Python {d['python']}, torch {d['torch']} ({d['date']}; [`{INSTALL}`]"
            f"({INSTALL})): the virtual environment takes {d['venv_mib'] / 1024:.1f} GiB (`{d['venv_command']}`)"
            + (f", most of it torch's CUDA stack ({largest})" if parts else "") + "; " + fast_md +
            f"every test took {d['test_suite_s'] / 60:.0f} min ({d['test_suite_s']:,} s), {d['test_suite_source']}.")


def picture_md(runs: list[dict], root: Path = ROOT) -> str:
    qs = runs_of(runs, *QUICKSTART)
    if qs and picture_is_current(root):
        return (f"![report.html of the quick start's committed run](docs/report.png)\n\nThe page "
                f"([docs/report.html](docs/report.html)) is rebuilt from [docs/runs/{qs[0]['name']}]"
                f"(docs/runs/{qs[0]['name']}/) and drawn by `python -m study.docs --picture`.")
    missing = [n for n in PAGE_INPUTS if qs and not (qs[0]["folder"] / n).is_file()]
    why = (f"the committed quick-start run has no {', '.join(missing)}; add it again with `python -m study.docs "
           f"add results/<sweep>-<stamp>`, then" if missing else "run")
    return f"(no picture of the report page yet: {why} `python -m study.docs --picture`)"


def replace_block(text: str, name: str, body: str, where: str) -> str:
    pat = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end -->)", re.S)
    if not pat.search(text):
        raise DocsError(f"{where}: no `<!-- generated: {name} -->` ... `<!-- end -->` block; put the markers back")
    return pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text, count=1)


def readme_md(text: str, runs: list[dict], graded: list[tuple[dict, dict | None]], root: Path = ROOT) -> str:
    text = replace_block(text, "install", install_md(root), "README.md")
    text = replace_block(text, "quickstart", quickstart_md(runs), "README.md")
    text = replace_block(text, "picture", picture_md(runs, root), "README.md")
    summary = claims_summary(graded, claims_figure.FIGURE.as_posix(), "docs/RESULTS.md")
    return replace_block(text, "claims", summary, "README.md")


# ---------------------------------------------------------------- the command

def committed(root: Path = ROOT) -> tuple[list[dict], list[tuple[dict, dict | None]]]:
    """The committed runs and every claim with its grade: what each generated file is made from."""
    runs = [read_run(p) for p in run_dirs(root)]
    check_disjoint(runs)
    return runs, grade_claims(load_claims(root), runs)


def generated(root: Path = ROOT, state: tuple | None = None) -> dict[Path, str]:
    """{path relative to root: the text the generator makes now}; `state`: committed(root), where known."""
    runs, graded = state or committed(root)  # graded once, for RESULTS.md, the README and the figure
    return {Path("docs/RESULTS.md"): results_md(runs, graded, root),
            Path("docs/PERFORMANCE.md"): performance_md(root),
            Path("README.md"): readme_md((root / "README.md").read_text(), runs, graded, root),
            **gpu_prices.generated(root), **run_prices.generated(root)}


def stale(root: Path = ROOT) -> list[Path]:
    """The generated files whose committed text differs from what the generator makes now, and
    docs/claims.png where it does not name the rows the current grades give."""
    state = committed(root)
    texts = [p for p, text in generated(root, state).items()
             if not (root / p).is_file() or (root / p).read_text() != text]
    rows = claims_figure.figure_rows(state[1])
    return texts + ([] if claims_figure.is_current(root, rows) else [claims_figure.FIGURE])


def write(root: Path = ROOT) -> list[Path]:
    """Rewrites the generated files that differ and redraws docs/claims.png where it is stale; the paths written."""
    state = committed(root)
    out = []
    for path, text in generated(root, state).items():
        if not (root / path).is_file() or (root / path).read_text() != text:
            (root / path).write_text(text)
            out.append(path)
    rows = claims_figure.figure_rows(state[1])
    if not claims_figure.is_current(root, rows):
        out.append(claims_figure.write(root, rows))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m study.docs", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a committed generated file differs")
    p.add_argument("--picture", action="store_true",
                   help="rebuild docs/report.html from the quick start's committed run and draw docs/report.png "
                        "(headless Chromium), then rewrite the generated files")
    sub = p.add_subparsers(dest="cmd")
    a = sub.add_parser("add", help="copy a finished results folder's summary into docs/runs/, then rewrite")
    a.add_argument("results", type=Path)
    args = p.parse_args(argv)
    try:
        if args.cmd == "add":
            print(f"added {add(args.results).relative_to(ROOT)}")
        if args.picture:
            qs = runs_of([read_run(p) for p in run_dirs()], *QUICKSTART)
            if not qs:
                raise DocsError(f"no committed run of the quick start: `{command(*QUICKSTART)}`, then "
                                f"`python -m study.docs add results/<sweep>-<stamp>`")
            try:
                for path in write_picture(qs[0]["folder"]):
                    print(f"wrote {path}")
            except PictureError as e:
                raise DocsError(str(e)) from None
        if args.check:
            bad = stale()
            for path in bad:
                print(f"{path} differs from what `python -m study.docs` makes; run it and commit", file=sys.stderr)
            return 1 if bad else 0
        for path in write():
            print(f"wrote {path}")
    except (DocsError, claimlib.ClaimError, OSError, json.JSONDecodeError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
