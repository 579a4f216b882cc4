"""The generated docs equal what `python -m sweeper.docs` makes from the committed files, the claims
are classified as declared, and the README and docs stay a landing page plus links that resolve.

    python -m pytest tests/test_docs.py -q
"""
import csv
import json
import math
import re
from dataclasses import fields
from pathlib import Path

import pytest

from search_spaces import get_sweep, names
from sweeper import claims as claimlib
from sweeper import docs
from trainables.config import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", ROOT / "cluster" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_committed_generated_files_equal_what_the_generator_makes():
    assert docs.stale() == [], "run `python -m sweeper.docs` and commit what it writes"


def test_readme_is_a_landing_page_with_the_ci_test_command():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "\npython -m pytest -q\n" in text  # .ci/run calls the README's test command
    assert "python -m sweeper.run ablation_radius --preset quick" in text
    assert "pip install -e '.[test]'" in text
    assert "python -m pytest -q" in (ROOT / ".ci" / "run").read_text()


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


def test_every_claim_is_graded_on_two_committed_seed_sets_or_says_why_not():
    runs = [docs.read_run(p) for p in docs.run_dirs()]
    for c in docs.load_claims():
        graded = docs.grade_claim(c, runs)
        if graded is None:
            assert c["why"], c["claim"]
            continue
        assert graded["verdict"] in claimlib.VERDICTS, (c["claim"], graded["status"])
        (a, _, _), (b, _, _) = graded["sets"]
        seeds = {r["name"]: set(r["seeds"]) for r in runs}
        assert not seeds[a] & seeds[b], (c["claim"], a, b)


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
    (tmp_path / "README.md").write_text("# x\n<!-- generated: quickstart -->\nold\n<!-- end -->\n"
                                        "<!-- generated: claims -->\n<!-- end -->\n")
    return tmp_path


CLAIM = {"claim": "MUR at r = 1 helps", "source": "Fig. 3(c)", "sweep": "ablation_radius", "preset": "quick",
         "cells": [{"method": "mt", "mur": "direct", "mur_radius": 1}], "against": {"mur": "none"},
         "direction": "lower"}
OTHER = {"claim": "VD helps", "source": "Table 1", "sweep": "ablation_kl", "preset": "quick",
         "cells": [{"method": "mt", "vd": True}], "against": {"vd": False}, "direction": "lower"}
UNTESTED = {"claim": "CIFAR-100 too", "source": "Table 1", "testable": False, "why": "no 100-class data here"}


def test_a_claim_is_yes_on_both_seed_sets_mixed_when_one_contradicts_and_rendered(tmp_path):
    from scipy import stats

    root = project(tmp_path, [CLAIM, OTHER, UNTESTED])
    write_run(root, "ablation_radius-quick-s0-2", "ablation_radius",
              {**{("none", s): v for s, v in zip((0, 1, 2), (5.0, 6.0, 4.0))},
               **{("direct", s): v for s, v in zip((0, 1, 2), (4.0, 4.5, 3.2))}})
    runs = [docs.read_run(p) for p in docs.run_dirs(root)]
    one = docs.grade_claim(CLAIM, runs)
    assert one["verdict"] is None and one["status"] == "one seed set committed"
    # the second set: MT+MUR higher on every seed, the interval above 0: contradicted on this set -> mixed
    write_run(root, "ablation_radius-quick-s3-5", "ablation_radius",
              {**{("none", s): v for s, v in zip((3, 4, 5), (5.0, 6.0, 4.0))},
               **{("direct", s): v for s, v in zip((3, 4, 5), (5.6, 6.9, 4.5))}})
    runs = [docs.read_run(p) for p in docs.run_dirs(root)]
    graded = docs.grade_claim(CLAIM, runs)
    assert [v for _, v, _ in graded["sets"]] == ["yes", "contradicted"] and graded["verdict"] == "mixed"
    first = graded["sets"][0][2][0]
    ci = stats.ttest_rel([4.0, 4.5, 3.2], [5.0, 6.0, 4.0]).confidence_interval(0.95)
    assert first["d"] == pytest.approx(-1.1) and (first["lo"], first["hi"]) == pytest.approx((ci.low, ci.high))
    assert docs.grade_claim(OTHER, runs)["status"] == "not committed" and docs.grade_claim(UNTESTED, runs) is None

    made = docs.generated(root)
    readme = made[Path("README.md")]
    assert "| mixed (1) | MUR at r = 1 helps (Fig. 3(c)) |" in readme
    assert "| not committed (1) | VD helps (Table 1) |" in readme
    assert "| not testable here (1) | CIFAR-100 too (Table 1) |" in readme
    assert "| table of ablation_radius-quick-s0-2 |" in readme and "old" not in readme
    results = made[Path("docs/RESULTS.md")]
    assert "## ablation_radius (quick, seeds 3-5)" in results
    assert "Test CPU, 2 cores, torch 9.9" in results
    assert "s0-2: yes, Δ −1.10 " + f"[{ci.low:+.2f}, {ci.high:+.2f}]".replace("-", "−") in results
    assert "| CIFAR-100 too | Table 1 | — | not testable here | no 100-class data here |" in results
    assert "| VD helps | Table 1 | `ablation_kl` | not committed: `python -m sweeper.run ablation_kl --preset quick` |" \
        in results


def test_overlapping_seed_sets_and_unmatched_cells_are_errors(tmp_path):
    root = project(tmp_path, [{**CLAIM, "cells": [{"method": "mt", "mur": "direct", "mur_radius": 7}]}])
    values = {**{("none", s): 5.0 + s for s in (0, 1, 2)}, **{("direct", s): 4.0 + s for s in (0, 1, 2)}}
    write_run(root, "ablation_radius-quick-s0-2", "ablation_radius", values)
    with pytest.raises(claimlib.ClaimError, match="no finished trial is the cell"):
        docs.generated(root)
    write_run(root, "ablation_radius-quick-s2-4", "ablation_radius",
              {(m, s + 2): v for (m, s), v in values.items()})
    with pytest.raises(docs.DocsError, match="share seeds"):
        docs.generated(root)


def test_check_reports_a_hand_edited_generated_file(tmp_path):
    root = project(tmp_path, [CLAIM])
    for path, text in docs.generated(root).items():
        (root / path).write_text(text)
    assert docs.stale(root) == []
    (root / "docs" / "RESULTS.md").write_text((root / "docs" / "RESULTS.md").read_text() + "typed by hand\n")
    assert docs.stale(root) == [Path("docs/RESULTS.md")]


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
                  "trial_dir": ["/x/a", "/x/b"], "final_test_error": [5.0, 4.25]}).to_parquet(exp / "trials.parquet")
    dest = docs.add(exp, root=tmp_path)
    assert dest == tmp_path / "docs" / "runs" / "ablation_radius-quick-s3-5"
    assert sorted(p.name for p in dest.iterdir()) == ["machine.json", "paired_diffs.png", "summary.csv",
                                                       "sweep.json", "table.md", "trials.csv"]
    # the per-seed values the claims read: varying keys, seed, status, final metrics; no machine paths
    assert (dest / "trials.csv").read_text().splitlines() == [
        "mur,seed,status,final_test_error", "direct,3,finished,4.25", "none,3,finished,5"]
    m = json.loads((dest / "machine.json").read_text())
    assert m["command"] == "python -m sweeper.run ablation_radius --preset quick"
    assert m["cores"] >= 1 and m["cpu"] and m["torch"] and m["wall_min"] >= 0
    with pytest.raises(docs.DocsError, match="no table.md"):
        (exp / "table.md").unlink()
        docs.add(exp, root=tmp_path)


def test_a_committed_command_drops_the_machines_paths_but_keeps_every_other_argument():
    from sweeper.docs import public_args
    argv = ["/home/u/p/sweeper/run.py", "ablation_radius", "--storage", "/tmp/r", "--preset", "quick",
            "--storage=s3://b/p", "--seed-start", "8"]
    assert public_args(argv) == ["ablation_radius", "--preset", "quick", "--seed-start", "8"]
