"""The generated docs equal what `python -m study.docs` makes from the committed files, the claims
are classified as declared, and the README and docs stay a landing page plus links that resolve.

    python -m pytest tests/test_docs.py -q
"""
import csv
import json
import re
import shlex
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from search_spaces import get_sweep, names
from study import docs
from sweeper.analysis.tables import diff_text, value_text  # what table.md prints per cell
from study import benchmark_docs, claims_figure, committed_runs
from study import claims as claimlib
from trainables.config import TrainConfig

ROOT = Path(__file__).resolve().parent.parent


def _test_commands() -> tuple[str, str]:
    """The fast and the whole suite's commands as benchmarks/test_times.py times them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("test_times", ROOT / "benchmarks" / "test_times.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FAST, mod.WHOLE


FAST, WHOLE = _test_commands()
DOC_FILES = [ROOT / "README.md", ROOT / "cluster" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_committed_generated_files_equal_what_the_generator_makes(capsys):
    """`python -m study.docs --check`: every generated text and docs/claims.png are what the generator makes."""
    assert docs.main(["--check"]) == 0, capsys.readouterr().err


QUICK_START = "python -m sweeper.run ablation_radius --preset quick"


def _quick_run() -> dict:
    runs = committed_runs.runs_of([committed_runs.read_run(p) for p in committed_runs.run_dirs()], "ablation_radius",
                                  "quick")
    assert runs, "the quick start's run is committed"
    return runs[0]


def test_readme_first_screen_installs_runs_the_quick_start_and_shows_its_time_and_table_once():
    """Within the first 40 lines: the install, the quick-start command, then its time from machine.json as
    the generator words it, then its table (one line per cell, none over 100 characters); the table's
    cells appear nowhere else in the README, and no picture repeats them there."""
    text = (ROOT / "README.md").read_text()
    first_screen = "\n".join(text.splitlines()[:40])
    run = _quick_run()
    minutes = f"{json.loads((run['folder'] / 'machine.json').read_text())['wall_min']:.1f} min"
    when = docs.quickstart_time(run["machine"])
    assert minutes in when and when.startswith("takes about ") and when.endswith(", 2 cores")
    table = docs.compact_table(run["table"], docs.table_rows(run["folder"]))
    assert "pip install -e" in first_screen
    assert first_screen.index(QUICK_START) < first_screen.index(when) < first_screen.index(table)
    assert all(len(line) <= 100 for line in table.splitlines()), table
    assert text.count(table) == 1
    for cell in docs.table_rows(run["folder"]):
        assert text.count(value_text(cell)) == 1, cell["row"]  # no second copy of the table
    assert "paired_diffs.png" not in text


def test_the_quick_start_table_shows_the_cells_of_the_table_the_run_printed():
    """Each line of the compact table is one cell of the committed table.md, with its mean ± std and Δ."""
    run = _quick_run()
    cells = docs.table_rows(run["folder"])
    grid = [line for line in run["table"].splitlines() if line.startswith("| ") and "---" not in line]
    header, body = grid[0].strip("| ").split(" | "), [row.strip("| ").split(" | ") for row in grid[1:]]
    printed = {(row[0], col): text for row in body for col, text in zip(header[1:], row[1:]) if text.strip()}
    lines = docs.compact_table(run["table"], cells).splitlines()[3:]
    assert len(lines) == len(printed) == len(cells) == 5
    for cell, line in zip(cells, lines):
        mean_std, _, diff = printed[cell["row"], cell["col"]].strip().partition(" · ")
        assert line.split()[:len(cell["row"].split())] == cell["row"].split()
        assert value_text(cell) == mean_std and diff_text(cell).removeprefix(" · ") == diff
        assert line.rstrip().endswith(f"{mean_std}  {diff}".rstrip())


def test_readme_is_a_landing_page_with_the_ci_install_and_test_command():
    text = (ROOT / "README.md").read_text()
    first_screen = "\n".join(text.splitlines()[:40])
    assert "pip install -e" in first_screen and QUICK_START in first_screen
    assert "takes about" in first_screen.split(QUICK_START, 1)[1]  # its time
    assert len(text.splitlines()) <= 150
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"\n{WHOLE}\n" in text and f"\n{WHOLE}\n" in ci  # .ci/run runs the README's
    installs = re.findall(r"pip install -e '([^']+)'", ci)
    assert installs and all(f"pip install -e '{extras}'" in text for extras in installs)  # what CI installs
    assert ("chromium" in ci) == ("apt-get install -y chromium" in text)
    assert "python -m sweeper.run ablation_radius --preset quick" in text
    opening = text.split("\n\n")[1]  # the paragraph under the title: what it is, what the quick start shows
    sentences = [s for s in re.split(r"(?<=[.])\s+(?=[A-Z])", opening.replace("\n", " ")) if s.strip()]
    assert len(sentences) <= 2 and all(len(s.split()) <= 60 for s in sentences), sentences


PRIVILEGED = re.compile(r"(^|[\s;&|(])(sudo|su|doas|apt|apt-get|dnf|yum|apk|mount|chown|systemctl)(\s|$)")


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_readme_install_block_runs_as_root_and_as_a_user_and_its_first_test_command_is_the_fast_one():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Install"):text.index("\n## ", text.index("## Install") + 1)]
    install = bash_blocks(section)[0]  # the block a newcomer pastes first
    assert "pip install -e" in install
    assert not [line for line in install.splitlines() if PRIVILEGED.search(line)], install
    blocks = bash_blocks(text)
    tests = [line.strip() for b in blocks for line in b.splitlines() if "pytest" in line]
    assert tests[0] == FAST  # the fast suite first
    assert tests[-1] == WHOLE  # everything, as .ci/run runs it
    optional = [b for b in blocks if "chromium" in b]
    assert optional and blocks.index(optional[0]) > 0  # the browser has a block of its own, after the install


def test_the_privilege_check_sees_what_a_root_container_lacks():
    assert PRIVILEGED.search("sudo apt-get install -y chromium")
    assert PRIVILEGED.search("python3 -m venv .venv && apt-get install -y x")
    assert not PRIVILEGED.search("pip install -e '.[test,mlflow]'")
    assert not PRIVILEGED.search("python3 -m venv .venv && . .venv/bin/activate")


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to missing {target}"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_describe_the_project_not_its_making(path):
    text = path.read_text()
    for pattern in (r"\.\./shared", r"/work/", r"\bissue \d+", r"#\d{1,3}\b",
                    r"\blast round\b", r"IMPLEMENTATION_NOTES"):
        assert not re.search(pattern, text, re.I), f"{path.relative_to(ROOT)}: {pattern}"


def test_declared_claims_name_real_sweeps_presets_and_config_keys():
    keys = {f.name for f in fields(TrainConfig)}
    for c in docs.load_claims():
        if c.get("testable", True) is False:
            continue
        assert c["sweep"] in names(), c
        get_sweep(c["sweep"], c["preset"])  # raises for a preset the sweep does not have
        for cell in c["cells"]:
            assert set(cell) | set(c["against"]) <= keys, (c["claim"], (set(cell) | set(c["against"])) - keys)


def test_a_sweep_that_stops_matches_uses_its_claims_margin():
    """--seeds auto's "matches" margin in a sweep module is the one docs/claims.json declares for the claim
    the sweep's own baseline comparison tests (one rule, stated before the runs)."""
    declared = 0
    for c in docs.load_claims():
        if "margin" not in c:
            continue
        sweep = get_sweep(c["sweep"], c["preset"])
        if sweep.match_margin is not None:
            assert all({**cell, **c["against"]}.items() >= sweep.baseline.items() for cell in c["cells"]), c["claim"]
            assert sweep.match_margin == c["margin"], c["claim"]
            declared += 1
    assert declared >= 1


def test_every_committed_run_comes_from_a_commit_of_clean_code():
    """A committed run reproduces from its commit only if nothing uncommitted ran: no "+dirty" commit (and
    the command and machine that made it, for its reproduction)."""
    for p in committed_runs.run_dirs():
        run = committed_runs.read_run(p)
        commit = run["meta"].get("commit") or ""
        assert re.fullmatch(r"[0-9a-f]{40}", commit), f"{p.name}: commit {commit!r}; rerun it from a clean checkout"
        assert run["machine"].get("command", "").startswith("python -m sweeper.run "), p.name
        assert run["machine"].get("cpu"), p.name


@pytest.mark.slow
def test_every_claim_is_graded_on_two_disjoint_halves_of_its_seeds_or_says_why_not():
    runs = [committed_runs.read_run(p) for p in committed_runs.run_dirs()]
    for c, graded in docs.grade_claims(docs.load_claims(), runs):
        if graded is None:
            assert c["why"], c["claim"]
            continue
        if graded["verdict"] is None:  # a sweep whose two seed sets are not both committed says so
            assert c.get("pending"), (c["claim"], graded["status"])
            continue
        assert not c.get("pending"), (c["claim"], "graded now: drop its pending note")
        assert graded["verdict"] in claimlib.VERDICTS, c["claim"]
        for cell in graded["cells"]:
            a, b = (set(x["seeds"]) for x in cell["sets"])
            assert a and b and not a & b and a | b == set(cell["pooled"]["seeds"]), c["claim"]


# ---------------------------------------------------------------- the generator, on made-up runs

def write_run(root, name, sweep, values):
    """A committed run folder whose trials.csv holds {(mur, seed): test error} for MT (mur none) and MT+MUR r=1."""
    folder = root / "docs" / "runs" / name
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"name": sweep, "preset": "quick", "base": {"method": "mt"},
                                                   "argv": ["sweeper/run.py", sweep, "--preset", "quick"]}))
    (folder / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "cores": 2, "torch": "9.9",
                                                     "date": "2000-01-01", "wall_min": 4.2}))
    (folder / "table.md").write_text(f"| table of {name} |\n")
    seeds = sorted({s for _, s in values})
    (folder / "summary.csv").write_text("mur,seeds\n" + "".join(f'{m},"{",".join(map(str, seeds))}"\n'
                                                                 for m in ("none", "direct")))
    with open(folder / "trials.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mur", "mur_radius", "seed", "status", "final_test_error"])
        for (mur, seed), v in values.items():
            w.writerow([mur, 1.0, seed, "finished", v])
    return folder


def project(tmp_path, claims):
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "claims.json").write_text(json.dumps(claims))
    (tmp_path / "benchmarks" / "results").mkdir(parents=True, exist_ok=True)
    (tmp_path / "README.md").write_text("# x\n<!-- generated: install -->\n<!-- end -->\n"
                                        "<!-- generated: quickstart -->\nold\n<!-- end -->\n"
                                        "<!-- generated: picture -->\n<!-- end -->\n"
                                        "<!-- generated: claims -->\n<!-- end -->\n")
    return tmp_path


CLAIM = {"claim": "MUR at r = 1 helps", "source": "Fig. 3(c)", "sweep": "ablation_radius", "preset": "quick",
         "cells": [{"method": "mt", "mur": "direct", "mur_radius": 1}], "against": {"mur": "none"},
         "direction": "lower", "effect": 0.2}
OTHER = {"claim": "VD helps", "source": "Table 1", "sweep": "ablation_kl", "preset": "quick",
         "cells": [{"method": "mt", "vd": True}], "against": {"vd": False}, "direction": "lower", "effect": 0.5}
UNTESTED = {"claim": "CIFAR-100 too", "source": "Table 1", "testable": False, "why": "no 100-class data here"}


def test_a_claim_whose_halves_disagree_is_graded_on_both_runs_and_rendered(tmp_path):
    from scipy import stats

    root = project(tmp_path, [CLAIM, OTHER, UNTESTED])
    write_run(root, "ablation_radius-quick-s0-2", "ablation_radius",
              {**{("none", s): v for s, v in zip((0, 1, 2), (5.0, 6.0, 4.0))},
               **{("direct", s): v for s, v in zip((0, 1, 2), (4.0, 4.5, 3.2))}})
    runs = [committed_runs.read_run(p) for p in committed_runs.run_dirs(root)]
    one = docs.grade_claims([CLAIM], runs)[0][1]
    assert one["verdict"] is None and one["status"] == "one seed set committed"
    # the second run: MT+MUR higher on every seed. Halves of seeds 0-5: 0-2 (yes) and 3-5 (contradicted)
    write_run(root, "ablation_radius-quick-s3-5", "ablation_radius",
              {**{("none", s): v for s, v in zip((3, 4, 5), (5.0, 6.0, 4.0))},
               **{("direct", s): v for s, v in zip((3, 4, 5), (5.6, 6.9, 4.5))}})
    runs = [committed_runs.read_run(p) for p in committed_runs.run_dirs(root)]
    graded = dict((c["claim"], g) for c, g in docs.grade_claims([CLAIM, OTHER, UNTESTED], runs))
    cell = graded[CLAIM["claim"]]["cells"][0]
    assert [x["verdict"] for x in cell["sets"]] == ["yes", "contradicted"]
    assert graded[CLAIM["claim"]]["verdict"] == "disagree"
    first = cell["sets"][0]
    ci = stats.ttest_rel([4.0, 4.5, 3.2], [5.0, 6.0, 4.0]).confidence_interval(0.95)
    assert first["d"] == pytest.approx(-1.1) and (first["lo"], first["hi"]) == pytest.approx((ci.low, ci.high))
    assert graded[OTHER["claim"]]["status"] == "not committed" and graded[UNTESTED["claim"]] is None

    made = docs.generated(root)
    readme = made[Path("README.md")]
    counts = "Of 3 claims, on digits: 1 disagree · 1 pending (not committed) · 1 not testable here."
    assert counts in readme and "](docs/claims.png)" in readme and "](docs/RESULTS.md)" in readme
    assert "One row per graded comparison: 1, from 1 claim (the 1 not testable here and 1 pending hold none " \
           "and are left out)." in readme
    assert "\nold\n" not in readme  # a run without table.csv: the quick start says what to add
    assert "no table.csv: add it again with `python -m study.docs add" in readme
    results = made[Path("docs/RESULTS.md")]
    assert counts in results and "](claims.png)" in results
    assert f"**undecided**: {claimlib.MEANING['undecided']}." in results
    assert "## ablation_radius (quick, seeds 3-5)" in results
    assert "Test CPU, 2 cores, torch 9.9" in results
    assert "s0-2: yes, Δ −1.10 " + f"[{ci.low:+.2f}, {ci.high:+.2f}]".replace("-", "−") in results
    pooled = cell["pooled"]
    delta = f"{pooled['d']:+.2f} [{pooled['lo']:+.2f}, {pooled['hi']:+.2f}]".replace("-", "−")
    assert f"| MUR at r = 1 helps | Fig. 3(c) | `ablation_radius` | disagree | {delta} | 6 | s0-2: yes" in results
    assert "| CIFAR-100 too | Table 1 | — | not testable here | — | — | no 100-class data here |" in results
    assert "| VD helps | Table 1 | `ablation_kl` | pending (not committed): `python -m sweeper.run ablation_kl --preset quick` |" \
        in results
    rows = claims_figure.figure_rows(docs.grade_claims([CLAIM, OTHER, UNTESTED], runs))
    assert [(r["claim"], r["verdict"], r["n"]) for r in rows] == [(CLAIM["claim"], "disagree", 6)]
    assert rows[0]["d"] == pytest.approx(pooled["d"] / CLAIM["effect"])
    assert (rows[0]["lo"], rows[0]["hi"]) == pytest.approx((pooled["lo"] / 0.2, pooled["hi"] / 0.2))


def test_overlapping_seed_sets_and_unmatched_cells_are_errors(tmp_path):
    root = project(tmp_path, [{**CLAIM, "cells": [{"method": "mt", "mur": "direct", "mur_radius": 7}]}])
    values = {**{("none", s): 5.0 + s for s in (0, 1, 2)}, **{("direct", s): 4.0 + s for s in (0, 1, 2)}}
    write_run(root, "ablation_radius-quick-s0-2", "ablation_radius", values)
    with pytest.raises(claimlib.ClaimError, match="no finished trial is the cell"):
        docs.generated(root)
    write_run(root, "ablation_radius-quick-s2-4", "ablation_radius",
              {(m, s + 2): v for (m, s), v in values.items()})
    with pytest.raises(committed_runs.DocsError, match="share seeds"):
        docs.generated(root)
    # a --cells run of another cell (random) beside the baseline on seeds 2-4 is no second copy: it may stay
    shutil.rmtree(root / "docs" / "runs" / "ablation_radius-quick-s2-4")
    write_run(root, "ablation_radius-quick-s2-4", "ablation_radius",
              {(m, s): 5.0 + s for m in ("none", "random") for s in (2, 3, 4)})
    with pytest.raises(claimlib.ClaimError, match="no finished trial is the cell"):
        docs.generated(root)


def test_check_reports_a_hand_edited_generated_file(tmp_path):
    root = project(tmp_path, [CLAIM])
    assert claims_figure.FIGURE in docs.write(root)
    assert docs.stale(root) == [] and docs.write(root) == []
    (root / "docs" / "RESULTS.md").write_text((root / "docs" / "RESULTS.md").read_text() + "typed by hand\n")
    assert docs.stale(root) == [Path("docs/RESULTS.md")]


def test_check_reports_a_claims_figure_drawn_from_other_grades(tmp_path):
    """docs/claims.png names the rows drawn in it: a second committed run grades the pending claim,
    so the rows the committed figure names differ from the grades; a PNG naming other rows, or none, is stale too."""
    from study.picture import with_text_chunk

    root = project(tmp_path, [CLAIM])
    (root / "sweeper").mkdir()  # where the price table of the committed runs goes
    write_run(root, "ablation_radius-quick-s0-2", "ablation_radius",
              {(m, s): 5.0 + s - (m == "direct") for m in ("none", "direct") for s in (0, 1, 2)})
    docs.write(root)
    write_run(root, "ablation_radius-quick-s3-5", "ablation_radius",
              {(m, s): 5.0 + s * (1 + 0.1 * (m == "direct")) for m in ("none", "direct") for s in (3, 4, 5)})
    assert claims_figure.FIGURE in docs.stale(root)
    docs.write(root)
    png = (root / claims_figure.FIGURE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and docs.stale(root) == []
    rows = claims_figure.figure_rows(docs.committed(root)[1])
    assert len(rows) == 1 and claims_figure.is_current(root, rows)
    other = with_text_chunk(claims_figure.draw(rows), claims_figure.HASH_KEY, b"0" * 64)
    (root / claims_figure.FIGURE).write_bytes(other)
    assert docs.stale(root) == [claims_figure.FIGURE]
    (root / claims_figure.FIGURE).write_bytes(claims_figure.draw(rows))
    assert docs.stale(root) == [claims_figure.FIGURE]


def test_the_claims_figure_holds_one_row_per_graded_comparison_in_units_of_the_declared_effect():
    """Every comparison of every graded claim is one row of docs/claims.png, its Δ and interval the pooled
    ones study/claims.py graded divided by the claim's declared size; untestable claims hold none."""
    _, graded = docs.committed()
    rows = claims_figure.figure_rows(graded)
    views = [(c, v) for c, g in graded if g is not None and g["verdict"] is not None for v in g["cells"]]
    assert len(rows) == len(views) and len(rows) > len(docs.load_claims()) - 6
    by = {(r["claim"], r["cell"]): r for r in rows}
    assert len(by) == len(rows)
    for c, v in views:
        label = claims_figure.cell_labels(c)[c["cells"].index(v["cell"])]
        r, size = by[c["claim"], label], claimlib.size(c)
        assert (r["d"], r["lo"], r["hi"]) == (v["pooled"]["d"] / size, v["pooled"]["lo"] / size,
                                              v["pooled"]["hi"] / size)
        assert (r["verdict"], r["direction"], r["n"]) == (v["verdict"], c["direction"], v["pooled"]["n"])
        assert r["group"] == claims_figure.paper_ref(c["source"])
    groups = [r["group"] for r in rows]
    assert groups == sorted(groups, key=claims_figure.group_order)  # each group's rows together
    untestable = sum(g is None for _, g in graded)
    assert f"(the {untestable} not testable here hold none and are left out)" in claims_figure.caption(graded)
    assert claims_figure.is_current(ROOT, rows)


@pytest.mark.parametrize("source, ref", [
    ("Tables 1, 2", "Tables 1, 2"), ("Table 2 (500, 1000 labels)", "Table 2"),
    ("Fig. 3(c) (read off the figure)", "Fig. 3(c)"), ("appendix, FixMatch (13.45 vs 5.07)", "appendix, FixMatch"),
    ("Fig. MUT (text: 3.58 vs 5.18)", "Fig. MUT"), ("not the paper's", "ours (not the paper's)"),
])
def test_a_claims_paper_reference_is_its_source_without_the_note(source, ref):
    assert claims_figure.paper_ref(source) == ref


def test_the_figure_groups_run_tables_figures_appendix_then_ours():
    refs = ["ours (not the paper's)", "appendix", "Fig. MUT", "Fig. 4(a)", "Fig. 3(c)", "Table 3", "Table 1",
            "Tables 1, 2"]
    assert sorted(refs, key=claims_figure.group_order) == refs[::-1]


def test_a_cell_label_names_the_keys_in_which_a_claims_cells_differ():
    claim = {"cells": [{"method": "mt", "vd": True, "mur": "none"}, {"method": "mt", "vd": False, "mur": "direct"}]}
    assert claims_figure.cell_labels(claim) == ["vd=True, mur=none", "vd=False, mur=direct"]
    assert claims_figure.cell_labels({"cells": [{"method": "mt"}]}) == [""]


def test_add_copies_a_finished_results_folder_with_its_machine(tmp_path):
    import pandas as pd

    exp = tmp_path / "results" / "ablation_radius-20000101-000000"
    exp.mkdir(parents=True)
    (exp / "sweep.json").write_text(json.dumps({"name": "ablation_radius", "preset": "quick",
                                                "base": {"method": "mt", "lr": 0.1},
                                                "variants": [{"mur": "none"}, {"mur": "direct"}],
                                                "argv": ["/x/sweeper/run.py", "ablation_radius", "--preset", "quick"]}))
    (exp / "summary.csv").write_text("method,seeds\nmt,\"3,4,5\"\nlabelspreading,\"3,4,5\"\n")
    (exp / "table.md").write_text("| t |\n")
    (exp / "paired_diffs.png").write_bytes(b"\x89PNG")
    pd.DataFrame({"mur": ["none", "direct"], "lr": [0.1, 0.1], "seed": [3, 3], "status": ["finished"] * 2,
                  "trial_dir": ["/x/a", "/x/b"], "final_test_error": [5.0, 4.25],
                  "wall_time_s": [90.0, float("nan")]}).to_parquet(exp / "trials.parquet")  # a trial with no time
    (exp / "optuna.db").write_bytes(b"big")  # not a committed file
    (exp / "live.json").write_text(json.dumps({"state": "ended", "updated": 0.0, "load_avg": [1.0, 4.0]}))
    dest = committed_runs.add(exp, root=tmp_path)
    assert dest == tmp_path / "docs" / "runs" / "ablation_radius-quick-s3-5"
    assert sorted(p.name for p in dest.iterdir()) == ["machine.json", "paired_diffs.png", "summary.csv",
                                                       "sweep.json", "table.md", "trials.csv", "trials.parquet"]
    # the per-seed values the claims read: varying keys, seed, status, final metrics; no machine paths
    assert (dest / "trials.csv").read_text().splitlines() == [
        "mur,seed,status,final_test_error,wall_time_s", "direct,3,finished,4.25,", "none,3,finished,5,90"]
    m = json.loads((dest / "machine.json").read_text())
    assert m["command"] == "python -m sweeper.run ablation_radius --preset quick"
    assert m["cores"] >= 1 and m["cpu"] and m["torch"] and m["wall_min"] >= 0
    assert m["load_avg"] == {"mean": 2.5, "max": 4.0, "samples": 2}  # what the driver's heartbeats saw
    assert (m["trials"], m["trial_min"]) == (2, 1.5)  # the trials' own times summed: 90 s
    # another sweep's run: trials.csv and summary.csv hold its numbers; the page inputs stay behind
    meta = json.loads((exp / "sweep.json").read_text())
    (exp / "sweep.json").write_text(json.dumps({**meta, "name": "table_svhn"}))
    (exp / "table.csv").write_text("t\n")
    other = committed_runs.add(exp, root=tmp_path)
    assert other.name == "table_svhn-quick-s3-5" and not {"trials.parquet", "table.csv"} & {p.name for p in other.iterdir()}
    with pytest.raises(committed_runs.DocsError, match="no table.md"):
        (exp / "table.md").unlink()
        committed_runs.add(exp, root=tmp_path)
    (exp / "table.md").write_text("t\n")
    (exp / "trials.parquet").unlink()  # trials.csv and machine.json's trial time come from it
    with pytest.raises(committed_runs.DocsError, match="no trials.parquet; give a finished local results folder"):
        committed_runs.add(exp, root=tmp_path)


def test_add_never_replaces_another_committed_run_over_the_same_seeds(tmp_path):
    """Two `--cells` runs over seeds 3-4 (different cells, one folder name) both stay committed, and the
    second does not overwrite the first's trials; adding a run again (same command, same commit)
    refreshes its own folder instead of making a third."""
    import pandas as pd

    def results(name, cells, errors):
        exp = tmp_path / "results" / name
        exp.mkdir(parents=True)
        (exp / "sweep.json").write_text(json.dumps({
            "name": "ablation_radius", "preset": "quick", "base": {"method": "mt"}, "commit": "c" * 40,
            "variants": [{"mur": "none"}, {"mur": "direct"}],
            "argv": ["/x/run.py", "ablation_radius", "--preset", "quick", "--cells", cells, "--storage", "/x"]}))
        (exp / "summary.csv").write_text("method,seeds\nmt,\"3,4\"\n")
        (exp / "table.md").write_text("| t |\n")
        pd.DataFrame({"mur": ["none", "direct"], "method": ["mt", "mt"], "seed": [3, 3], "status": ["finished"] * 2,
                      "final_test_error": errors, "wall_time_s": [1.0, 1.0]}).to_parquet(exp / "trials.parquet")
        return exp

    first = committed_runs.add(results("a", "mur=none", [5.0, 4.0]), root=tmp_path)
    kept = (first / "trials.csv").read_text()
    second = committed_runs.add(results("b", "mur=direct", [6.5, 7.5]), root=tmp_path)
    assert (first.name, second.name) == ("ablation_radius-quick-s3-4", "ablation_radius-quick-s3-4-2")
    assert (first / "trials.csv").read_text() == kept and ",4," in kept
    assert ",6.5," in (second / "trials.csv").read_text()
    (second / "trials.csv").write_text("stale\n")
    assert committed_runs.add(tmp_path / "results" / "b", root=tmp_path) == second  # the same run again
    assert ",6.5," in (second / "trials.csv").read_text()
    assert sorted(p.name for p in (tmp_path / "docs" / "runs").iterdir()) == [first.name, second.name]


def test_a_key_every_cell_of_a_run_shares_is_found_though_trials_csv_leaves_it_out(tmp_path):
    """A --cells run whose cells all have mur=none (MT and MT + VD), a key its base leaves out: trials.csv
    holds only vd, the key its trials vary, and the claims still find the cell {"mur": "none"} (read from
    the row's variant in sweep.json), with the value that trial ran."""
    import pandas as pd

    from study import claims as claimlib

    exp = tmp_path / "results" / "few_labels-20000101-000000"
    exp.mkdir(parents=True)
    (exp / "sweep.json").write_text(json.dumps({
        "name": "few_labels", "preset": "quick", "base": {"lr": 0.1},
        "variants": [{"method": "mt", "vd": False, "mur": "none"}, {"method": "mt", "vd": True, "mur": "none"}],
        "argv": ["/x/run.py", "few_labels", "--preset", "quick", "--cells", "vd=true"]}))
    (exp / "summary.csv").write_text("method,seeds\nmt,\"3\"\n")
    (exp / "table.md").write_text("| t |\n")
    pd.DataFrame({"method": ["mt", "mt"], "vd": [False, True], "mur": ["none", "none"], "lr": [0.1, 0.1],
                  "seed": [3, 3], "status": ["finished"] * 2, "final_test_error": [9.0, 5.5],
                  "wall_time_s": [1.0, 1.0]}).to_parquet(exp / "trials.parquet")
    dest = committed_runs.add(exp, root=tmp_path)
    assert (dest / "trials.csv").read_text().splitlines() == [
        "vd,seed,status,final_test_error,wall_time_s", "False,3,finished,9,1", "True,3,finished,5.5,1"]
    run = committed_runs.read_run(dest)
    cell = {"method": "mt", "vd": True, "mur": "none"}
    assert claimlib.values(run["trials"], run["configs"], cell, "test_error", "x") == {3: 5.5}
    assert claimlib.values(run["trials"], run["configs"], {**cell, "mur": "direct"}, "test_error", "x") == {}


def test_add_refuses_trials_that_left_their_sweeps_definition_and_writes_nothing(tmp_path):
    """A --set that changes what trials do (steps here) would make trials.csv, which records only the keys a
    sweep varies, pass them off as the sweep's own cells; one that changes no number (data_dir) is fine."""
    import pandas as pd

    exp = tmp_path / "results" / "ablation_radius-20000101-000000"
    exp.mkdir(parents=True)
    (exp / "sweep.json").write_text(json.dumps({"name": "ablation_radius", "preset": "quick",
                                                "base": {"method": "mt", "steps": 1000},
                                                "variants": [{"mur": "none"}, {"mur": "direct"}], "argv": []}))
    (exp / "summary.csv").write_text("method,seeds\nmt,\"3\"\n")
    (exp / "table.md").write_text("| t |\n")
    rows = {"mur": ["none", "direct"], "method": ["mt", "mt"], "seed": [3, 3], "status": ["finished"] * 2,
            "data_dir": ["/elsewhere", "/elsewhere"], "final_test_error": [5.0, 4.25], "wall_time_s": [1.0, 1.0]}
    pd.DataFrame({**rows, "steps": [1000, 1000]}).to_parquet(exp / "trials.parquet")
    assert committed_runs.add(exp, root=tmp_path / "ok").is_dir()
    pd.DataFrame({**rows, "steps": [30, 30]}).to_parquet(exp / "trials.parquet")
    with pytest.raises(committed_runs.DocsError, match="ran steps=30 where sweep ablation_radius sets 1000"):
        committed_runs.add(exp, root=tmp_path)
    assert not (tmp_path / "docs").exists()


def test_a_committed_command_drops_the_machines_paths_but_keeps_every_other_argument():
    from study.committed_runs import public_args
    argv = ["/home/u/p/sweeper/run.py", "ablation_radius", "--storage", "/tmp/r", "--preset", "quick",
            "--storage=s3://b/p", "--seed-start", "8"]
    assert public_args(argv) == ["ablation_radius", "--preset", "quick", "--seed-start", "8"]


# ---------------------------------------------------------------- what the docs state about the CLI equals the code

def _codes(text: str) -> list[int]:
    """The codes of an exit-status list written as `0 ...; 1 ...; 2 ...` (the first digit of each clause)."""
    return [int(m) for m in re.findall(r"(?:^|[;:]|,)\s*(\d) (?=[a-zA-Z(])", text)]


def test_the_exit_codes_the_docs_list_are_the_ones_run_returns():
    from sweeper import run

    assert run.EXIT_CODES == tuple(range(len(run.EXIT_CODES)))
    arch = re.search(r"\| `run\.py` \|.*exit status ([\d/]+)", (ROOT / "docs" / "ARCHITECTURE.md").read_text())
    assert arch and [int(c) for c in arch.group(1).split("/")] == list(run.EXIT_CODES)
    usage = (ROOT / "docs" / "USAGE.md").read_text()
    para = usage.split("**Exit status**:", 1)[1].split("\n\n", 1)[0]
    assert _codes(para) == list(run.EXIT_CODES), para
    doc = run.__doc__.split("Exit status:", 1)[1].split("\n\n", 1)[0]
    assert _codes(doc) == list(run.EXIT_CODES), doc
    # every code run.py returns is a named one
    src = (ROOT / "sweeper" / "run.py").read_text()
    assert not re.search(r"return \d\b", src), "return a named EXIT_* code"


def test_exit_code_parser_reads_a_planted_list():
    assert _codes("0 every trial finished; 1 some trial failed; 2 bad input") == [0, 1, 2]


# options whose default the code computes at run time, so the parser's own default is None or a stand-in
COMPUTED_DEFAULTS = {"--preset", "--data-dir", "--address", "--gpus-per-trial", "--seed-start"}


def test_the_defaults_usage_states_are_the_parsers():
    from sweeper import run
    from sweeper.driver.tuner import MAX_FAILURES

    parser = run.parser()
    defaults = {a.option_strings[0]: a.default for a in parser._actions if a.option_strings}
    defaults["--max-failures"] = MAX_FAILURES  # None in the parser: a resume must tell it apart from a given value
    table = (ROOT / "docs" / "USAGE.md").read_text().split("## Options of", 1)[1].split("\n\n", 2)[1]
    checked = 0
    for line in table.splitlines():
        m = re.match(r"\| `(--[\w-]+)[^`]*` \| (.*)\|$", line)
        stated = m and re.search(r"\(default `?([^`;,)]+)`?[;,)]", m.group(2))
        if not stated or m.group(1) in COMPUTED_DEFAULTS:
            continue
        want, have = stated.group(1).strip(), defaults[m.group(1)]
        assert want == str(have) or (isinstance(have, float) and float(want) == have), (m.group(1), want, have)
        checked += 1
    assert checked >= 2  # --storage, --live-every at least


def test_the_seeds_help_names_no_number_since_sweeps_differ():
    from sweeper import run
    from search_spaces import presets

    seeds = {get_sweep(n, p).seeds for n in names() for p in presets(n)}
    assert len(seeds) > 1  # a single number in the help would be wrong for some sweep
    helps = {a.option_strings[0]: a.help for a in run.parser()._actions if a.option_strings}
    assert "the sweep's own" in helps["--seeds"] and not re.search(r"\d", helps["--seeds"])


# ---------------------------------------------------------------- no measured number typed into the code
#
# A duration, speed or error typed into a comment, docstring or string of sweeper/, trainables/ or
# search_spaces/ goes stale with the next change of code or machine; measured numbers live in committed
# result files (docs/runs/, benchmarks/results/) and the Markdown generated from them. Flagged: a number
# followed by a unit of time (µs / us, ms, s, min, h, GPU-h, H100-hours, ...), speed (steps/s, images/s, "8x slower")
# or a percentage. Allowed, by one narrow rule: a line that states a setting, i.e. that contains one of
# SETTING_WORDS (a timeout, a wait between retries, a save period, a budget, a default, a ramp-up fraction),
# and the 95 % confidence level the tables use.

MEASURED = re.compile(r"(?<![\w.:])\d(?:[\d.]*\d)?(?:\s*-\s*\d(?:[\d.]*\d)?)?\s*"
                      r"(?:ns|us|µs|μs|ms|s|sec|seconds?|min|minutes?|h|hours?|\w+-hours?|\w+-min|GPU-h|steps/s|images/s|it/s|%"
                      r"|[x×] (?:slower|faster))(?=$|[\s),;.:\]])")
SETTING_WORDS = re.compile(r"\b(?:every|timeout\w*|wait\w*|retr\w*|period|budget\w*|at most|at least|default\w*|"
                           r"ramp\w*)\b|\b95 ?%", re.I)
CODE_DIRS = ("sweeper", "trainables", "search_spaces")


def measured_numbers(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment or string line of `source` that states a measured number."""
    import io
    import tokenize

    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            for i, line in enumerate(tok.string.splitlines()):
                if MEASURED.search(line) and not SETTING_WORDS.search(line):
                    out.append((tok.start[0] + i, line.strip()))
    return out


def _code_files():
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", _code_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measured_number_in_the_code(path):
    assert measured_numbers(path.read_text()) == [], f"{path.relative_to(ROOT)}: move it to a committed result file"


@pytest.mark.parametrize("planted", [
    '"""Quick preset: 8 rows x 5 seeds, 14.3 min measured on 2 CPU cores."""\n',
    "x = 1  # MT+MUR runs at 25 steps/s on one GPU\n",
    "x = 1  # about 3 GPU-hours per trial\n",
    "x = 1  # a batch-100 step takes 10 ms\n",
    "x = 1  # the walk costs ~150 us of host time\n",
    "x = 1  # one launch is 5 µs\n",
    "x = 1  # LabelSpreading's error is ~2.5 % on digits\n",
    "x = 1  # NCHW max-pool is ~8x slower\n",
    'p.add_argument("--dashboard", help="costs ~2 s at start")\n',
])
def test_a_planted_measured_number_fails(planted):
    assert len(measured_numbers(planted)) == 1


@pytest.mark.parametrize("setting", [
    "RETRY_FIRST_WAIT_S = 0.05  # the SDK waits 50 ms, 100 ms, ... between attempts\n",
    "x = 1  # checkpoints at most every 10 s\n",
    "x = 1  # LR ramp-up 10 % of the run\n",
    '"""Each cell with its 95 % t-interval."""\n',
    'print(f"{x:.1%} of {n:>5.0f} trials, 8 rows x 5 seeds, 8x8 digits, s=8")\n',
])
def test_a_setting_or_a_format_is_not_a_measured_number(setting):
    assert measured_numbers(setting) == []


def test_performance_shows_the_measured_code_not_a_comparison_with_an_older_one():
    d = {"machine": "Test CPU", "before_commit": "a" * 40, "after_commit": "b" * 40, "steps": 50, "rounds": 7,
         "rows": [{"variant": "MT", "steps_per_s_before": 11.0, "steps_per_s_after": 80.0, "speedup": 7.27},
                  {"variant": "MT+MUR", "steps_per_s_before": 13.0, "steps_per_s_after": 20.0, "speedup": 1.54}]}
    text = "\n".join(benchmark_docs.cpu_step_md("x.json", d))
    assert "| MT+MUR | 20.00 | 4.00× |" in text  # 80 / 20: its step against MT's, from the same rounds
    assert "11.00" not in text and "7.27" not in text and "aaaaaaa" not in text and "commit bbbbbbb" in text
    scale = {"machine": "m", "date": "d", "sweep": "s", "after_commit": "c" * 40,
             "sizes": {"after": [{"trials": 50, "wall_s": 1.0}, {"trials": 500, "wall_s": 3.0}],
                       "before": [{"trials": 50, "wall_s": 9.0}, {"trials": 500, "wall_s": 99.0}]},
             "growth": {"after": {"wall_s": 3.0}, "before": {"wall_s": 11.0}}}
    text = "\n".join(benchmark_docs.scale_md("y.json", scale))
    assert "**3.00×**" in text and "99.00" not in text and "11.00×" not in text
    performance = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    assert not re.search(r"\bagainst commit\b|steps/s at [0-9a-f]{7}|\| before \|", performance)


def test_the_readme_install_block_comes_from_its_result_file(tmp_path):
    root = project(tmp_path, [CLAIM])
    readme = docs.generated(root)[Path("README.md")]
    assert "no `benchmarks/results/install.json` committed" in readme
    (root / "benchmarks" / "results" / "install.json").write_text(json.dumps({
        "machine": "Test CPU", "python": "3.0", "torch": "9.9", "date": "2000-01-01", "venv_command": "du -sm .venv",
        "venv_mib": 3072, "venv_largest_mib": {"a": 1, "b": 3, "c": 2, "d": 0}, "test_suite_s": 1500,
        "test_suite_source": "a made-up run"}))
    made = docs.generated(root)
    readme = made[Path("README.md")]
    assert "takes 3.0 GiB (`du -sm .venv`), most of it torch's CUDA stack (b 3 MiB, c 2 MiB, a 1 MiB)" in readme
    assert "every test took 25 min (1,500 s), a made-up run." in readme  # 1500 s / 60
    assert "the fast tests' time is not measured yet" in readme
    d = json.loads((root / "benchmarks" / "results" / "install.json").read_text())
    d["fast_suite"] = {"command": 'python -m pytest -q -m "not slow"', "wall_s": 150, "counts": "9 passed",
                       "machine": "Test CPU, 2 cores", "date": "2000-01-02", "load_avg_before": 0.25}
    (root / "benchmarks" / "results" / "install.json").write_text(json.dumps(d))
    readme = docs.generated(root)[Path("README.md")]
    assert "9 passed) took 2.5 min (150 s) on Test CPU, 2 cores (2000-01-02, load average 0.2 before)" in readme
    assert "install.json" not in made[Path("docs/PERFORMANCE.md")]  # one home: the README


def test_the_job_stop_and_real_seeds_auto_tables_come_from_their_files():
    stop = {"benchmark": "job_stop", "test": "t", "machine": "Test CPU, 2 CPUs", "load_avg_before": 1.5,
            "load_avg_after": 2.0, "test_wall_s": 99.0,
            "stops": [{"stop_wait_s": 3, "sigterm_to_driver_end_s": 2.94, "finished_at_stop": 1, "ended": "SIGKILLed"},
                      {"stop_wait_s": 60, "sigterm_to_driver_end_s": 17.0, "finished_at_stop": 2, "ended": "on its own"}]}
    text = "\n".join(benchmark_docs.job_stop_md("s.json", stop))
    assert "| 3 | 2.9 | 1 | SIGKILLed |" in text and "| 60 | 17.0 | 2 | on its own |" in text
    assert "load average 1.5 before and 2 after" in text
    real = {"benchmark": "seeds_auto_real", "runs": [{
        "sweep": "ablation_radius", "preset": "quick", "max_seeds": 8, "fixed_runs": ["r"],
        "trials": {"fixed": 40, "auto": 30}, "wall_min": {"fixed": 8.0, "auto": 6.0}, "shared_trials": 30,
        "shared_trials_equal": 30,
        "cells": [{"cell": {"method": "mt", "r": 1}, "seeds_fixed": 8, "seeds_auto": 3,
                   "fixed": {"diff": -1.0, "lo": -1.5, "hi": -0.5, "status": "differs"},
                   "auto": {"diff": -1.2, "lo": -2.0, "hi": -0.4, "status": "differs"},
                   "agree": True, "opposite": False}]}]}
    text = "\n".join(benchmark_docs.seeds_auto_real_md("a.json", real))
    assert "trials 30 auto against 40 fixed (75%)" in text and "30 of 30 such trials have equal errors" in text
    assert "| method mt, r 1 | 8, -1.00 [-1.50, -0.50] | differs | 3, -1.20 [-2.00, -0.40] | differs | yes |" in text


def test_the_real_seeds_auto_comparison_calls_agreement_by_decision_and_direction():
    import importlib.util
    spec = importlib.util.spec_from_file_location("seeds_auto_real", ROOT / "benchmarks" / "seeds_auto_real.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    row = lambda d, lo, hi, verdict: {"diff_vs_baseline": d, "diff_ci_low": lo, "diff_ci_high": hi, "n_paired": "8",
                                      "verdict": verdict}
    base = {s: 5.0 for s in range(8)}
    cell = {s: 5.0 - 1.0 + 0.1 * (-1) ** s for s in range(8)}  # differences -0.9, -1.1, ...: mean -1, sd 0.107
    fixed = mod.paired(cell, base)
    half = 2.364624 * 0.1069045 / 8 ** 0.5  # t(0.975, 7) x sd / sqrt(8), by hand
    assert fixed["status"] == "differs" and fixed["lo"] == pytest.approx(-1 - half, abs=1e-3) and fixed["pairs"] == 8
    assert mod.paired({0: 1.0, 1: 3.0, 2: 2.0}, {0: 2.0, 1: 2.0, 2: 2.0})["status"] == "open"
    assert mod.decision({"diff_ci_low": ""}) == {}  # the baseline row
    assert mod.compare(fixed, mod.decision(row("-1", "-2", "-0.1", "differs at 3 seeds"))) == (True, False)
    assert mod.compare(fixed, mod.decision(row("-1", "-2", "0.3", "capped at 8 seeds"))) == (False, False)
    assert mod.compare(fixed, mod.decision(row("1", "0.2", "2", "differs at 5 seeds"))) == (False, True)
    assert mod.compare({"diff": 0.1, "status": "open"}, mod.decision(row("0", "-2", "2", "capped at 8 seeds"))) \
        == (True, False)  # neither decided


# ---------------------------------------------------------------- what the docs say of the sweeps and the cache

STEPS = re.compile(r"(?<![\w^.,])(\d[\d,_]*)\s+steps\b")


def _preset_steps(sweep: str, preset: str) -> set[int]:
    return {int(t["steps"]) for t in get_sweep(sweep, preset).trials(seeds=1)}


def test_the_quick_presets_steps_usage_states_are_the_sweeps():
    """USAGE's quick bullet names the step counts the quick presets run, no other."""
    from search_spaces import presets

    usage = (ROOT / "docs" / "USAGE.md").read_text()
    bullet = usage.split("- **quick**:", 1)[1].split("\n- **", 1)[0]
    stated = {int(n.replace(",", "").replace("_", "")) for n in STEPS.findall(bullet)}
    run = set().union(*(_preset_steps(n, "quick") for n in names() if "quick" in presets(n)))
    assert stated == run, f"USAGE's quick bullet says {sorted(stated)} steps; the quick presets run {sorted(run)}"


def test_a_sweeps_docstring_command_states_its_presets_steps():
    """A command line of a sweep's docstring that says how many steps its trials run says what they run."""
    import importlib

    from search_spaces import default_preset

    checked = 0
    for name in names():
        for line in (importlib.import_module(f"search_spaces.{name}").__doc__ or "").splitlines():
            if "python -m sweeper.run" not in line or "--resume" in line or "--set" in line:
                continue
            preset = re.search(r"--preset (\w+)", line)
            for n in STEPS.findall(line):
                steps = _preset_steps(name, preset.group(1) if preset else default_preset(name))
                assert steps == {int(n.replace(",", "").replace("_", ""))}, (name, line.strip(), steps)
                checked += 1
    assert checked >= 1  # hpo's quick line at least


def test_the_step_count_reader_finds_a_planted_count_but_not_a_power():
    assert STEPS.findall("digits, 12 samples of 1500 steps; 3 x 3 trials of 2^20 steps; 280,000 steps") == \
        ["1500", "280,000"]


def test_the_report_cache_usage_lists_is_what_storage_copies():
    """USAGE names the files `sweeper.report URI` copies into its cache: exactly storage.REPORT_INPUTS and
    Tune's experiment state, and no model weights, which it never copies."""
    from sweeper import storage
    from trainables.files import CKPT

    usage = (ROOT / "docs" / "USAGE.md").read_text()
    bullet = usage.split("copies\n  the experiment's small files", 1)[1].split("\n- ", 1)[0]
    copied = bullet.split(") into", 1)[0]
    listed = set(re.findall(r"`([^`]+)`", copied))
    if "error.*" in listed:
        listed = listed - {"error.*"} | {"error.txt", "error.pkl"}
    assert listed == set(storage.REPORT_INPUTS) | {"experiment_state-*.json"}
    weights = re.search(r"(never )?the model weights", copied)
    assert CKPT not in storage.REPORT_INPUTS and (weights is None or weights.group(1)), copied


def test_the_readme_marks_every_sweep_without_a_paper_preset():
    """The README's sweep table says "quick only" exactly for the sweeps without a paper preset."""
    from search_spaces import presets

    rows = re.findall(r"^\| `([^|]+)` \| (.*) \|$", (ROOT / "README.md").read_text().split("## Sweeps", 1)[1],
                      re.M)
    seen = set()
    for cell, text in rows:
        for name in re.findall(r"\w+", cell.replace("`", "")):
            seen.add(name)
            assert text.startswith("quick only") == ("paper" not in presets(name)), (name, text)
    assert seen == set(names())


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_the_docs_say_every_sweep_has_every_sweep_has(path):
    """A preset named right after "every sweep" ("every sweep with a `quick` preset") is one of every sweep."""
    from search_spaces import presets

    for said in re.finditer(r"[Ee]very sweep\b([^(;,.]*)", path.read_text()):
        for preset in re.findall(r"`(\w+)`", said.group(1)):
            lacking = [n for n in names() if preset not in presets(n)]
            assert not lacking, f"{path.name}: {said.group(0)!r}, but {lacking} have no {preset!r} preset"


def test_the_quick_trial_profile_table_comes_from_its_file():
    prof = {"benchmark": "profile_quick", "machine": "Test CPU, 2 cores, 1 thread", "torch_version": "9.9",
            "matmul_gflops_1thread": 50.0, "load_1min_before": 1.0, "load_1min_after": 2.0, "steps": 10,
            "ray_overhead_file": "benchmarks/results/ray_overhead_cpu.json",
            "rows": [{"kind": "MT", "step_s": 0.02, "parts_sum_step_s": 0.019, "gflop_per_step": 0.4,
                      "gflops_achieved": 20.0, "peak_ratio": 0.4, "trial_total_s": 25.0,
                      "trial_s": {"forward": 12.0, "backward": 8.0, "start-up": 5.0}},
                     {"kind": "LabelSpreading", "trial_total_s": 8.0, "trial_s": {"whole": 3.0, "start-up": 5.0}}]}
    text = "\n".join(benchmark_docs.profile_quick_md("p.json", prof))
    assert "| part, s per trial | MT | LabelSpreading |" in text
    assert "| forward | 12.00 |  |" in text and "| start-up | 5.00 | 5.00 |" in text
    assert "| **total** | **25.0** | **8.0** |" in text and "matmul: 50.0 GFLOP/s" in text
    assert "| MT | 20.00 | 19.00 | 0.400 | 20.0 | 0.40 |" in text


def test_a_result_file_that_names_its_benchmark_lands_in_that_benchmarks_section(tmp_path):
    """Rows that carry steps_per_s like trainer_throughput's: the file's `benchmark` decides, not its shape."""
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "profile_quick_test.json").write_text(json.dumps({
        "benchmark": "profile_quick", "machine": "Test CPU, 2 cores, 1 thread", "torch_version": "9.9",
        "matmul_gflops_1thread": 50.0, "load_1min_before": 1.0, "load_1min_after": 2.0, "steps": 10,
        "ray_overhead_file": "benchmarks/results/ray_overhead_cpu.json",
        "rows": [{"kind": "MT", "steps_per_s": 50.0, "step_s": 0.02, "parts_sum_step_s": 0.019,
                  "gflop_per_step": 0.4, "gflops_achieved": 20.0, "peak_ratio": 0.4, "trial_total_s": 25.0,
                  "trial_s": {"forward": 12.0, "start-up": 5.0}}]}))
    text = benchmark_docs.performance_md(tmp_path)
    section = text.split("## Where a quick trial's time goes", 1)[1]
    assert "| **total** | **25.0** |" in section
    assert "## Trainer throughput" not in text


def _cells_of(row: str) -> list[str]:
    """A Markdown table row's cells: split at the pipes that are not escaped."""
    return re.split(r"(?<!\\)\|", row.strip()[1:-1])


def _shell_words(command: str) -> list[str]:
    """A command line's words as a POSIX shell reads them, its control operators ('|', ';', '&') words of
    their own, so an unquoted pipe shows."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def test_each_runs_command_pastes_into_a_shell_as_it_ran():
    """RESULTS.md's and machine.json's command line of every committed run, read as a shell reads it, is
    the run's own arguments: a --cells value with '|' is quoted, not a pipe."""
    from study.committed_runs import public_args

    runs = [committed_runs.read_run(p) for p in committed_runs.run_dirs()]
    assert any("|" in a for r in runs for a in r["meta"].get("argv") or [])
    assert _shell_words("python -m sweeper.run t --cells a=1|b=2")[-3:] == ["a=1", "|", "b=2"]  # seen unquoted
    for run in runs:
        argv = run["meta"].get("argv") or []
        if argv:
            assert _shell_words(docs.run_command(run))[3:] == public_args(argv), run["name"]
            assert _shell_words(run["machine"]["command"])[3:] == public_args(argv), run["name"]


def test_the_cost_table_escapes_the_pipe_of_cells_alternatives(tmp_path):
    """A --cells value with alternatives ("a|b") stays inside its column: the row keeps 7 cells."""
    run = {"sweep": "table_svhn", "seeds": [36, 145], "name": "table_svhn-quick-s36-145",
           "machine": {"wall_min": 90.0, "trial_min": 180.0, "cpu": "AMD EPYC"},
           "meta": {"n_trials": 330, "argv": ["run.py", "table_svhn", "--cells",
                                              "vd=true,mur=none|vd=false,mur=direct", "--seeds", "110"]}}
    row = docs.cost_md([run], tmp_path)[-1]
    cells = [c.strip() for c in _cells_of(row)]
    assert len(cells) == 7 and cells[2] == "fixed, --cells vd=true,mur=none\\|vd=false,mur=direct"
    assert cells[3] == "330" and cells[5] == "180.0"


def test_the_sweep_by_sweep_costs_sum_the_runs_and_leave_untimed_runs_out_of_trial_min(tmp_path):
    """Two runs of a (25 + 40 trials, 4.0 + 6.5 wall min, trial-min only on the first: 7.5), one of b
    (10 trials, 2.0 min, none timed: a blank, not 0); all: 75 trials, 12.5 min, 7.5 trial-min from 1 run."""
    def run(sweep, name, n, wall, cpu=None):
        m = {"wall_min": wall, **({"trial_min": cpu} if cpu is not None else {})}
        return {"sweep": sweep, "name": name, "machine": m, "meta": {"n_trials": n}}

    rows = docs.sweep_cost_md([run("b", "b-1", 10, 2.0), run("a", "a-1", 25, 4.0, 7.5), run("a", "a-2", 40, 6.5)],
                              tmp_path)
    body = [[c.strip() for c in _cells_of(r)] for r in rows[4:]]
    assert body == [["`a`", "2", "65", "10.5", "7.5", "1"], ["`b`", "1", "10", "2.0", "", "0"],
                    ["**all**", "3", "75", "12.5", "7.5", "1"]]


def test_the_cost_table_holds_each_committed_runs_trials_and_trial_time():
    """RESULTS.md's cost rows against each run's own files: trials = trials.csv's rows, wall and trial
    minutes = machine.json's, how = --seeds auto exactly where the recorded command says so."""
    import csv

    runs = [committed_runs.read_run(p) for p in committed_runs.run_dirs()]
    rows = docs.cost_md(runs, committed_runs.ROOT)[4:]
    assert len(rows) == len(runs)
    by_key = {}  # (sweep, seeds, --cells of the how column) -> its row; --cells runs may share a seed span
    for r in rows:
        c = [x.strip().replace("\\|", "|") for x in _cells_of(r)]
        by_key[(c[0], c[1], c[2].partition(", --cells ")[2])] = r
    assert len(by_key) == len(rows)
    for run in runs:
        folder = committed_runs.ROOT / "docs" / "runs" / run["name"]
        with open(folder / "trials.csv", newline="") as f:
            n = sum(1 for _ in csv.DictReader(f))
        m = json.loads((folder / "machine.json").read_text())
        words = shlex.split(m["command"])
        given = " ".join(v for a, v in zip(words, words[1:]) if a == "--cells")
        cells = [c.strip() for c in _cells_of(by_key[(f"`{run['sweep']}`", f"{run['seeds'][0]}-{run['seeds'][-1]}",
                                                      given)])]
        assert cells[2].partition(",")[0] == ("--seeds auto" if "--seeds auto" in m["command"] else "fixed"), run["name"]
        assert int(cells[3]) == n and float(cells[4]) == m["wall_min"], run["name"]
        assert cells[5] == ("" if "trial_min" not in m else f"{m['trial_min']:.1f}"), run["name"]


def test_each_committed_trials_own_time_sums_to_its_runs_trial_min():
    """trials.csv's wall_time_s (per trial) and machine.json's trial_min (the run's sum, written when it
    was added) are two records of one execution: where a run has both, they agree to the 0.1 min the
    latter is rounded to, so no run's per-trial times come from another execution of its trials."""
    runs = [committed_runs.read_run(p) for p in committed_runs.run_dirs()]
    timed = [r for r in runs if r["trials"] and "wall_time_s" in r["trials"][0]]
    assert timed, "some committed run records its trials' own times"
    for run in timed:
        total = sum(float(t["wall_time_s"] or 0) for t in run["trials"]) / 60
        assert abs(total - run["machine"]["trial_min"]) <= 0.05 + 1e-9, run["name"]


@pytest.mark.slow
def test_the_docs_and_the_dry_run_price_each_claim_cell_alike():
    """Two implementations of one price: RESULTS.md matches a claim's cell among the parsed runs
    (docs.cell_minutes), `--dry-run` its planned trial's full configuration among the trials.csv files
    (costs.config_minutes). On every timed cell of every claim they give the same trial-min."""
    from sweeper import costs

    runs = [committed_runs.read_run(p) for p in committed_runs.run_dirs()]
    compared = 0
    for c in (c for c in docs.load_claims() if c.get("testable", True)):
        mine = committed_runs.runs_of(runs, c["sweep"], c["preset"])
        own = costs.config_minutes(c["sweep"], c["preset"])
        for cell in c["cells"]:
            for x in (cell, claimlib.reference(cell, c.get("against") or {})):
                minutes = docs.cell_minutes(runs, c["sweep"], c["preset"], x)
                if minutes is None:
                    continue
                key = claimlib.configuration(mine, x, c["claim"])
                assert own[costs.config_key(key)] == pytest.approx(minutes, rel=1e-12), (c["claim"], x)
                compared += 1
    assert compared >= 10


def test_the_undecided_claims_need_lists_the_seeds_still_to_run_and_their_price():
    """Twice the seeds per half, less the pairs held, on every configuration the undecided comparisons name
    (a reference two cells share counts once): 68 per half at 106 pairs is 30 seeds x 2 cells = 60 trials.
    Each cell is priced at the mean of its committed trials' own times (finished ones that record it), else
    at the sweep's trial-min per trial over the runs that record it, (30 + 10) / (50 + 30) = 0.5. GA's
    finished timed trials took 120 s and 60 s (1.5 min), direct's 30 s (0.5 min), PGA has none (0.5)."""
    def view(cell, ref, need, n, verdict="undecided"):
        return {"verdict": verdict, "need": (need, "yes"), "pooled": {"n": n}, "cell": cell, "ref": ref}

    direct = {"mur": "direct"}
    one = ({"claim": "GA beats direct", "sweep": "ablation_mur_steps", "preset": "quick"},
           {"verdict": "undecided", "need": (68, "yes"), "cells": [view({"mur": "ga"}, direct, 68, 106)]})
    two = ({"claim": "both beat direct", "sweep": "ablation_mur_steps", "preset": "quick"},
           {"verdict": "undecided", "need": (20, "yes"),
            "cells": [view({"mur": "ga"}, direct, 20, 30), view({"mur": "pga"}, direct, 12, 10),
                      view({"mur": "x"}, direct, None, 10, verdict="yes")]})
    unknown = ({"claim": "VD matches", "sweep": "fixmatch", "preset": "quick"},
               {"verdict": "undecided", "need": (None, ""), "cells": [view({"vd": 1}, {"vd": 0}, None, 10)]})
    timed = [("ga", "finished", "120"), ("ga", "finished", "60"), ("ga", "finished", ""), ("ga", "failed", "6000"),
             ("direct", "finished", "30"), ("pga", "finished", "")]
    quick = {"sweep": "ablation_mur_steps", "preset": "quick", "trials": []}
    runs = [{**quick, "machine": {"trial_min": 30.0, "trials": 50}},
            {**quick, "machine": {"trial_min": 10.0, "trials": 30}},
            {**quick, "machine": {"trials": 40}},  # no trial times
            {**quick, "machine": {"trials": 6},
             "trials": [{"mur": m, "seed": str(i), "status": st, "wall_time_s": w}
                        for i, (m, st, w) in enumerate(timed)],
             "configs": [{"mur": m} for m, _, _ in timed]},
            {"sweep": "ablation_mur_steps", "preset": "paper", "machine": {"trial_min": 900.0, "trials": 3},
             "trials": [{"mur": "ga", "seed": "0", "status": "finished", "wall_time_s": "9000"}],
             "configs": [{"mur": "ga"}]}]  # another preset's trials price nothing here
    lines = docs.needs_md([one, two, unknown], runs)
    assert "GA beats direct (68: 30 more seeds of 2 cells, 60 trials ≈ 60 trial-min)" in lines[0]
    # max(2*20 - 30, 2*12 - 10) = 14 seeds on ga, pga and direct: 14 x (1.5 + 0.5 + 0.5)
    assert "both beat direct (20: 14 more seeds of 3 cells, 42 trials ≈ 35 trial-min)" in lines[0]
    assert lines[1] == "- `fixmatch` (no seed count follows): VD matches (?)"
    assert docs.needs_md([one], [])[0].endswith("(68: 30 more seeds of 2 cells, 60 trials)")  # no price known
    one[1]["cells"][0]["pooled"]["n"] = 140  # 70 per half, more than the 68 asked for, and still undecided
    assert docs.needs_md([one], runs)[0].endswith("(68: it holds that many already and both halves did not decide)")


def _reports(folder: Path, spans: list[tuple[float, float]], torn: bool = False) -> None:
    """A trial folder whose result.json holds one Tune report per (start, end) span."""
    folder.mkdir(parents=True)
    lines = [json.dumps({"timestamp": b, "time_this_iter_s": b - a}) for a, b in spans]
    (folder / "result.json").write_text("\n".join(lines) + ("\n{\"timestamp\": 17" if torn else "") + "\n")


def test_a_stopped_and_resumed_runs_wall_time_leaves_out_the_pause(tmp_path, monkeypatch):
    """sweep.json at t0, summary.csv at t0 + 3810 s; trials trained for 100 s, then nothing for an hour
    (the run stopped), then 100 s more after --resume: wall time 210 s = 3.5 min, paused 60 min. A
    continuous run with gaps under PAUSE_S between its trials keeps its whole span."""
    import os

    monkeypatch.setattr(committed_runs, "cpu_kernels", lambda: "AVX2")
    t0 = 1_800_000_000.0
    for name, spans, end in (("stopped", [[(t0 + 10, t0 + 55), (t0 + 55, t0 + 100)],
                                          [(t0 + 3700, t0 + 3750), (t0 + 3750, t0 + 3800)]], t0 + 3810),
                             ("continuous", [[(t0 + 10, t0 + 300)], [(t0 + 800, t0 + 1300)]], t0 + 1500)):
        exp = tmp_path / name
        for i, s in enumerate(spans):
            _reports(exp / f"trial_{i}", s, torn=i == 1)  # a torn last line is skipped, not fatal
        for f, t in (("sweep.json", t0), ("summary.csv", end)):
            (exp / f).write_text("{}")
            os.utime(exp / f, (t, t))
        m = committed_runs.machine_info(exp, {"argv": ["run.py", "x"]})
        if name == "stopped":
            assert (m["wall_min"], m["paused_min"]) == (3.5, 60.0)
        else:  # 500 s between its two trials is under PAUSE_S: the span counts whole
            assert m["wall_min"] == 25.0 and "paused_min" not in m
    # Tune rewrote sweep.json when the resumed run ended, and the report was rebuilt two hours later: the
    # first trial's start and the newest report bound the run; the rebuild is neither wall time nor a pause
    exp = tmp_path / "stopped"
    for f, t in (("sweep.json", t0 + 3805), ("summary.csv", t0 + 3800 + 7200)):
        os.utime(exp / f, (t, t))
    m = committed_runs.machine_info(exp, {"argv": ["run.py", "x"]})
    assert (m["wall_min"], m["paused_min"]) == (round((3790 - 3600) / 60, 1), 60.0)
    from sweeper.analysis.aggregate import run_span

    assert run_span(tmp_path / "nothing") is None  # no reports: no span known


def test_machine_json_takes_the_kernels_the_trials_reported(tmp_path, monkeypatch):
    """One kind: that kind, whatever machine `add` runs on; two kinds (a run resumed elsewhere): "mixed"
    with each kind's trial count, and trials.csv keeps each trial's own; none reported: the add machine's."""
    import pandas as pd

    monkeypatch.setattr(committed_runs, "cpu_kernels", lambda: "ADD-MACHINE")
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "sweep.json").write_text(json.dumps({"name": "s", "base": {}, "variants": [{"mur": "none"}, {"mur": "direct"}]}))
    frame = {"mur": ["none", "direct", "none"], "seed": [0, 0, 1], "status": ["finished"] * 3,
             "final_test_error": [5.0, 4.0, 6.0]}
    for kernels, want in ((["AVX2"] * 3, {"cpu_kernels": "AVX2"}),
                          (["AVX2", "AVX512", "AVX512"], {"cpu_kernels": "mixed",
                                                          "cpu_kernels_trials": {"AVX2": 1, "AVX512": 2}}),
                          ([None] * 3, {"cpu_kernels": "ADD-MACHINE"})):
        pd.DataFrame({**frame, "cpu_kernels": kernels}).to_parquet(exp / "trials.parquet")
        assert committed_runs.trial_kernels(committed_runs.read_trials(exp)) == want
    pd.DataFrame({**frame, "cpu_kernels": ["AVX2", "AVX512", "AVX512"]}).to_parquet(exp / "trials.parquet")
    committed_runs.write_trials_csv(committed_runs.read_trials(exp), json.loads((exp / "sweep.json").read_text()),
                                    tmp_path / "trials.csv")
    assert (tmp_path / "trials.csv").read_text().splitlines() == [
        "mur,seed,status,final_test_error,cpu_kernels", "direct,0,finished,4,AVX512", "none,0,finished,5,AVX2",
        "none,1,finished,6,AVX512"]
