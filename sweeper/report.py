"""Tables shaped like the paper's and the ablation plots, rebuilt from a stored experiment folder.

Rows are methods and variants ("MT", "MT + VD", "MT + MUR", "MT + VD + MUR": the sweep's `rows`
keys), columns are data sets and label counts (the sweep's `cols` keys), cells `mean ± std` over
seeds (sample std, ddof=1), with the paper's published value and Δ = ours − paper beside each
cell where the paper has one (sweeper/paper_results.py). Written as table.md, table.tex (plain
tabular) and table.csv (tidy: one line per cell), plus table_sensitivity.* when the trials
report a sensitivity (Table 3), trials.parquet, summary.parquet/.csv, and PNG plots, each made
only when the sweep varies what it shows. Ray is neither imported nor needed.

    python -m sweeper.report results/ablation_radius-20260101-120000 [--format md|latex|csv] [--which final|best]
    pytest tests/test_report.py -q
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from sweeper.aggregate import (AggregateError, atomic_write, check_experiment, group_keys, load_history,
                               load_trials, read_sweep, summarize, train_config_defaults, write_summary,
                               write_trials)
from sweeper.paper_results import SENSITIVITY_DATA, paper_sensitivity, paper_value

STAT_COLS = ("metric", "which", "mean", "std", "n", "n_failed", "n_diverged", "n_incomplete", "n_trials", "seeds")
METHOD_NAMES = {"supervised": "Supervised", "pi": "Π", "mt": "MT", "ict": "ICT", "mut": "MUT", "fixmatch": "FM"}
MUR_NAMES = {"direct": "MUR", "pga": "MUR (PGA)", "ga": "MUR (GA)", "random": "RR", "vat": "VAT"}
DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "svhn": "SVHN", "digits": "digits"}
KEY_NAMES = {"mur_radius": "r", "mur_step_size": "α", "mur_steps": "s", "kl_coef": "KL coef",
             "num_labels": "labels", "entmin_coef": "entmin"}
ORDER = {"method": ("supervised", "pi", "mt", "ict", "mut", "fixmatch"),
         "mur": ("none", "direct", "pga", "ga", "random", "vat"),
         "dataset": ("digits", "svhn", "cifar10", "cifar100")}
FORMATS = {"md": "table.md", "latex": "table.tex", "csv": "table.csv"}


# ---------------------------------------------------------------- labels

def _value(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        return f"{float(v):g}"
    return str(v)


def row_label(cfg: dict) -> str:
    """"MT + VD + MUR" from method/vd/mur, then other keys as "r=10"; "base" if nothing is set."""
    parts = []
    if "method" in cfg:
        parts.append(METHOD_NAMES.get(cfg["method"], str(cfg["method"])))
    if "vd" in cfg and bool(cfg["vd"]):
        parts.append("VD")
    if "mur" in cfg and cfg["mur"] != "none":
        parts.append(MUR_NAMES.get(cfg["mur"], str(cfg["mur"])))
    main = " + ".join(parts)
    others = [f"{KEY_NAMES.get(k, k)}={_value(v)}" for k, v in cfg.items() if k not in ("method", "vd", "mur")]
    label = ", ".join(([main] if main else []) + others)
    return label or ("base" if cfg else "all")


def col_label(cfg: dict) -> str:
    """"CIFAR-10 1000" from dataset/num_labels, then other keys as "r=10"."""
    parts = []
    if "dataset" in cfg:
        parts.append(DATASET_NAMES.get(cfg["dataset"], str(cfg["dataset"])))
    if "num_labels" in cfg:
        parts.append(_value(cfg["num_labels"]) if "dataset" in cfg else f"{_value(cfg['num_labels'])} labels")
    parts += [f"{KEY_NAMES.get(k, k)}={_value(v)}" for k, v in cfg.items() if k not in ("dataset", "num_labels")]
    return " ".join(parts)


def _sort_key(key: str, v):
    if key in ORDER and v in ORDER[key]:
        return (0, ORDER[key].index(v), "")
    if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
        return (2, 0, "") if isinstance(v, float) and math.isnan(v) else (0, float(v), "")
    return (1, 0, str(v))


# ---------------------------------------------------------------- the table

def layout_keys(summary: pd.DataFrame, rows, cols) -> tuple[list[str], list[str]]:
    """Row and column keys: the sweep's, plus any other key that still varies inside a cell (to rows)."""
    keys = [c for c in summary.columns if c not in STAT_COLS]
    row_keys = [k for k in rows if k in keys]
    col_keys = [k for k in cols if k in keys and k not in row_keys]
    for k in keys:
        if k in row_keys or k in col_keys or summary[k].nunique(dropna=False) < 2:
            continue
        cell = row_keys + col_keys
        spread = summary.groupby(cell, dropna=False)[k].nunique(dropna=False).max() if cell else 2
        if spread > 1:
            row_keys.append(k)
    return row_keys, col_keys


def paper_error(cfg: dict):
    """The authors' published error for a full config dict, or None."""
    return paper_value(cfg["method"], cfg["vd"], cfg["mur"], cfg["dataset"], cfg["num_labels"],
                       mur_radius=cfg.get("mur_radius"), kl_coef=cfg.get("kl_coef"),
                       mur_step_size=cfg.get("mur_step_size"), mur_steps=cfg.get("mur_steps"))


def paper_sens(cfg: dict):
    """Table 3's sensitivity for a full config dict (CIFAR-10, 1000 labels only), or None."""
    if (cfg["dataset"], int(cfg["num_labels"])) != SENSITIVITY_DATA or paper_error(cfg) is None:
        return None  # Table 3 measured the Table 1 runs: same settings (r, KL coefficient) required
    return paper_sensitivity(cfg["method"], cfg["vd"], cfg["mur"])


def table_frame(summary: pd.DataFrame, rows=("method", "vd", "mur"), cols=(), paper=paper_error) -> pd.DataFrame:
    """The tidy table: one line per cell with row/col labels, ours (mean, std, n, counts), the paper's
    (paper_mean, paper_std) and delta = mean - paper_mean. `paper(cfg) -> (mean, std) | None` gets
    the cell's full config (TrainConfig defaults for keys the sweep did not set)."""
    row_keys, col_keys = layout_keys(summary, rows, cols)
    defaults = train_config_defaults()
    keys = [c for c in summary.columns if c not in STAT_COLS]
    # method / vd / mur name the row even where the sweep holds them fixed ("MT + MUR", not "MUR")
    named = [k for k in ("method", "vd", "mur") if k in defaults and k not in row_keys + col_keys]

    def rank(i, ks):
        return tuple(_sort_key(k, summary.at[i, k]) for k in ks)

    order = sorted(summary.index, key=lambda i: rank(i, row_keys + col_keys))
    col_order = {c: j for j, c in enumerate(sorted({rank(i, col_keys) for i in summary.index}))}
    out = []
    for i in order:
        r = summary.loc[i]
        cfg = {**defaults, **{k: _py(r[k]) for k in keys}}
        pv = paper(cfg) if paper is not None else None
        pm, ps = (pv if pv is not None else (math.nan, None))
        out.append({"row": row_label({k: cfg[k] for k in named + row_keys}),
                    "col": col_label({k: cfg[k] for k in col_keys}) or _metric_name(r["metric"]),
                    "col_order": col_order[rank(i, col_keys)],
                    **{k: cfg[k] for k in row_keys + col_keys},
                    **{c: r[c] for c in STAT_COLS},
                    "paper_mean": pm, "paper_std": math.nan if ps is None else ps,
                    "delta": r["mean"] - pm})
    table = pd.DataFrame(out)
    dup = table[table.duplicated(["row", "col"], keep=False)] if len(table) else table
    if len(dup):
        raise AggregateError(f"two configs map to the table cell {dup.iloc[0]['row']!r} / {dup.iloc[0]['col']!r}; "
                             f"add the key that tells them apart to the sweep's rows or cols")
    return table


def _metric_name(metric: str) -> str:
    return {"test_error": "test error (%)", "sensitivity_mean": "sensitivity"}.get(metric, metric)


def _py(v):
    return v.item() if isinstance(v, np.generic) else v


def cell_text(r) -> str:
    """"15.61 ± 0.20", with the failed / diverged / unfinished trials named beside it."""
    n = int(r["n"])
    text = "—" if n == 0 else f"{r['mean']:.2f}" if n == 1 else f"{r['mean']:.2f} ± {r['std']:.2f}"
    extra = [f"{int(r[c])} {w}" for c, w in (("n_failed", "failed"), ("n_diverged", "diverged"),
                                             ("n_incomplete", "unfinished")) if r[c]]
    if extra or n == 1:
        text += f" (n={n}" + "".join(f", {e}" for e in extra) + ")"
    return text


def _grid(table: pd.DataFrame) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, body cells and each column's width: ours, then paper and Δ where the paper has a value."""
    rows = list(dict.fromkeys(table["row"]))
    cols = list(dict.fromkeys(table.sort_values("col_order", kind="stable")["col"]))
    has_paper = {c: table.loc[table["col"] == c, "paper_mean"].notna().any() for c in cols}
    header = ["Model"]
    for c in cols:
        header += [c, "paper", "Δ"] if has_paper[c] else [c]
    body = []
    for rl in rows:
        line = [rl]
        for c in cols:
            hit = table[(table["row"] == rl) & (table["col"] == c)]
            r = hit.iloc[0] if len(hit) else None
            line.append(cell_text(r) if r is not None else "")
            if has_paper[c]:
                if r is None or pd.isna(r["paper_mean"]):
                    line += ["", ""]
                else:
                    p = f"{r['paper_mean']:.2f}" + ("" if pd.isna(r["paper_std"]) else f" ± {r['paper_std']:.2f}")
                    d = "" if pd.isna(r["delta"]) else f"{r['delta']:+.2f}"
                    line += [p, d]
        body.append(line)
    return header, body, [3 if has_paper[c] else 1 for c in cols]


def _notes(table: pd.DataFrame) -> list[str]:
    metric, which = table["metric"].iloc[0], table["which"].iloc[0]
    point = ("final = at the last evaluation, the honest default" if which == "final"
             else "best = the minimum over evaluations, as the paper's authors kept")
    notes = [f"Cells: mean ± sample std (ddof=1) over n finished seeds of the {which} {metric} ({point}).",
             "Failed, diverged and unfinished trials are never averaged in; a cell names them."]
    if table["paper_mean"].notna().any() and metric == "sensitivity_mean":
        notes.append("paper: Table 3 (CIFAR-10, 1000 labels), whose ± is the spread over test points, not "
                     "over seeds (compare it with our sensitivity_std); Δ = ours − paper.")
    elif table["paper_mean"].notna().any():
        notes.append("paper: the authors' published value (their own runs; Tables 1-2 or the text); "
                     "Δ = ours − paper. The paper's errors are the best test error seen during training "
                     "(--which best compares like with like).")
    return notes


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    header, body, _ = _grid(table)

    def md_row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [f"### {title}", ""] if title else []
    lines += [md_row(header), "|" + "|".join(["---"] + [":-:"] * (len(header) - 1)) + "|"]
    lines += [md_row(line) for line in body]
    return "\n".join(lines + [""] + [f"- {n}" for n in _notes(table)]) + "\n"


_TEX_ESCAPE = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_UNICODE = {"Π": r"$\Pi$", "α": r"$\alpha$", "±": r"$\pm$", "Δ": r"$\Delta$", "−": "-", "—": "--"}


def tex(s: str) -> str:
    """Text -> LaTeX: special characters escaped, the few Greek letters and ± in math mode."""
    s = "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)
    return "".join(_TEX_UNICODE.get(ch, ch) for ch in s)


def to_latex(table: pd.DataFrame, title: str = "") -> str:
    header, body, widths = _grid(table)
    spec = "l|" + "|".join("c" * w for w in widths)
    lines = [f"% {title}"] if title else []
    lines += [f"% {n}" for n in _notes(table)]
    lines += [rf"\begin{{tabular}}{{{spec}}}", r"\hline", " & ".join(map(tex, header)) + r" \\", r"\hline"]
    lines += [" & ".join(map(tex, line)) + r" \\" for line in body]
    lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_tables(table: pd.DataFrame, folder: Path, stem: str, title: str = "") -> dict[str, Path]:
    """<stem>.md, <stem>.tex and <stem>.csv in folder, each written atomically."""
    md, tx = to_markdown(table, title), to_latex(table, title)
    return {f"{stem}.md": atomic_write(folder / f"{stem}.md", lambda t: Path(t).write_text(md)),
            f"{stem}.tex": atomic_write(folder / f"{stem}.tex", lambda t: Path(t).write_text(tx)),
            f"{stem}.csv": atomic_write(folder / f"{stem}.csv", lambda t: table.to_csv(t, index=False))}


def ranking_frame(trials: pd.DataFrame, keys: list[str], metric: str = "test_error") -> pd.DataFrame:
    """A search's trials ranked: those that ran every step first, by their final `metric`; then those
    ASHA stopped early, most steps first, by the metric where they stopped (not comparable with the
    finished ones, hence apart). Failed and diverged trials, and trials without a finite metric, are left out.
    Columns: rank, trial_id, status, steps, the searched `keys`, final_<metric>, best_<metric> (if any)."""
    col = f"final_{metric}"
    ok = trials[trials["status"].isin(("finished", "stopped"))
                & np.isfinite(pd.to_numeric(trials.get(col), errors="coerce"))].copy()
    ok["steps"] = pd.to_numeric(ok.get("final_step"), errors="coerce")
    ok["_stopped"] = ok["status"] != "finished"
    ok = ok.sort_values(["_stopped", "steps", col], ascending=[True, False, True], kind="stable")
    cols = ["trial_id", "status", "steps", *keys, col] + ([f"best_{metric}"] if f"best_{metric}" in ok else [])
    out = ok[cols].reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


def ranking_markdown(ranked: pd.DataFrame, title: str = "", top: int = 10) -> str:
    """The first `top` rows of ranking_frame as a markdown table (numbers to 3 significant digits)."""
    def cell(v) -> str:
        return f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)

    head = list(ranked.columns)
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---:"] * len(head)) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in ranked.head(top).itertuples(index=False)]
    n_stopped = int((ranked["status"] == "stopped").sum())
    lines += ["", f"- {len(ranked)} trials ranked ({n_stopped} stopped early by ASHA, listed after every finished "
                  f"one); the first {min(top, len(ranked))} shown, all in the .csv."]
    return "\n".join(lines) + "\n"


def write_ranking(trials: pd.DataFrame, keys: list[str], folder: Path, metric: str, title: str) -> dict[str, Path]:
    ranked = ranking_frame(trials, keys, metric)
    md = ranking_markdown(ranked, title)
    return {"table_ranked.md": atomic_write(folder / "table_ranked.md", lambda t: Path(t).write_text(md)),
            "table_ranked.csv": atomic_write(folder / "table_ranked.csv", lambda t: ranked.to_csv(t, index=False))}


# ---------------------------------------------------------------- plots (matplotlib, no pyplot state)

def _fig(ncols: int = 1, nrows: int = 1, w: float = 5.0, h: float = 3.6, share: bool = False):
    fig = Figure(figsize=(w * ncols, h * nrows), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, sharex=share, sharey=share)


def _save(fig: Figure, path: Path) -> Path:
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))


NAMING = ("method", "vd", "mur", "dataset", "num_labels")  # kept in a label before any other key


def _minimal(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """Drop the keys that the others determine (entmin follows VD, r follows the data set)."""
    keep = list(keys)
    for k in [k for k in keys if k not in NAMING] + [k for k in reversed(NAMING) if k in keys]:
        rest = [x for x in keep if x != k]
        if rest and len(df[rest + [k]].drop_duplicates()) == len(df[rest].drop_duplicates()):
            keep = rest
    return keep


def _varying(summary: pd.DataFrame, exclude=()) -> list[str]:
    """Keys of a summary that vary (besides `exclude`), without those determined by the others."""
    keys = [c for c in summary.columns if c not in STAT_COLS and c not in exclude
            and summary[c].nunique(dropna=False) > 1]
    return _minimal(summary, keys)


def _varying_config(df: pd.DataFrame) -> list[str]:
    """The group keys (config keys but the seed) that vary among these trials, minimal as above."""
    return _minimal(df, [c for c in group_keys(df) if df[c].nunique(dropna=False) > 1])


def _label(cfg: dict) -> str:
    """A plot label: "MT + VD" for method / vd / mur, then "CIFAR-10 1000", "r=10" for the rest."""
    main = {k: v for k, v in cfg.items() if k in ("method", "vd", "mur")}
    rest = {k: v for k, v in cfg.items() if k not in main}
    parts = [row_label(main) if main else "", col_label(rest)]
    return ", ".join(p for p in parts if p) or "all"


def _series(summary: pd.DataFrame, x: str):
    """(label, rows sorted by x) per combination of the keys that vary besides x."""
    keys = _varying(summary, exclude=(x,))
    groups = summary.groupby(keys, dropna=False, sort=True) if keys else [((), summary)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        yield _label(dict(zip(keys, map(_py, key)))), g.sort_values(x)


def _errorbars(ax, summary: pd.DataFrame, x: str) -> int:
    """mean ± std vs x, one line per config that ran at 2 or more values of x; returns lines drawn."""
    drawn = 0
    for label, g in _series(summary, x):
        g = g[g["n"] > 0]
        if g[x].nunique() >= 2:
            ax.errorbar(g[x].astype(float), g["mean"], yerr=g["std"].fillna(0.0), marker="o", capsize=3,
                        label=None if label == "all" else label)
            drawn += 1
    return drawn


def _axis_text(ax, x: str, metric: str, which: str, values) -> None:
    """Labels, and ticks at the swept values (log scale when they are all positive)."""
    ax.set_xlabel(KEY_NAMES.get(x, x) if x not in ("mur_radius",) else "radius r")
    ax.set_ylabel(f"{which} {_metric_name(metric)}")
    values = sorted({float(v) for v in values})
    if values and values[0] > 0:
        ax.set_xscale("log")
    ax.set_xticks(values, [_value(v) for v in values])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _varies(df: pd.DataFrame, *cols: str) -> bool:
    """True if some config of these trials is run at several values of cols (the other keys held fixed):
    a radius that only follows the data set (r=10 CIFAR-10, r=20 CIFAR-100) is not a radius sweep."""
    cols = [c for c in cols if c in df.columns]
    if not cols or not len(df):
        return False
    keys = [k for k in group_keys(df) if k not in cols and df[k].nunique(dropna=False) > 1]
    groups = df.groupby(keys, dropna=False) if keys else [((), df)]
    return any(len(g[cols].drop_duplicates()) > 1 for _, g in groups)


def plot_radius(df: pd.DataFrame, path: Path, metric="test_error", which="final") -> Path | None:
    """Error vs the radius r with error bars (MUR variants), base runs as dashed lines; None if r is fixed."""
    if "mur" not in df.columns or not _varies(df[df["mur"] != "none"], "mur_radius"):
        return None
    fig, ax = _fig()
    ax = ax[0, 0]
    _errorbars(ax, summarize(df[df["mur"] != "none"], metric, which), "mur_radius")
    base = df[df["mur"] == "none"]
    if len(base):
        s = summarize(base, metric, which)
        keys = _varying(s, exclude=("mur_radius",))
        for _, r in s[s["n"] > 0].iterrows():
            ax.axhline(r["mean"], ls="--", lw=1, color="gray",
                       label=_label({k: _py(r[k]) for k in keys}) + " (no MUR)" if keys else "no MUR")
    _axis_text(ax, "mur_radius", metric, which, df.loc[df["mur"] != "none", "mur_radius"])
    ax.set_title("error vs radius")
    return _save(fig, path)


def plot_mur_vs_rr(df: pd.DataFrame, path: Path, metric="test_error", which="final") -> Path | None:
    """MUR (direct x*) vs RR (random x*) over the radius; None unless both ran at several radii."""
    if "mur" not in df.columns or not {"direct", "random"} <= set(df["mur"]):
        return None
    sub = df[df["mur"].isin(["direct", "random"])]
    if not _varies(sub, "mur_radius"):
        return None
    fig, ax = _fig()
    ax = ax[0, 0]
    _errorbars(ax, summarize(sub, metric, which), "mur_radius")
    _axis_text(ax, "mur_radius", metric, which, sub["mur_radius"])
    ax.set_title("MUR vs RR")
    return _save(fig, path)


def plot_ga_vs_pga(df: pd.DataFrame, path: Path, metric="test_error", which="final") -> Path | None:
    """Bars per (step size α, steps s) for GA and PGA; None unless GA/PGA ran over several (α, s)."""
    if "mur" not in df.columns:
        return None
    sub = df[df["mur"].isin(["ga", "pga"])]
    if not _varies(sub, "mur_step_size", "mur_steps"):
        return None
    d = train_config_defaults()
    s = summarize(sub, metric, which)
    for k in ("mur_step_size", "mur_steps"):
        if k not in s.columns:
            s[k] = d[k]
    s["setting"] = list(zip(s["mur_step_size"].astype(float), s["mur_steps"].astype(int)))
    cats = sorted(set(s["setting"]))
    keys = _varying(s, exclude=("mur_step_size", "mur_steps", "setting"))
    groups = list(s.groupby(keys, dropna=False, sort=True)) if keys else [((), s)]
    width = 0.8 / len(groups)
    fig, ax = _fig(w=max(5.0, 0.7 * len(cats) * len(groups)))
    ax = ax[0, 0]
    for j, (key, g) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        g = g[g["n"] > 0].set_index("setting")
        xs = [cats.index(c) + (j - (len(groups) - 1) / 2) * width for c in g.index]
        ax.bar(xs, g["mean"], width=width, yerr=g["std"].fillna(0.0), capsize=2,
               label=_label(dict(zip(keys, map(_py, key)))))
    ax.set_xticks(range(len(cats)), [f"({a:g}, {n})" for a, n in cats], fontsize=7)
    ax.set_xlabel("(step size α, steps s)")
    ax.set_ylabel(f"{which} {_metric_name(metric)}")
    ax.legend(fontsize=7)
    ax.set_title("GA vs PGA")
    return _save(fig, path)


def _curves(ax, df: pd.DataFrame, history: pd.DataFrame, metric: str) -> int:
    """Mean over finished seeds of a per-step metric, one line per config; returns lines drawn."""
    if metric not in history.columns:
        return 0
    fin = df[df["status"] == "finished"]
    keys = _varying_config(fin)
    h = history[np.isfinite(history[metric])].merge(fin[["trial_id", *keys]], on="trial_id")
    if not len(h):
        return 0
    groups = h.groupby(keys, dropna=False, sort=True) if keys else [((), h)]
    drawn = 0
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        m = g.groupby("step")[metric].mean()
        ax.plot(m.index, m.values, label=_label(dict(zip(keys, map(_py, key)))))
        drawn += 1
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    return drawn


def plot_kl(df: pd.DataFrame, history: pd.DataFrame, path: Path, metric="test_error", which="final") -> Path | None:
    """Error vs the KL coefficient (VD runs) and the sparsity curves; None unless kl_coef varies under VD."""
    if "vd" not in df.columns:
        return None
    sub = df[df["vd"].astype(bool)]
    if not _varies(sub, "kl_coef"):
        return None
    fig, ax = _fig(ncols=2)
    _errorbars(ax[0, 0], summarize(sub, metric, which), "kl_coef")
    _axis_text(ax[0, 0], "kl_coef", metric, which, sub["kl_coef"])
    ax[0, 0].set_title("error vs KL coefficient")
    right = ax[0, 1]
    if _curves(right, sub, history, "sparsity"):
        right.set_ylabel("sparsity (fraction log α ≥ 3)")
        right.legend(fontsize=7)
    elif "final_sparsity" in sub.columns:
        _errorbars(right, summarize(sub, "sparsity", "final"), "kl_coef")
        _axis_text(right, "kl_coef", "sparsity", "final", sub["kl_coef"])
    right.set_title("sparsity")
    return _save(fig, path)


def plot_g0(df: pd.DataFrame, history: pd.DataFrame, path: Path) -> Path | None:
    """||g0|| (mean over each interval) vs step, one line per config; None without MUR curves."""
    if "g0_norm" not in history.columns or not np.isfinite(history["g0_norm"]).any():
        return None
    fig, ax = _fig()
    ax = ax[0, 0]
    if not _curves(ax, df, history, "g0_norm"):
        return None
    ax.set_ylabel("||g0||")
    if (history["g0_norm"].dropna() > 0).all():
        ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.set_title("gradient norm of the entropy")
    return _save(fig, path)


def _hist(text, trial_id: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        h = json.loads(text)
        counts, edges = np.asarray(h["counts"], dtype=float), np.asarray(h["edges"], dtype=float)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise AggregateError(f"trial {trial_id}: sensitivity_hist is not a JSON "
                             f'{{"counts": [...], "edges": [...]}} ({type(e).__name__}: {e})') from None
    if len(edges) != len(counts) + 1:
        raise AggregateError(f"trial {trial_id}: sensitivity_hist has {len(counts)} counts but {len(edges)} edges; "
                             f"it needs one edge more than counts")
    return counts, edges


def _pool(hists: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum the seeds' histograms; where their edges differ, each count is re-binned at its bin's
    centre onto common edges (same number of bins over the union of the ranges)."""
    edges = hists[0][1]
    if all(np.array_equal(e, edges) for _, e in hists):
        return sum(c for c, _ in hists), edges
    lo, hi = min(e[0] for _, e in hists), max(e[-1] for _, e in hists)
    edges = np.linspace(lo, hi, max(len(e) for _, e in hists))
    counts = sum(np.histogram((e[:-1] + e[1:]) / 2, bins=edges, weights=c)[0] for c, e in hists)
    return counts, edges


def plot_sensitivity_hist(df: pd.DataFrame, path: Path) -> Path | None:
    """Sensitivity histograms per variant (finished seeds pooled, see _pool); None without the metric."""
    col = "final_sensitivity_hist"
    if col not in df.columns:
        return None
    fin = df[(df["status"] == "finished") & df[col].map(lambda v: isinstance(v, str) and v.strip() != "")]
    if not len(fin):
        return None
    keys = _varying_config(fin)
    groups = list(fin.groupby(keys, dropna=False, sort=True)) if keys else [((), fin)]
    ncols = min(4, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = _fig(ncols=ncols, nrows=nrows, w=3.0, h=2.2, share=True)
    for ax, (key, g) in zip(axes.flat, groups):
        key = key if isinstance(key, tuple) else (key,)
        counts, edges = _pool([_hist(v, t) for v, t in zip(g[col], g["trial_id"])])
        ax.stairs(counts / max(counts.sum(), 1.0), edges, fill=True)
        ax.set_title(_label(dict(zip(keys, map(_py, key)))) + f" (n={len(g)})", fontsize=8)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.supxlabel("sensitivity ||J||_F (final evaluation; seeds pooled)", fontsize=8)
    fig.supylabel("fraction of test points", fontsize=8)
    return _save(fig, path)


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=np.float32)


def virtual_point_mosaic(rows: list[np.ndarray], gap: int = 1) -> np.ndarray:
    """One image of len(rows) x N tiles: rows[i][j] (C, H, W) at tile (i, j), each column scaled by
    its input's (rows[0][j]) own [min, max] to [0, 1] and clipped, tiles `gap` pixels apart (white).
    Returns (len(rows) * (H + gap) - gap, N * (W + gap) - gap, C) float32 in [0, 1]."""
    n, (C, H, W) = len(rows[0]), rows[0].shape[1:]
    out = np.ones((len(rows) * (H + gap) - gap, n * (W + gap) - gap, C), dtype=np.float32)
    for j in range(n):
        lo, hi = float(rows[0][j].min()), float(rows[0][j].max())
        for i, xs in enumerate(rows):
            tile = np.clip((xs[j] - lo) / max(hi - lo, 1e-12), 0.0, 1.0)  # (C, H, W)
            out[i * (H + gap):i * (H + gap) + H, j * (W + gap):j * (W + gap) + W] = tile.transpose(1, 2, 0)
    return out


def plot_virtual_points(images, xstars_by_radius: dict, path: str | Path, max_images: int = 8) -> Path:
    """The appendix figure: inputs (top row) and their virtual points x* at each radius (one row each).

    images: (N, C, H, W) or (N, H, W) tensor/array; xstars_by_radius: {r: x* of the same shape}.
    Each column is shown in its input's own [min, max] range, x* clipped to it, so the
    perturbation is visible relative to the image (as the paper's unwhitened figure). One
    mosaic image on one axis (a grid of axes took ~2 s to draw).
    """
    imgs = _np(images)
    imgs = imgs[:, None] if imgs.ndim == 3 else imgs
    if imgs.ndim != 4 or not len(imgs):
        raise ValueError(f"images must be (N, C, H, W) or (N, H, W) with N >= 1, got shape {tuple(imgs.shape)}")
    if not xstars_by_radius:
        raise ValueError("xstars_by_radius is empty; pass {radius: x*} for at least one radius")
    names, rows = ["input"], [imgs]
    for r in sorted(xstars_by_radius):
        xs = _np(xstars_by_radius[r])
        xs = xs[:, None] if xs.ndim == 3 else xs
        if xs.shape != imgs.shape:
            raise ValueError(f"x* at r={_value(r)} has shape {tuple(xs.shape)}, the images {tuple(imgs.shape)}; "
                             f"pass x* computed from these images")
        names.append(f"r={_value(r)}")
        rows.append(xs)
    n = min(len(imgs), max_images)
    mosaic = virtual_point_mosaic([x[:n] for x in rows])  # (rows*(H+1)-1, n*(W+1)-1, C)
    H = imgs.shape[2]
    fig, axes = _fig(w=1.0 * n + 0.6, h=1.0 * len(rows))
    ax = axes[0, 0]
    if mosaic.shape[2] == 3:
        ax.imshow(mosaic, interpolation="nearest")
    else:
        ax.imshow(mosaic[:, :, 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([i * (H + 1) + (H - 1) / 2 for i in range(len(rows))], names, fontsize=8)
    ax.tick_params(length=0)
    return _save(fig, Path(path))


def virtual_points_from_checkpoint(exp: Path, trials: pd.DataFrame, path: Path, n_images: int = 8) -> Path | None:
    """The appendix figure from a stored run: the last checkpoint of the first finished trial that
    uses MUR, and direct x* of `n_images` test images at r/2, r, 2r and 4r (in the network's input
    space: standardised digits, ZCA-whitened CIFAR). The trial wrote them to virtual_points.npz
    (no torch needed here); a checkpoint without that file (written before it existed) is
    recomputed from its trainer.pt. None when no checkpoint fits."""
    done = trials[(trials["status"] == "finished") & (trials.get("mur", "none") != "none")] \
        if "mur" in trials.columns else trials.iloc[:0]
    for _, row in done.iterrows():
        ckpts = sorted((exp / str(row["trial_dir"])).glob("checkpoint_*/trainer.pt"))
        if ckpts:
            break
    else:
        return None
    stored = ckpts[-1].with_name("virtual_points.npz")
    if stored.is_file():
        with np.load(stored) as f:
            pts = {k: f[k] for k in ("x", "radii", "xstar")}
    else:
        pts = _virtual_points_from_trainer(ckpts[-1], n_images)
    xs = {float(r): pts["xstar"][i] for i, r in enumerate(pts["radii"])}
    return plot_virtual_points(pts["x"], xs, path, max_images=n_images)


def _virtual_points_from_trainer(ckpt: Path, n_images: int) -> dict:
    import torch

    from trainables.config import TrainConfig
    from trainables.data import load_dataset
    from trainables.models import build_model
    from trainables.mur import virtual_point_examples

    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    cfg = TrainConfig.from_dict({**state["config"], "device": "cpu"})
    student = build_model(cfg)
    student.load_state_dict(state["student"])
    x = load_dataset(cfg.dataset, cfg.data_dir).x_test[:n_images]  # (N, C, H, W)
    return virtual_point_examples(student, x, cfg.mur_radius)


# ---------------------------------------------------------------- everything from stored results

def build_report(exp_dir: str | Path, fmt: str = "md", which: str = "final") -> dict[str, Path]:
    """Rebuild trials.parquet, summary.*, table.{md,tex,csv}, table_sensitivity.* and the plots.

    Returns {file name: path} of what was written; "table" is the table in `fmt` (md | latex | csv).
    which="final" (default) tabulates each trial's last evaluation; "best" the minimum over
    evaluations, which is what the paper's numbers are. Nothing is written for a folder that is
    not a Ray Tune experiment (AggregateError).
    """
    if fmt not in FORMATS:
        raise AggregateError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if which not in ("final", "best"):
        raise AggregateError(f"which must be 'final' or 'best', got {which!r}")
    exp = check_experiment(exp_dir)
    meta = read_sweep(exp) or {}
    rows, cols = tuple(meta.get("rows") or ("method", "vd", "mur")), tuple(meta.get("cols") or ())
    metric = meta.get("metric") or "test_error"
    trials = load_trials(exp)
    history = load_history(exp)
    paths = {"trials.parquet": write_trials(trials, exp / "trials.parquet")}
    if not (trials["n_reports"] > 0).any():
        raise AggregateError(f"{exp}: no trial has reported yet ({len(trials)} trial folders, all without "
                             f"results); wrote trials.parquet only, run the report again later")
    summary = summarize(trials, metric, which)
    paths.update(write_summary(summary, exp))
    title = meta.get("name", exp.name) + (f": {meta['description']}" if meta.get("description") else "") \
        + (f" ({meta['paper_ref']})" if meta.get("paper_ref") else "")
    table = table_frame(summary, rows, cols, paper_error if metric == "test_error" else None)
    paths.update(write_tables(table, exp, "table", title))
    space = (meta.get("search") or {}).get("space") or {}
    if space:  # a search (hpo): its trials ranked, best first
        paths.update(write_ranking(trials, [k for k in space if k in trials.columns], exp, metric,
                                   f"{meta.get('name', exp.name)}: trials ranked by {_metric_name(metric)}"))
    if "final_sensitivity_mean" in trials.columns and np.isfinite(
            pd.to_numeric(trials["final_sensitivity_mean"], errors="coerce")).any():
        sens = table_frame(summarize(trials, "sensitivity_mean", "final"), rows, cols, paper_sens)
        paths.update(write_tables(sens, exp, "table_sensitivity", f"{title}: sensitivity (Table 3)"))
    plots = {"radius.png": lambda p: plot_radius(trials, p, metric, which),
             "mur_vs_rr.png": lambda p: plot_mur_vs_rr(trials, p, metric, which),
             "ga_vs_pga.png": lambda p: plot_ga_vs_pga(trials, p, metric, which),
             "kl.png": lambda p: plot_kl(trials, history, p, metric, which),
             "sensitivity_hist.png": lambda p: plot_sensitivity_hist(trials, p),
             "g0_norm.png": lambda p: plot_g0(trials, history, p)}
    plots["virtual_points.png"] = lambda p: virtual_points_from_checkpoint(exp, trials, p)
    for name, plot in plots.items():
        out = plot(exp / name)
        if out is not None:
            paths[name] = out
    paths["table"] = paths[FORMATS[fmt]]
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sweeper.report", description=__doc__.splitlines()[0])
    p.add_argument("results_dir", help="a Ray Tune experiment folder, e.g. results/<sweep>-<stamp>")
    p.add_argument("--format", choices=sorted(FORMATS), default="md", help="table printed (all are written)")
    p.add_argument("--which", choices=("final", "best"), default="final",
                   help="final: last evaluation (default); best: minimum over evaluations, as the paper")
    args = p.parse_args(argv)
    try:
        paths = build_report(args.results_dir, args.format, args.which)
    except AggregateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(paths["table"].read_text())
    if "table_ranked.md" in paths:  # a search (hpo): its trials ranked
        print(paths["table_ranked.md"].read_text())
    plots = [n for n in paths if n.endswith(".png")]
    print(f"plots: {', '.join(plots) if plots else 'none (the sweep varies none of the plotted keys)'}")
    print(f"results: {Path(args.results_dir).expanduser().resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
