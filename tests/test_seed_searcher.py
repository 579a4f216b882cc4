"""Tests of sweeper.seeds.seed_searcher (`--seeds auto` through Tune), its methods called directly, no Ray
cluster: the trials it suggests for a scripted sequence of completions, FINISHED once every cell is
decided or capped, and the same suggestions after a save / restore in the middle of a round.

    pytest tests/test_seed_searcher.py -q
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from ray.tune.search import Searcher

from search_spaces import get_sweep
from sweeper.seeds.auto_seeds import configurations, pairing
from sweeper.report import build_report
from sweeper.seeds.seed_searcher import SeedSearcher
from sweeper.seeds.sequential import Plan, SequentialError

BASE = {"method": "mt", "vd": False, "mur": "none", "steps": 10}
DIFFERS = {**BASE, "vd": True}              # 5 points worse on every seed: decided at the second look
SAME = {**BASE, "mur": "direct"}            # +1, -1, +1, ... from the baseline: never decided


def error(cfg: dict) -> float:
    """A fake trial's test error (percent) from its config and seed."""
    s = cfg["seed"]
    base = 10.0 + 0.3 * (s % 4)
    if cfg["vd"]:
        return base + 5.0 + 0.1 * (s % 3)
    if cfg["mur"] != "none":
        return base + (1.0 if s % 2 == 0 else -1.0)
    return base


def searcher(cap=16) -> SeedSearcher:
    return SeedSearcher([BASE, DIFFERS, SAME], [None, 0, 0], Plan(cap=cap), "test_error")


def drive(s: SeedSearcher, running: list, start: int, concurrency: int = 2, until: int | None = None) -> list:
    """Tune's part, scripted: ask for trials while fewer than `concurrency` run, else complete the oldest
    (its error from `error`). Stops at FINISHED, or after `until` suggestions. Returns
    [(trial id, cell config, seed)] in order of suggestion; `running` is updated in place."""
    out, i = [], start
    while until is None or len(out) < until:
        cfg = s.suggest(f"t{i}") if len(running) < concurrency else None
        if cfg == Searcher.FINISHED:
            assert not running
            break
        if cfg is None:
            assert running, "the searcher waits with nothing running"
            tid, done = running.pop(0)
            s.on_trial_complete(tid, {"test_error": error(done), "step": 10})
            continue
        running.append((f"t{i}", cfg))
        out.append((f"t{i}", cfg["vd"], cfg["mur"], cfg["seed"]))
        i += 1
    return out


def seeds_per_cell(suggested) -> dict:
    out = {}
    for _, vd, mur, seed in suggested:
        out.setdefault((vd, mur), []).append(seed)
    return {k: sorted(v) for k, v in out.items()}


def test_seeds_go_only_where_the_claim_is_open():
    s = searcher()
    suggested = drive(s, [], 0)
    # DIFFERS is decided at 5 seeds (the O'Brien-Fleming-type boundary's first look at 3 needs |t| > 600);
    # SAME stays open up to the cap, and the baseline runs its seeds with it
    assert seeds_per_cell(suggested) == {(False, "none"): list(range(16)), (True, "none"): [0, 1, 2, 3, 4],
                                         (False, "direct"): list(range(16))}
    assert [v.status for v in s.verdicts()[1:]] == ["differs", "capped"] and s.verdicts()[0] is None
    assert s.verdicts()[1].n == 5 and s.verdicts()[2].n == 16
    assert len({tid for tid, *_ in suggested}) == len(suggested) == 37


def test_first_round_is_every_configs_first_look():
    s = searcher()
    first = [s.suggest(f"t{i}") for i in range(10)]
    assert [(c["vd"], c["mur"], c["seed"]) for c in first[:9]] == \
        [(vd, mur, seed) for vd, mur in ((False, "none"), (True, "none"), (False, "direct")) for seed in range(3)]
    assert first[9] is None  # nothing more until results come in


def test_failed_and_diverged_trials_count_as_run_without_a_value():
    s = SeedSearcher([BASE, DIFFERS], [None, 0], Plan(cap=5), "test_error")
    cfgs = {f"t{i}": s.suggest(f"t{i}") for i in range(6)}
    for tid, cfg in cfgs.items():
        if (cfg["vd"], cfg["seed"]) == (True, 0):
            s.on_trial_complete(tid, None, error=True)
        elif (cfg["vd"], cfg["seed"]) == (True, 1):
            s.on_trial_complete(tid, {"test_error": math.nan})
        else:
            s.on_trial_complete(tid, {"test_error": error(cfg)})
    v = s.verdicts()[1]
    assert (v.status, v.n, v.pairs) == ("open", 3, 1)          # one pair: no interval yet
    nxt = [s.suggest(f"u{i}") for i in range(5)]                # seeds 3 and 4 of both, then wait
    assert sorted((c["vd"], c["seed"]) for c in nxt[:4]) == [(False, 3), (False, 4), (True, 3), (True, 4)]
    assert nxt[4] is None


@pytest.mark.parametrize("stop_after", [4, 11, 20])
def test_save_and_restore_mid_round_give_the_same_suggestions(tmp_path, stop_after):
    a = searcher()
    running = []
    head = drive(a, running, 0, until=stop_after)
    a.save(str(tmp_path / "searcher-state.json"))
    b = searcher()
    b.restore(str(tmp_path / "searcher-state.json"))
    rest_a = drive(a, list(running), stop_after)
    rest_b = drive(b, list(running), stop_after)  # the restored one, with Tune re-running the same trials
    assert rest_a == rest_b
    assert seeds_per_cell(head + rest_b) == seeds_per_cell(drive(searcher(), [], 0))


def test_configurations_drop_the_seed_and_keep_the_order():
    trials = [{**BASE, "seed": s} for s in range(3)] + [{**DIFFERS, "seed": s} for s in range(3)]
    assert configurations(trials) == [BASE, DIFFERS]


def test_pairing_follows_the_tables_rule_on_a_real_sweep():
    sweep = get_sweep("table_cifar", "quick")
    cells = configurations(sweep.trials(1))
    b = pairing(cells, sweep)
    name = lambda c: (cells[c]["method"], cells[c]["vd"], cells[c]["mur"])
    pairs = {name(c): None if j is None else name(j) for c, j in enumerate(b)}
    assert pairs[("mt", False, "none")] is None
    assert pairs[("ict", True, "direct")] == ("ict", False, "none")     # a variant against its own method's row
    assert pairs[("ict", False, "none")] == ("mt", False, "none")       # a method's row against MT
    assert pairs[("labelspreading", False, "none")] == ("mt", False, "none")


def test_a_sweep_without_a_baseline_is_refused():
    sweep = replace(get_sweep("table_svhn", "quick"), baseline=None)
    with pytest.raises(SequentialError, match="compares no cell.*Sweep.baseline"):
        pairing([BASE, DIFFERS], sweep)


def write_trial(exp, idx, params, test_error):
    """A finished trial folder as Ray Tune lays it out (params.json, result.json)."""
    d = exp / f"trial_{idx:05d}"
    d.mkdir(parents=True)
    (d / "params.json").write_text(json.dumps(params))
    (d / "result.json").write_text(json.dumps({"step": 10, "test_error": test_error, "diverged": 0, "done": True,
                                               "trial_id": f"ab12c_{idx:05d}"}) + "\n")


def test_the_table_shows_each_cells_sequential_verdict(tmp_path):
    """A --seeds auto sweep with a cap of 5 (looks at 3 and 5, each interval at 1 - 0.05/2): VD decided at
    3 seeds, MUR capped at 5; the report shows the deciding look's interval, the seeds and the verdict."""
    exp = tmp_path / "table-auto"
    runs = [(BASE, range(5)), (DIFFERS, range(3)), (SAME, range(5))]
    idx = 0
    for cfg, seeds in runs:
        for s in seeds:
            write_trial(exp, idx, {**cfg, "seed": s}, error({**cfg, "seed": s}))
            idx += 1
    (exp / "sweep.json").write_text(json.dumps({"name": "t", "rows": ["method", "vd", "mur"], "cols": [],
                                                "baseline": {"method": "mt", "vd": False, "mur": "none"},
                                                "max_seeds": 5, "match_margin": None, "boundary": "bonferroni"}))
    summary = pd.read_csv(build_report(exp)["summary.csv"])
    vd = summary[summary["vd"] & (summary["mur"] == "none")].iloc[0]
    mur = summary[summary["mur"] == "direct"].iloc[0]
    d = np.array([5.0, 5.1, 5.2])                                  # VD - MT, seeds 0-2
    half = stats.t.ppf(1 - 0.025 / 2, 2) * d.std(ddof=1) / math.sqrt(3)
    assert vd["verdict"] == "differs at 3 seeds" and vd["n_paired"] == 3
    assert (vd["diff_ci_low"], vd["diff_ci_high"]) == pytest.approx((5.1 - half, 5.1 + half))
    d = np.array([1.0, -1.0, 1.0, -1.0, 1.0])                       # MUR - MT, seeds 0-4
    half = stats.t.ppf(1 - 0.025 / 2, 4) * d.std(ddof=1) / math.sqrt(5)
    assert mur["verdict"] == "capped at 5 seeds"
    assert (mur["diff_ci_low"], mur["diff_ci_high"]) == pytest.approx((0.2 - half, 0.2 + half))
    md = (exp / "table.md").read_text()
    assert "(differs at 3 seeds)" in md and "(capped at 5 seeds)" in md and "Bonferroni" in md
    assert "| MT (baseline) |" in md and "| MT + VD |" in md  # the verdict is no config key of the labels


@pytest.mark.slow
def test_the_cli_dry_run_prints_least_expected_and_most_trials(capsys):
    from sweeper.run import main

    assert main(["ablation_radius", "--preset", "quick", "--seeds", "auto", "--max-seeds", "8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 5 configs (LabelSpreading, MT, MT + MUR at three radii): 15 trials at the first look, 40 at the cap of 8
    assert "looks at 3, 5, 8 seeds" in out and "least: 15 trials" in out and "most: 40 trials" in out
    assert "expected if no cell differs" in out
    assert main(["ablation_radius", "--preset", "quick", "--seeds", "auto", "--dry-run"]) == 0
    assert "most: 80 trials" in capsys.readouterr().out  # the default cap, 16 seeds of 5 configs


def test_the_auto_dry_run_prices_each_configuration_at_its_own_trial_min():
    """ablation_radius quick, cap 8: 5 configurations at 1, 2, 3, 4 and 5 trial-min (15 a seed of each).
    Least: 3 seeds each, 45 trial-min = 0.8 trial-hours; most: 8 each, 120 = 2.0. At one price p for all,
    a simulated expectation costs its trials times p; a configuration without a price costs the sweep's
    planning value."""
    from sweeper.seeds.auto_seeds import auto_sweep, cost_lines

    sweep = auto_sweep(get_sweep("ablation_radius", "quick"), 8)
    trials = sweep.trials()
    lines = cost_lines(sweep, trials, "quick", [1.0, 2.0, 3.0, 4.0, 5.0], "on AVX2")
    assert lines[1].startswith("  least: 15 trials, 0.8 trial-hours")
    assert lines[3].startswith("  most: 40 trials, 2.0 trial-hours")
    assert "5 of 5 configurations at their committed trial-min; on AVX2)" in lines[2]
    p = 6.0
    uniform = cost_lines(sweep, trials, "quick", [p] * 5)[2]
    for k, hours in re.findall(r"(\d+) trials, ([\d.]+) trial-hours", uniform):
        assert float(hours) == pytest.approx(int(k) * p / 60, abs=0.06)  # both rounded for print
    plain = cost_lines(sweep, trials, "quick")
    assert plain[1] == (f"  least: 15 trials, {15 * sweep.minutes_per_trial / 60:.1f} trial-hours (every cell decided "
                        f"at the first look)")
    partial = cost_lines(sweep, trials, "quick", [1.0, None, 3.0, 4.0, 5.0])
    assert partial[1].startswith(f"  least: 15 trials, {3 * (13 + sweep.minutes_per_trial) / 60:.1f} trial-hours")
    assert "4 of 5 configurations at their committed trial-min, 1 at" in partial[2]


@pytest.mark.parametrize("argv, message", [
    (["hpo", "--preset", "quick", "--seeds", "auto", "--dry-run"], "hpo is a search"),
    (["ablation_radius", "--preset", "quick", "--seeds", "auto", "--max-seeds", "2", "--dry-run"], "--max-seeds must be >= 3"),
    (["ablation_radius", "--preset", "quick", "--max-seeds", "8", "--dry-run"], "add --seeds auto"),
])
def test_the_cli_refuses_what_seeds_auto_cannot_run_in_one_line(capsys, argv, message):
    from sweeper.run import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def stored_auto_run(root, **plan) -> "Path":
    """An experiment folder of a --seeds auto run of ablation_radius (quick) as --resume finds it: its
    sweep.json (the plan it started with) and Tune's tuner.pkl (never read before Ray starts)."""
    exp = root / "ablation_radius-20260101-000000-ab12"
    exp.mkdir(parents=True)
    meta = {**asdict_sweep("quick"), "preset": "quick", "max_seeds": 16, "boundary": Plan().boundary, **plan}
    (exp / "sweep.json").write_text(json.dumps(meta, default=str))
    (exp / "tuner.pkl").write_bytes(b"")
    return exp


def asdict_sweep(preset: str) -> dict:
    from dataclasses import asdict
    return asdict(get_sweep("ablation_radius", preset))


@pytest.mark.parametrize("plan, asked, names", [
    ({}, ["--seeds", "auto", "--max-seeds", "32"], "planned with --max-seeds 16, not 32"),
    ({}, ["--max-seeds", "8"], "planned with --max-seeds 16, not 8"),
    ({"match_margin": 1.0}, [], "planned with match_margin 1.0"),
    ({"boundary": None}, ["--seeds", "auto"], "bonferroni boundary"),
    ({"max_seeds": None}, ["--seeds", "auto"], "was run with fixed seeds"),
])
def test_resume_refuses_another_plan_before_ray_starts(tmp_path, monkeypatch, capsys, plan, asked, names):
    """A --seeds auto run resumed with another cap, margin or boundary (or a fixed run with --seeds auto)
    is exit 2 with one line naming the stored plan and the fix; Ray never starts. The same run
    resumed with its own plan passes every check."""
    import sweeper.run as run

    exp = stored_auto_run(tmp_path, **plan)
    monkeypatch.setattr(run, "start_ray", lambda *a, **k: pytest.fail("Ray started"))
    argv = ["ablation_radius", "--resume", str(exp), "--storage", str(tmp_path), *asked]
    assert run.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and str(exp) in err and "start a new run" in err
    exp_ok = stored_auto_run(tmp_path / "ok")
    for ok in (["--seeds", "auto", "--max-seeds", "16"], ["--seeds", "auto"], []):
        sweep, trials, exp_dir, _ = run.prepare(run.parse_args(["ablation_radius", "--resume", str(exp_ok),
                                                                "--storage", str(tmp_path / "ok"), *ok]))
        assert exp_dir == exp_ok


def test_resume_keeps_the_cells_the_run_started_with(tmp_path, monkeypatch, capsys):
    """A run started with --cells resumes with the same --cells; with others, or with none (the whole
    sweep), it is exit 2 with one line naming the command it started with. Ray never starts."""
    from dataclasses import asdict

    import sweeper.run as run
    from sweeper.driver.preflight import select_cells

    cut = json.loads(json.dumps(asdict(select_cells(get_sweep("ablation_radius", "quick"), ["mur_radius=4"])),
                                default=str))
    argv0 = ["sweeper/run.py", "ablation_radius", "--preset", "quick", "--cells", "mur_radius=4"]
    exp = stored_auto_run(tmp_path, variants=cut["variants"], grid={}, argv=argv0)
    monkeypatch.setattr(run, "start_ray", lambda *a, **k: pytest.fail("Ray started"))
    for asked in (["--cells", "mur_radius=1"], []):
        assert run.main(["ablation_radius", "--resume", str(exp), "--storage", str(tmp_path), *asked]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "other cells" in err and "--cells mur_radius=4" in err
    sweep, trials, exp_dir, _ = run.prepare(run.parse_args(["ablation_radius", "--resume", str(exp), "--storage",
                                                            str(tmp_path), "--cells", "mur_radius=4"]))
    assert exp_dir == exp and {t["mur_radius"] for t in trials if t["mur"] != "none"} == {4.0}


def test_the_printed_resume_command_of_a_cells_run_resumes_it(tmp_path, monkeypatch, capsys):
    """The command a stop prints (the driver's GracefulStop and lease get it) carries the run's --cells,
    so pasted as printed it passes the check that refuses the same run resumed without them (the test
    above); a folder resumed under another sweep's name is answered with that command too."""
    import shlex
    from dataclasses import asdict

    import sweeper.run as run
    from sweeper.driver import stopping
    from sweeper.driver.preflight import select_cells

    cut = json.loads(json.dumps(asdict(select_cells(get_sweep("ablation_radius", "quick"), ["mur_radius=4"])),
                                default=str))
    argv0 = ["sweeper/run.py", "ablation_radius", "--preset", "quick", "--cells", "mur_radius=4"]
    exp = stored_auto_run(tmp_path, variants=cut["variants"], grid={}, argv=argv0)
    printed = run.resume_command("ablation_radius", exp, ["mur_radius=4"])
    words = shlex.split(printed)
    assert words[:4] == ["python", "-m", "sweeper.run", "ablation_radius"] and words[-2:] == ["--cells", "mur_radius=4"]
    sweep, trials, exp_dir, _ = run.prepare(run.parse_args([*words[3:], "--storage", str(tmp_path)]))
    assert exp_dir == exp
    seen = []

    class Recorded(stopping.GracefulStop):
        def __init__(self, resume=None, exp_dir=None):
            seen.append(resume)
            super().__init__(resume, exp_dir)

    def no_ray(*a, **k):
        raise ConnectionError("no Ray here")

    monkeypatch.setattr(run, "GracefulStop", Recorded)
    monkeypatch.setattr(run, "check_resumable", lambda exp: [])  # the fixture's tuner.pkl is no Tune state
    monkeypatch.setattr(run, "start_ray", no_ray)
    assert run.main([*words[3:], "--storage", str(tmp_path)]) == 2
    assert seen == [printed]
    capsys.readouterr()
    assert run.main(["ablation_kl", "--resume", str(exp), "--storage", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"run `{printed}`")
    # the stored command's forms: --cells V, --cells=V, and --cells-only
    assert run.argv_cells(["x", "--cells", "a=1|b=2", "--cells=c=3", "--cells-only"]) == (["a=1|b=2", "c=3"], True)
    assert run.resume_command("s", "/r", ["a=1|b=2"], True) == "python -m sweeper.run s --resume /r --cells 'a=1|b=2' --cells-only"
