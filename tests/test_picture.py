"""The README's picture: the quick start's report page rebuilt from a committed run (study/picture.py),
its table equal to the run's summary.csv, the same page from the same files, no machine path in it,
and docs/report.png made from the committed docs/report.html.

    python -m pytest tests/test_picture.py -q
"""
import csv
import json
from dataclasses import asdict
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from browser import need_chromium, open_page
from conftest import write_trial
from search_spaces import get_sweep
from study import committed_runs, picture
from sweeper.report import build_report

ROOT = Path(__file__).resolve().parent.parent


class ResultsTable(HTMLParser):
    """The text of each cell of the page's first `table.results`: [(row header, [cell texts])]; a cell's
    nested per-seed table (<details>) is left out."""

    def __init__(self):
        super().__init__()
        self.rows, self.depth, self.inside, self.cell, self.skip = [], 0, False, None, 0

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            if not self.inside and ("class", "results") in attrs and not self.rows:
                self.inside, self.depth = True, 0
            self.depth += self.inside
        elif self.inside and self.depth == 1:
            if tag == "tr":
                self.rows.append(["", []])
            elif tag == "details":
                self.skip += 1
            elif tag in ("th", "td") and self.rows and not self.skip:
                self.cell = tag
                if tag == "td":
                    self.rows[-1][1].append("")

    def handle_endtag(self, tag):
        if tag == "table" and self.inside:
            self.depth -= 1
            self.inside = self.depth > 0
        elif tag == "details" and self.inside:
            self.skip -= 1
        elif tag in ("th", "td"):
            self.cell = None

    def handle_data(self, data):
        if self.inside and self.cell and not self.skip and self.depth == 1:
            if self.cell == "th":
                self.rows[-1][0] += data
            else:
                self.rows[-1][1][-1] += data


def table_cells(page: str) -> list[tuple[str, list[str]]]:
    p = ResultsTable()
    p.feed(page)
    return [(h.strip(), [" ".join(c.split()) for c in cells]) for h, cells in p.rows if cells]


def summary_cells(run: Path) -> set[str]:
    """"mean ± std" of every summary.csv row, as the tables print them (two decimals)."""
    with open(run / "summary.csv", newline="") as f:
        return {f"{float(r['mean']):.2f} ± {float(r['std']):.2f}" for r in csv.DictReader(f) if r["mean"]}


def page_cells(page: str) -> set[str]:
    return {c.split(" · ")[0] for _, cells in table_cells(page) for c in cells if "±" in c}


@pytest.fixture(scope="module")
def committed_run(tmp_path_factory):
    """A finished quick-start-shaped results folder (3 rows x 3 seeds, one evaluation each, data_dir an
    absolute path of this machine), its report built, then added to a project's docs/runs/."""
    tmp = tmp_path_factory.mktemp("picture")
    exp = tmp / "machine" / "results" / "ablation_radius-20000101-000000"
    sweep = get_sweep("ablation_radius", "quick")
    trials = sweep.trials(seeds=3)
    exp.mkdir(parents=True)
    (exp / "sweep.json").write_text(json.dumps({**asdict(sweep), "preset": "quick", "n_trials": len(trials),
                                                "argv": [str(tmp / "sweeper" / "run.py"), "ablation_radius",
                                                         "--preset", "quick", "--storage", str(tmp)]}))
    rng = np.random.default_rng(3)
    for i, t in enumerate(trials):
        err = float(rng.uniform(2, 6))
        write_trial(exp, i, {**t, "data_dir": str(tmp / "machine" / "data"), "trial_index": i},
                    [{"step": 1000, "test_error": err, "val_error": err + 1, "diverged": 0, "done": True,
                      "hostname": "testhost"}])
    build_report(exp)
    root = tmp / "project"
    (root / "docs" / "runs").mkdir(parents=True)
    run = committed_runs.add(exp, root=root)
    (run / "machine.json").write_text(json.dumps({**json.loads((run / "machine.json").read_text()),
                                                  "date": "2000-01-02"}))
    return root, run, tmp


def test_add_commits_what_the_page_needs_without_the_machines_paths(committed_run):
    root, run, tmp = committed_run
    assert {"table.csv", "trials.parquet"} <= {p.name for p in run.iterdir()}
    df = pd.read_parquet(run / "trials.parquet")
    assert set(df["data_dir"]) == {"data"} and len(df) == 15  # 5 configs x 3 seeds
    assert str(tmp) not in (run / "trials.parquet").read_bytes().decode("latin-1")


def test_the_page_rebuilt_from_the_committed_run_shows_its_summary_and_no_machine_path(committed_run):
    root, run, tmp = committed_run
    page = picture.page_html(run)
    assert page == picture.page_html(run)  # the same files, the same page, byte for byte
    assert page_cells(page) == summary_cells(run) and len(summary_cells(run)) == 5
    assert [h for h, _ in table_cells(page)] == ["LabelSpreading", "MT (baseline)", "MT + MUR"]
    assert str(tmp) not in page and "/tmp/" not in page
    assert "page written 2000-01-02 00:00:00 UTC" in page and f"docs/runs/{run.name}" in page


def test_a_planted_machine_path_or_a_missing_file_is_refused(committed_run, tmp_path):
    root, run, _ = committed_run
    other = tmp_path / run.name
    other.mkdir()
    for p in run.iterdir():
        (other / p.name).write_bytes(p.read_bytes())
    meta = json.loads((other / "sweep.json").read_text())
    (other / "sweep.json").write_text(json.dumps({**meta, "argv": ["sweeper.run", "--storage", "/work/x"]}))
    with pytest.raises(picture.PictureError, match="machine paths"):
        picture.page_html(other)
    (other / "trials.parquet").unlink()
    with pytest.raises(picture.PictureError, match="no trials.parquet"):
        picture.page_html(other)


def test_png_text_chunks_round_trip():
    png = (ROOT / "docs" / "runs" / "ablation_radius-quick-s0-7" / "paired_diffs.png").read_bytes()
    marked = picture.with_text_chunk(png, picture.HASH_KEY, b"abc")
    assert picture.text_chunks(marked)[picture.HASH_KEY] == b"abc" and picture.HASH_KEY not in picture.text_chunks(png)
    assert marked.endswith(png[png.rindex(b"IEND") - 4:])  # IEND stays last


@pytest.mark.slow
def test_the_picture_is_drawn_from_the_page_it_names(committed_run):
    need_chromium()
    root, run, _ = committed_run
    assert not picture.picture_is_current(root)
    assert picture.write_picture(run, root=root) == [picture.PAGE, picture.PICTURE]
    assert picture.picture_is_current(root)
    png = (root / picture.PICTURE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    seen = open_page(root / picture.PAGE, root / "shot.png")  # the page's text in the browser
    assert seen["blocked"] == [] and seen["errors"] == []
    assert {c.split(" · ")[0] for _, cells in seen["table"] for c in cells if "±" in c} == summary_cells(run)
    (root / picture.PAGE).write_text((root / picture.PAGE).read_text() + "<!-- edited -->")
    assert not picture.picture_is_current(root)


def test_the_committed_picture_is_made_from_the_committed_quick_start_run():
    """docs/report.html is the page rebuilt now from the committed quick-start run, and docs/report.png
    names it; while that run lacks what the page needs, neither is committed (no stale picture)."""
    runs = committed_runs.runs_of([committed_runs.read_run(p) for p in committed_runs.run_dirs()], *picture.QUICKSTART)
    assert runs
    run = runs[0]["folder"]
    if all((run / n).is_file() for n in picture.PAGE_INPUTS):
        page = (ROOT / picture.PAGE).read_text()
        assert page == picture.page_html(run)
        assert page_cells(page) == summary_cells(run)
        assert picture.picture_is_current(ROOT)
    else:
        assert not (ROOT / picture.PICTURE).exists() and not (ROOT / picture.PAGE).exists()
        assert "no picture of the report page yet" in (ROOT / "README.md").read_text()
