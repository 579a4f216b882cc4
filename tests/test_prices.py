"""The price tables the study writes into the package, a GPU trial's price, the sweep's wall time on N GPUs,
and the launch order, against hand-computed cases.

    pytest tests/test_prices.py -q
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from search_spaces import get_sweep
from sweeper import gpu_cost
from sweeper.driver import tuner
from sweeper.driver.preflight import trial_configs

ROW = dict(arch="convnet13", mur_steps=1, bf16=False, source="bench.json", device="dev", commit="c",
           measured="2026-01-01")
# kind A measures MT (100 steps/s) and MT + VD (50); kind B measures MT only (50): B is half as fast as A
HAND = ({"gpu": "A", "method": "mt", "vd": False, "mur": "none", "steps_per_s": 100.0, **ROW},
        {"gpu": "A", "method": "mt", "vd": True, "mur": "none", "steps_per_s": 50.0, **ROW},
        {"gpu": "B", "method": "mt", "vd": False, "mur": "none", "steps_per_s": 50.0,
         **{**ROW, "measured": "2026-02-01"}})


@pytest.fixture
def hand(monkeypatch):
    monkeypatch.setattr(gpu_cost, "rows", lambda: HAND)
    monkeypatch.setattr(gpu_cost, "seen_kind", lambda: None)


def cfg(**kw) -> dict:
    return {"dataset": "cifar10", "arch": "convnet13", "num_labels": 1000, "steps": 6000, "method": "mt", **kw}


def test_a_trial_is_priced_by_the_first_rule_that_holds(hand):
    assert gpu_cost.price(cfg(), "A", 99.0) == (1.0, "measured on A (bench.json, 2026-01-01)")  # 6000 / 100 / 60
    assert gpu_cost.price(cfg(), "B", 99.0)[0] == 2.0
    minutes, rule = gpu_cost.price(cfg(vd=True), "B", 99.0)  # A's 50 steps/s x B/A = 0.5
    assert minutes == pytest.approx(4.0) and rule.startswith("scaled from A (bench.json) by B/A = 0.50 over 1 variant")
    assert gpu_cost.price(cfg(method="ict"), "A", 99.0) == (1.0, "as MT (ict) measured on A (bench.json, 2026-01-01)")
    assert gpu_cost.price(cfg(method="vat"), "A", 99.0) == (99.0, "planning value (Sweep.minutes_per_trial): no "
                                                                  "measured variant is close")
    assert gpu_cost.price(cfg(arch="wrn28_2", dropout=0, input_noise=0), "A", 99.0)[0] == 99.0  # another network
    minutes, rule = gpu_cost.price(cfg(), "A100", 99.0)  # no kind shares a variant with it: the latest, unscaled
    assert minutes == 2.0 and rule == "A100 unmeasured: B's (bench.json), unscaled"


def test_the_kind_is_the_one_asked_else_the_machines_else_the_latest_measured(hand, monkeypatch):
    assert gpu_cost.pick_kind("a") == ("A", "--gpu-kind")
    assert gpu_cost.pick_kind(None)[0] == "B"
    monkeypatch.setattr(gpu_cost, "seen_kind", lambda: "A")
    assert gpu_cost.pick_kind(None) == ("A", "this machine's GPU")
    assert gpu_cost.gpu_kind("NVIDIA H100 80GB HBM3") == "H100" and gpu_cost.gpu_kind("NVIDIA H200") == "H200"


@pytest.mark.parametrize("gpus, per_trial, grid, first", [
    (2, 1, 6.0, 4.0),    # grid: 1 and 1, 1 and 1, then the 4 alone: 2 + 4; longest first: 4 beside four 1s
    (1, 0.5, 12.0, 8.0),  # two trials share the GPU, each twice as slow: 2 2 | 2 2 | 8; longest: 8 | 2 2 2 2
    (1, 1, 8.0, 8.0),     # one at a time: the sum either way
    (4, 2, 6.0, 4.0),     # two trials of 2 GPUs at once
])
def test_makespan_against_hand_scheduled_cases(gpus, per_trial, grid, first):
    minutes = [1.0, 1.0, 1.0, 1.0, 4.0]
    assert gpu_cost.makespan(minutes, list(range(5)), gpus, per_trial) == grid
    assert gpu_cost.makespan(minutes, gpu_cost.longest_first(minutes), gpus, per_trial) == first
    assert gpu_cost.gpu_hours(minutes, per_trial) * 60 == pytest.approx(8.0 * max(1, per_trial))


def test_longest_first_keeps_grid_order_among_equals():
    assert gpu_cost.longest_first([2.0, 5.0, 2.0, 5.0, 1.0]) == [1, 3, 0, 2, 4]


def args_for(preset: str, **kw) -> SimpleNamespace:
    return SimpleNamespace(seeds=None, seed_start=None, set=[], data_dir=None, preset=preset, gpu_kind="H100", **kw)


def test_a_paper_grid_launches_longest_first_with_its_trial_index_unchanged():
    sweep = get_sweep("table_cifar", "paper")
    trials = trial_configs(sweep, args_for("paper"))
    order = tuner.launch_order(sweep, trials, args_for("paper"))
    prices = [gpu_cost.price(t, "H100", sweep.minutes_per_trial)[0] for t in trials]
    assert sorted(order) == list(range(len(trials))) and order != sorted(order)
    assert [prices[i] for i in order] == sorted(prices, reverse=True)
    space = tuner.grid_space(trials, order)
    assert space["trial_index"] == {"grid_search": order}
    assert space["seed"].func({"trial_index": order[0]}) == trials[order[0]]["seed"]  # configs by trial_index
    quick = get_sweep("table_cifar", "quick")
    assert tuner.launch_order(quick, trial_configs(quick, args_for("quick")), args_for("quick")) is None


def test_resume_keeps_the_stored_order_and_a_grid_order_run_resumes_in_grid_order(tmp_path):
    trials = [{"seed": i, "method": "mt"} for i in range(4)]
    kept = json.dumps(trials, indent=0).encode()
    meta = {"name": "x", "n_trials": 4, "trials_digest": tuner.sha256_hex(kept), "launch_order": [2, 0, 3, 1]}
    (tmp_path / "trials.json").write_bytes(kept)
    for order, want in (([2, 0, 3, 1], [2, 0, 3, 1]), (None, [0, 1, 2, 3])):
        (tmp_path / "sweep.json").write_text(json.dumps({**meta, "launch_order": order}))
        assert tuner.stored_grid(tmp_path)["trial_index"] == {"grid_search": want}
    (tmp_path / "sweep.json").write_text(json.dumps({**meta, "launch_order": [0, 0, 1, 2]}))
    with pytest.raises(tuner.InputError, match="launch_order is not an order of its 4 trials"):
        tuner.stored_grid(tmp_path)


def test_the_price_table_is_current_and_a_changed_benchmark_makes_it_stale(tmp_path):
    """sweeper/gpu_prices.json is what the docs tooling makes from the committed benchmarks (so --check holds
    it), and a benchmark file that changes makes it differ (so --check fails until it is rewritten)."""
    from pathlib import Path

    from study import gpu_prices

    root = Path(__file__).resolve().parents[1]
    assert (root / gpu_prices.TABLE).read_text() == gpu_prices.text(root)
    for rel in (*gpu_prices.SOURCES, str(gpu_prices.TABLE)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((root / rel).read_bytes())
    assert gpu_prices.text(tmp_path) == (root / gpu_prices.TABLE).read_text()  # no git here: provenance kept
    bench = tmp_path / gpu_prices.SOURCES[0]
    d = json.loads(bench.read_text())
    d["rows"][0]["steps_per_s"] *= 2
    bench.write_text(json.dumps(d))
    assert gpu_prices.text(tmp_path) != (root / gpu_prices.TABLE).read_text()


def test_the_run_price_table_is_current_and_a_changed_committed_run_makes_it_stale(tmp_path):
    """sweeper/run_prices.json is what the study makes from docs/runs/, and a committed run whose trial times
    change makes it differ (python -m study.docs --check then fails)."""
    import csv
    import shutil
    from pathlib import Path

    from study import run_prices

    root = Path(__file__).resolve().parents[1]
    committed = (root / run_prices.TABLE).read_text()
    assert run_prices.text(root) == committed
    shutil.copytree(root / run_prices.RUNS, tmp_path / run_prices.RUNS)
    assert run_prices.text(tmp_path) == committed
    timed = next(p for p in sorted((tmp_path / run_prices.RUNS).glob("*/trials.csv"))
                 if "wall_time_s" in p.read_text().splitlines()[0])
    rows = list(csv.DictReader(timed.open()))
    rows[0]["wall_time_s"] = str(float(rows[0]["wall_time_s"]) * 3)
    with timed.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert run_prices.text(tmp_path) != committed
