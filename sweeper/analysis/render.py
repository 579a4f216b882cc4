"""A table as Markdown, LaTeX, CSV and JSON, written atomically beside the results.

The CSV is the table's data (one line per cell); the JSON is its text as every rendering shows it (`grid`:
title, header, rows of cell strings, notes), from which report.html renders the table
(sweeper/analysis/html.py) rather than reading the Markdown back.

    python -m sweeper.report results/table_cifar-20260101-120000 --format latex   # writes table.{md,tex,csv,json}
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from sweeper.analysis.labels import BEST_HEADER
from sweeper.analysis.tables import cell_text, column_order, mean_std, signed, table_notes
from trainables.files import atomic_write


def _grid(table: pd.DataFrame) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, body cells and each column's width: ours, the best test error where the table has it (BEST_COLS),
    then paper and Δ where the paper has a value, and Δ best test beside them."""
    rows = list(dict.fromkeys(table["row"]))
    cols = column_order(table)
    has_paper = {c: bool(table.loc[table["col"] == c, "paper_mean"].notna().any()) for c in cols}
    best = "best_test_mean" in table.columns
    heads = {c: [c] + ([BEST_HEADER] if best else []) + (["paper", "Δ"] if has_paper[c] else [])
             + (["Δ best test"] if best and has_paper[c] else []) for c in cols}
    header = ["Model"] + [h for c in cols for h in heads[c]]
    body = []
    for rl in rows:
        line = [rl]
        for c in cols:
            hit = table[(table["row"] == rl) & (table["col"] == c)]
            r = hit.iloc[0] if len(hit) else None
            line.append(cell_text(r) if r is not None else "")
            if best:
                line.append(mean_std(r["best_test_mean"], r["best_test_std"], int(r["best_test_n"]))
                            if r is not None else "")
            if has_paper[c]:
                line += _paper_cells(r, best)
        body.append(line)
    return header, body, [len(heads[c]) for c in cols]


def _paper_cells(r, best: bool) -> list[str]:
    """The paper's value and Δ (or the reason there is none) of a cell, then Δ best test where `best`."""
    if r is None or pd.isna(r["paper_mean"]):
        return [""] * (3 if best else 2)
    p = f"{r['paper_mean']:.2f}" + ("" if pd.isna(r["paper_std"]) else f" ± {r['paper_std']:.2f}")
    note = r.get("paper_note", "")
    d = note if isinstance(note, str) and note else "" if pd.isna(r["delta"]) else signed(r["delta"])
    return [p, d] + ([signed(r["best_test_delta"]) if pd.notna(r["best_test_delta"]) else ""] if best else [])


def grid(table: pd.DataFrame, title: str = "", notes=()) -> dict:
    """The table's text: {"title", "header": [str], "rows": [[str]] (the row label first), "notes": [str]
    (what a cell is, the baseline, the paper)}, what the Markdown and the page show cell for cell."""
    header, body, _ = _grid(table)
    return {"title": title, "header": header, "rows": body, "notes": list(table_notes(table, notes))}


def grid_markdown(g: dict, align: list[str] | None = None) -> str:
    """A grid (`grid`, ranking.ranking_grid) as a Markdown table under its "### title", its notes as a list
    below it; `align`: each column's alignment row cell (default: the label left, the rest centred)."""
    def md_row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    n = len(g["header"])
    align = align or ["---"] + [":-:"] * (n - 1)
    lines = [f"### {g['title']}", ""] if g["title"] else []
    lines += [md_row(g["header"]), "|" + "|".join(align) + "|"]
    lines += [md_row(line) for line in g["rows"]]
    return "\n".join(lines + [""] + [f"- {n}" for n in g["notes"]]) + "\n"


def to_markdown(table: pd.DataFrame, title: str = "", notes=()) -> str:
    """The table as Markdown, its notes (what a cell is, the baseline, the paper) as a list below it."""
    return grid_markdown(grid(table, title, notes))


def grid_json(g: dict) -> str:
    return json.dumps(g, ensure_ascii=False, indent=1) + "\n"


_TEX_ESCAPE = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_UNICODE = {"Π": r"$\Pi$", "α": r"$\alpha$", "±": r"$\pm$", "Δ": r"$\Delta$", "−": "-", "—": "--",
                "·": r"$\cdot$"}


def tex(s: str) -> str:
    """Text -> LaTeX: special characters escaped, the few Greek letters and ± in math mode."""
    s = "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)
    return "".join(_TEX_UNICODE.get(ch, ch) for ch in s)


def to_latex(table: pd.DataFrame, title: str = "", notes=()) -> str:
    """The table as a plain LaTeX tabular, title and notes as % comments above it."""
    header, body, widths = _grid(table)
    spec = "l|" + "|".join("c" * w for w in widths)
    lines = [f"% {title}"] if title else []
    lines += [f"% {n}" for n in table_notes(table, notes)]
    lines += [rf"\begin{{tabular}}{{{spec}}}", r"\hline", " & ".join(map(tex, header)) + r" \\", r"\hline"]
    lines += [" & ".join(map(tex, line)) + r" \\" for line in body]
    lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_tables(table: pd.DataFrame, folder: Path, stem: str, title: str = "", notes=()) -> dict[str, Path]:
    """<stem>.md, <stem>.tex, <stem>.csv and <stem>.json in folder, each written atomically."""
    g = grid(table, title, notes)
    md, tx, js = grid_markdown(g), to_latex(table, title, notes), grid_json(g)
    return {f"{stem}.md": atomic_write(folder / f"{stem}.md", lambda t: Path(t).write_text(md)),
            f"{stem}.tex": atomic_write(folder / f"{stem}.tex", lambda t: Path(t).write_text(tx)),
            f"{stem}.csv": atomic_write(folder / f"{stem}.csv", lambda t: table.to_csv(t, index=False)),
            f"{stem}.json": atomic_write(folder / f"{stem}.json", lambda t: Path(t).write_text(js))}
