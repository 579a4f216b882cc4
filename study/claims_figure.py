"""docs/claims.png: every graded comparison of docs/claims.json on one axis, grouped by the paper's table or figure.

One row per comparison a graded claim names (a claim of several cells has several rows): its pooled paired
Δ (cell − reference over every committed seed, study/claims.py's `pooled`) with the 95 % interval, divided by
the claim's declared effect size (its `margin` for a match), so that error, sensitivity, sparsity and the
other metrics share one axis on which ±1 is the smallest difference that matters. A row's colour is its
comparison's verdict; a marker at the axis' edge shows the side the paper claims (both edges, pointing in:
a claimed match). Untestable and pending claims hold no comparison and are left out (the caption counts
them). The x axis is linear inside ±1 and logarithmic beyond, since the effects span three decades.

The PNG carries the SHA-256 of its rows and of this module in a tEXt chunk (`claims-sha256`), as
docs/report.png names its page: `python -m study.docs --check` compares that, not pixels, which depend on
the matplotlib and fonts at hand.

    python -m study.docs            # redraws docs/claims.png where its rows or this module changed
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import re
from pathlib import Path

from study import claims as claimlib
from study.picture import text_chunks, with_text_chunk

FIGURE = Path("docs/claims.png")
HASH_KEY = b"claims-sha256"
OURS = "not the paper's"  # the source of the project's own claims
COLOURS = {"yes": "#1a9850", "contradicted": "#d73027", "absent": "#4575b4", "disagree": "#984ea3",
           "undecided": "#9e9e9e"}
LABEL_CHARS = 62  # a row label's claim text is cut here, so that the labels fit beside the axis
ROW_IN, DPI = 0.2, 100  # inches per row, dots per inch


def paper_ref(source: str) -> str:
    """The paper's table or figure a claim's `source` names, without its note: "Fig. 3(c) (read off the
    figure)" -> "Fig. 3(c)", "appendix, FixMatch (13.45 vs 5.07)" -> "appendix, FixMatch"."""
    return "ours (not the paper's)" if source == OURS else source.split(" (", 1)[0]


def group_order(ref: str) -> tuple:
    """The tables the paper's main claims span ("Tables 1, 2"), each table, the figures, the appendix, then
    the project's own claims; by number within each."""
    rank = next((i for i, p in enumerate(("Tables", "Table", "Fig", "appendix")) if ref.startswith(p)), 4)
    number = re.search(r"\d+", ref)
    return rank, int(number.group()) if number else math.inf, ref


def cell_labels(claim: dict) -> list[str]:
    """Per cell of the claim, the keys in which its cells differ ("method=pi"); "" for a one-cell claim."""
    cells = claim["cells"]
    keys = [k for k in dict.fromkeys(k for c in cells for k in c) if len({repr(c.get(k)) for c in cells}) > 1]
    return [", ".join(f"{k}={c.get(k)}" for k in keys) for c in cells]


def short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def figure_rows(graded: list[tuple[dict, dict | None]]) -> list[dict]:
    """One dict per graded comparison, grouped by paper_ref (claims.json's order within a group): the claim,
    its paper reference, the cell's label, direction, metric, declared size, the comparison's verdict,
    n, and the pooled Δ with its 95 % interval in units of that size (`d`, `lo`, `hi`)."""
    rows = []
    for c, g in graded:
        if g is None or g["verdict"] is None:
            continue
        size = claimlib.size(c)
        for v, cell in zip(g["cells"], cell_labels(c)):
            p = v["pooled"]
            rows.append({"group": paper_ref(c["source"]), "claim": c["claim"], "cell": cell,
                         "direction": c["direction"], "metric": c.get("metric", "test_error"), "size": size,
                         "verdict": v["verdict"], "n": p["n"],
                         "d": p["d"] / size, "lo": p["lo"] / size, "hi": p["hi"] / size})
    return sorted(rows, key=lambda r: group_order(r["group"]))  # stable: claims.json's order within a group


def left_out(graded: list[tuple[dict, dict | None]]) -> dict[str, int]:
    """The claims without a comparison in the figure: {"not testable here": k, "pending": k}, zeros dropped."""
    counts = {"not testable here": sum(g is None for _, g in graded),
              "pending": sum(g is not None and g["verdict"] is None for _, g in graded)}
    return {k: n for k, n in counts.items() if n}


def caption(graded: list[tuple[dict, dict | None]]) -> str:
    """What the figure shows, with how many claims and comparisons it holds and which claims it leaves out."""
    rows = figure_rows(graded)
    shown = len({r["claim"] for r in rows})
    out = " and ".join(f"{n} {why}" for why, n in left_out(graded).items())
    return (f"One row per graded comparison: {len(rows)}, from {shown} claim{'s' * (shown != 1)}"
            + (f" (the {out} hold none and are left out)" if out else "") + ". Each shows the pooled paired Δ "
            "(cell − reference over every committed seed) with its 95 % interval, in units of the claim's declared "
            "effect size, grouped by the paper's table or figure and coloured by the comparison's verdict. Grey "
            "band: ±1, the size that matters (the axis is linear inside it, logarithmic beyond); ◀ or ▶ at an edge "
            "marks the side the paper claims, ▶ ◀ a claimed match.")


def rows_hash(rows: list[dict]) -> bytes:
    """The SHA-256 of the rows and of the code that draws them: what the committed PNG must name."""
    data = json.dumps(rows, sort_keys=True) + Path(__file__).read_text()
    return hashlib.sha256(data.encode()).hexdigest().encode()


def is_current(root: Path, rows: list[dict]) -> bool:
    path = root / FIGURE
    return path.is_file() and text_chunks(path.read_bytes()).get(HASH_KEY) == rows_hash(rows)


def _slots(rows: list[dict]) -> list[tuple[str, dict | None]]:
    """The figure's lines top to bottom: a group's heading (None), then its rows."""
    out, group = [], None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            out.append((group, None))
        out.append((short(r["claim"]) + (f" · {r['cell']}" if r["cell"] else ""), r))
    return out


def _ticks(lo: float, hi: float) -> list[float]:
    base = [0, 1, 3, 10, 30, 100, 300, 1000]
    return [t for t in sorted({-b for b in base} | set(base)) if lo <= t <= hi]


def _limits(rows: list[dict]) -> tuple[float, float]:
    ends = [x for r in rows for x in (r["lo"], r["hi"], r["d"]) if math.isfinite(x)]
    return min([-1.5, *ends]) * 1.25, max([1.5, *ends]) * 1.25


def _mark_direction(ax, y: float, direction: str) -> None:
    """The side the paper claims, at the axis' edges: ◀ lower, ▶ higher, ▶ ◀ a match."""
    edge = ax.get_yaxis_transform()  # x in axes fractions, y in data
    marks = {"lower": [(0.008, "<")], "higher": [(0.992, ">")], "matches": [(0.008, ">"), (0.992, "<")]}
    for x, m in marks[direction]:
        ax.plot([x], [y], marker=m, ms=5, color="black", transform=edge, clip_on=False)


def _draw_rows(ax, slots: list[tuple[str, dict | None]]) -> None:
    for i, (_, r) in enumerate(slots):
        y = -i
        if r is None:
            ax.axhline(y + 0.5, color="#cccccc", lw=0.6)
            continue
        colour = COLOURS[r["verdict"]]
        if math.isfinite(r["lo"]):
            ax.plot([r["lo"], r["hi"]], [y, y], color=colour, lw=2.2, solid_capstyle="butt")
        ax.plot([r["d"]], [y], "o", color=colour, ms=4.5, mec="black", mew=0.5)
        _mark_direction(ax, y, r["direction"])


def _legend(fig) -> None:
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.lines import Line2D

    def side(m):
        return Line2D([], [], color="black", ls="", marker=m, ms=5)

    handles = [Line2D([], [], color=c, lw=2.2, marker="o", ms=4.5, mec="black", mew=0.5) for c in COLOURS.values()]
    handles += [side("<"), side(">"), (side(">"), side("<"))]
    labels = [*COLOURS, "paper: lower", "paper: higher", "paper: a match"]
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 1.0), handler_map={tuple: HandlerTuple(ndivide=None)})


def draw(rows: list[dict]) -> bytes:
    """The figure as PNG bytes (matplotlib's Agg, no pyplot state, no Software or date metadata)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedFormatter, FixedLocator

    slots = _slots(rows) or [("no graded comparison yet", None)]
    fig = Figure(figsize=(12, ROW_IN * len(slots) + 1.4))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.43, 0.9 / fig.get_figheight(), 0.55, 1 - 1.4 / fig.get_figheight()))
    ax.set_xscale("symlog", linthresh=1, linscale=1)
    lo, hi = _limits(rows)
    ax.set_xlim(lo, hi)
    ax.set_ylim(-len(slots) + 0.5, 0.5)
    ax.axvspan(-1, 1, color="#ebebeb", zorder=0)
    ax.axvline(0, color="#777777", lw=0.8, zorder=0)
    _draw_rows(ax, slots)
    ticks = _ticks(lo, hi)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{t:g}".replace("-", "−") for t in ticks]))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.set_yticks([-i for i in range(len(slots))], [s for s, _ in slots], fontsize=7.5)
    for label, (_, r) in zip(ax.get_yticklabels(), slots):
        if r is None:
            label.set_fontweight("bold")
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("pooled paired Δ (cell − reference) / the claim's declared effect size, with its 95 % interval",
                  fontsize=8.5)
    _legend(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def write(root: Path, rows: list[dict]) -> Path:
    """docs/claims.png drawn from `rows`, naming their rows_hash; the path written."""
    (root / FIGURE).write_bytes(with_text_chunk(draw(rows), HASH_KEY, rows_hash(rows)))
    return FIGURE
