"""The ablation plots and the appendix's virtual-point figure, drawn from a trials table (PNG, matplotlib).

Each plot_* function returns the path it wrote, or None when the sweep does not vary what the plot
shows (no radius plot for a fixed r). Figures are matplotlib `Figure`s without pyplot state, written
atomically; neither Ray nor torch is imported (x* comes from the virtual_points.npz a trial stored).

    python -m sweeper.report results/ablation_radius-20260101-120000   # writes radius.png and the rest
    pytest tests/test_report.py -q
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from sweeper.analysis.aggregate import AggregateError, group_keys, summarize
from trainables.config import MUR_KINDS, train_config_defaults
from trainables.files import atomic_write
from sweeper.analysis.labels import KEY_NAMES, col_label, fmt_value, metric_name, py_value, row_label
from sweeper.analysis.layout import config_keys
from sweeper.analysis.paired import LEVEL


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
    keys = [c for c in config_keys(summary) if c not in exclude
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
        yield _label(dict(zip(keys, map(py_value, key)))), g.sort_values(x)


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
    ax.set_ylabel(f"{which} {metric_name(metric)}")
    values = sorted({float(v) for v in values})
    if values and values[0] > 0:
        ax.set_xscale("log")
    ax.set_xticks(values, [fmt_value(v) for v in values])
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
                       label=_label({k: py_value(r[k]) for k in keys}) + " (no MUR)" if keys else "no MUR")
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
    sub = df[df["mur"].isin([m for m, kind in MUR_KINDS.items() if kind.step_size])]  # the iterative kinds
    if not _varies(sub, "mur_step_size", "mur_steps"):
        return None
    d = train_config_defaults()
    s = summarize(sub, metric, which)
    for k in ("mur_step_size", "mur_steps"):
        if k not in s.columns:
            s[k] = d[k]
    keys = _varying(s, exclude=("mur_step_size", "mur_steps"))
    s["setting"] = list(zip(s["mur_step_size"].astype(float), s["mur_steps"].astype(int)))  # the bars' x
    cats = sorted(set(s["setting"]))
    groups = list(s.groupby(keys, dropna=False, sort=True)) if keys else [((), s)]
    width = 0.8 / len(groups)
    fig, ax = _fig(w=max(5.0, 0.7 * len(cats) * len(groups)))
    ax = ax[0, 0]
    for j, (key, g) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        g = g[g["n"] > 0].set_index("setting")
        xs = [cats.index(c) + (j - (len(groups) - 1) / 2) * width for c in g.index]
        ax.bar(xs, g["mean"], width=width, yerr=g["std"].fillna(0.0), capsize=2,
               label=_label(dict(zip(keys, map(py_value, key)))))
    ax.set_xticks(range(len(cats)), [f"({a:g}, {n})" for a, n in cats], fontsize=7)
    ax.set_xlabel("(step size α, steps s)")
    ax.set_ylabel(f"{which} {metric_name(metric)}")
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
        ax.plot(m.index, m.values, label=_label(dict(zip(keys, map(py_value, key)))))
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


def pool_histograms(hists: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
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
    """Sensitivity histograms per variant (finished seeds pooled, see pool_histograms); None without the metric."""
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
        counts, edges = pool_histograms([_hist(v, t) for v, t in zip(g[col], g["trial_id"])])
        ax.stairs(counts / max(counts.sum(), 1.0), edges, fill=True)
        ax.set_title(_label(dict(zip(keys, map(py_value, key)))) + f" (n={len(g)})", fontsize=8)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.supxlabel("sensitivity ||J||_F (final evaluation; seeds pooled)", fontsize=8)
    fig.supylabel("fraction of test points", fontsize=8)
    return _save(fig, path)


def paired_diff_rows(table: pd.DataFrame) -> list[tuple[str, float, float, float]]:
    """(label, difference, interval low, high) of every table cell with a paired interval (>= 2 seeds
    paired), in the table's order; label "row · column vs baseline row"."""
    if "diff_vs_baseline" not in table.columns:
        return []
    ok = table[table["n_paired"].fillna(0).astype(int) >= 2]
    multi_col = table["col"].nunique() > 1
    return [(f"{r['row']}" + (f" · {r['col']}" if multi_col else "") + f"  vs {r['baseline']}",
             float(r["diff_vs_baseline"]), float(r["diff_ci_low"]), float(r["diff_ci_high"]))
            for _, r in ok.iterrows()]


def plot_paired_diffs(table: pd.DataFrame, path: Path, metric="test_error") -> Path | None:
    """Each cell's paired difference from its baseline cell with its t-interval, one line a cell (a
    forest plot of the table's "· Δ [low, high]" parts); an interval clear of 0 is drawn dark. None
    without paired differences."""
    rows = paired_diff_rows(table)
    if not rows:
        return None
    fig, ax = _fig(w=4.0 + 0.055 * max(len(label) for label, *_ in rows), h=0.9 + 0.28 * len(rows))
    ax = ax[0, 0]
    y = np.arange(len(rows))[::-1]
    for yi, (_, d, lo, hi) in zip(y, rows):
        clear = lo > 0 or hi < 0
        ax.errorbar([d], [yi], xerr=[[d - lo], [hi - d]], fmt="o", ms=4, capsize=3,
                    color="black" if clear else "gray")
    ax.axvline(0.0, color="red", lw=0.8)
    ax.set_yticks(y, [label for label, *_ in rows], fontsize=7)
    ax.set_xlabel(f"paired difference in {metric_name(metric)}\n(ours − baseline, {LEVEL:.0%} t-interval over seeds)",
                  fontsize=8)
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
    mosaic image on one axis (a grid of axes is slow to draw).
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
            raise ValueError(f"x* at r={fmt_value(r)} has shape {tuple(xs.shape)}, the images {tuple(imgs.shape)}; "
                             f"pass x* computed from these images")
        names.append(f"r={fmt_value(r)}")
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
    """The appendix figure from a stored run: direct x* of `n_images` test images at r/2, r, 2r and 4r
    (in the network's input space: standardised digits, ZCA-whitened CIFAR), from the
    virtual_points.npz that a MUR trial writes beside its last checkpoint (trainables/tune.py). The
    first finished MUR trial with that file gives it; None when none has one."""
    done = trials[(trials["status"] == "finished") & (trials.get("mur", "none") != "none")] \
        if "mur" in trials.columns else trials.iloc[:0]
    for _, row in done.iterrows():
        stored = sorted((exp / str(row["trial_dir"])).glob("checkpoint_*/virtual_points.npz"))
        if stored:
            break
    else:
        return None
    with np.load(stored[-1]) as f:
        pts = {k: f[k] for k in ("x", "radii", "xstar")}
    xs = {float(r): pts["xstar"][i] for i, r in enumerate(pts["radii"])}
    return plot_virtual_points(pts["x"], xs, path, max_images=n_images)


def cell_curves(by_cell: dict[tuple[str, str], pd.DataFrame], history: pd.DataFrame,
                metric: str = "test_error") -> pd.DataFrame:
    """Each table cell's curve of `metric` over its finished seeds, evaluation by evaluation.

    by_cell: {(row label, column label): the cell's trials} (html.cell_trials of table.csv), in the table's
    order; history: history.parquet's frame (trial_id, step, metric). Returns one line per (cell, step)
    with a finite value in some seed: row, col, step, mean, low (the minimum over seeds), high (the
    maximum), n (the seeds averaged at that step); shape (n_cells x n_steps, 7)."""
    cols = ["row", "col", "step", "mean", "low", "high", "n"]
    if metric not in history.columns:
        return pd.DataFrame(columns=cols)
    values = pd.to_numeric(history[metric], errors="coerce").astype(float)  # float32 on disk: averaged in float64
    h = pd.DataFrame({"trial_id": history["trial_id"].astype(str), "step": history["step"], "v": values})
    h = h[np.isfinite(h["v"])]
    parts = []
    for (row, col), tr in by_cell.items():
        ids = set(tr.loc[tr["status"] == "finished", "trial_id"].astype(str))
        s = h[h["trial_id"].isin(ids)].groupby("step")["v"].agg(["mean", "min", "max", "count"]).reset_index()
        if len(s):
            parts.append(pd.DataFrame({"row": row, "col": col, "step": s["step"], "mean": s["mean"], "low": s["min"],
                                       "high": s["max"], "n": s["count"].astype(int)}))
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def plot_curves(curves: pd.DataFrame, col_order: list[str], path: Path, metric: str = "test_error") -> Path | None:
    """cell_curves drawn: one small panel per table column (in `col_order`, the table's), a line per row
    with its min–max band, a row's colour the same in every panel; None without any curve."""
    if not len(curves):
        return None
    cols = [c for c in col_order if c in set(curves["col"])]
    rows = list(dict.fromkeys(curves["row"]))
    ncols = min(4, len(cols))
    fig, axes = _fig(ncols=ncols, nrows=math.ceil(len(cols) / ncols), w=3.4, h=2.4, share=True)
    colours = {r: f"C{i}" if len(rows) <= 10 else _tab20(i) for i, r in enumerate(rows)}
    for ax, col in zip(axes.flat, cols):
        for row, g in curves[curves["col"] == col].groupby("row", sort=False):
            g = g.sort_values("step")
            ax.fill_between(g["step"], g["low"], g["high"], color=colours[row], alpha=0.2, lw=0)
            ax.plot(g["step"], g["mean"], color=colours[row], marker="o" if len(g) < 12 else None, ms=3, label=row)
        ax.set_title(col, fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.xaxis.set_major_formatter(FuncFormatter(_step_text))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(cols):]:
        ax.set_visible(False)
    for ax in axes.flat[max(0, len(cols) - ncols):len(cols)]:  # the lowest panel of each column
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_tick_params(labelbottom=True)
    for ax in axes[:, 0]:
        ax.set_ylabel(metric_name(metric), fontsize=8)
    handles = {h.get_label(): h for ax in axes.flat for h in ax.get_lines()}
    fig.legend([handles[r] for r in rows if r in handles], [r for r in rows if r in handles], loc="outside lower center",
               ncols=min(3, len(rows)), fontsize=7, frameon=False)
    fig.suptitle("mean over finished seeds; band: their min to max", fontsize=8)
    return _save(fig, path)


def _step_text(x: float, _pos=None) -> str:
    """A step tick: 500, 2000, 280k."""
    return f"{x / 1000:g}k" if abs(x) >= 10_000 else f"{x:g}"


def _tab20(i: int):
    """The i-th colour of matplotlib's tab20 map, for more rows than the default cycle's 10 colours."""
    from matplotlib import colormaps

    return colormaps["tab20"](i % 20)
