"""Stalled trials (sweeper/driver/stalls.py, sweeper/driver/live.py): named on stderr, in live.json and on the page, and
ended as failed with --end-stalled. The real case, a trial process stopped with SIGSTOP, is in
tests/test_reliability.py.

    pytest tests/test_stalls.py -q     # seconds
"""
from __future__ import annotations

import json
from types import SimpleNamespace

from conftest import write_trial
from test_report import make_table_exp, reports

from sweeper.driver import live
from sweeper.analysis.html import LIVE
from sweeper.report import build_report
from sweeper.driver.stalls import StallWatch


def test_a_trial_is_stalled_after_factor_times_its_longest_interval():
    w = StallWatch(factor=10)
    w.start("a", 0.0)
    assert w.stalled(["a"], 1000.0) == {}  # no report yet: no pace, never stalled
    for t in (3.0, 4.0, 5.0):  # the first interval (3 s, the start-up) is its longest
        w.report("a", t)
    assert w.stalled(["a"], 5.0 + 30.0) == {}  # exactly 10 x 3 s: not yet
    assert w.stalled(["a"], 5.0 + 30.5) == {"a": {"silent_s": 30.5, "pace_s": 3.0}}
    assert w.stalled([], 100.0) == {}  # not running (ended, paused): not stalled
    w.report("a", 40.0)  # it reported after all: its pace is now 35 s
    assert w.stalled(["a"], 40.0 + 349.0) == {} and "a" in w.stalled(["a"], 40.0 + 351.0)
    w.start("a", 500.0)  # restarted: measured afresh
    assert w.stalled(["a"], 10_000.0) == {}
    assert StallWatch(factor=0).stalled(["a"], 1e9) == {}  # 0: no watch


def trial(name: str, status: str = "RUNNING"):
    return SimpleNamespace(relative_logdir=name, status=status)


def test_the_live_callback_names_a_stalled_trial_once_and_ends_it_with_end_stalled(tmp_path, monkeypatch, capsys):
    clock, ended = [0.0], []
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(live, "end_trial", lambda t: ended.append(t.relative_logdir))
    for end_stalled in (False, True):
        cb = live.live_callback(tmp_path, every_s=0, heartbeat_s=600, stall_after=5, end_stalled=end_stalled)
        cb.setup()
        a, b = trial("train_tune_a"), trial("train_tune_b")
        clock[0] = 0.0
        cb.on_trial_start(0, [a, b], a)
        cb.on_trial_start(0, [a, b], b)
        for t in (2.0, 3.0):  # a: its longest interval is 2 s; b keeps reporting every second
            clock[0] = t
            cb.on_trial_result(0, [a, b], a, {})
        for t in range(1, 15):
            clock[0] = float(t)
            cb.on_trial_result(0, [a, b], b, {})
            cb.on_step_end(0, [a, b])
        # a is silent from 3 s on: stalled once more than 5 x 2 s passed, at 14 s
        err = capsys.readouterr().err.splitlines()
        what = "ending it as failed (--end-stalled)" if end_stalled else "still waiting for it; --end-stalled"
        assert err == [f"stalled: trial train_tune_a has not reported for 11 s, its reports came at most 2 s "
                       f"apart; {what}" + ("" if end_stalled else " would end it as failed so the sweep can finish")]
        beat = json.loads((tmp_path / LIVE).read_text())
        assert beat["state"] == "running" and beat["stalled"] == {"train_tune_a": {"silent_s": 11.0, "pace_s": 2.0}}
        assert ended == (["train_tune_a"] if end_stalled else [])
        clock[0] = 15.0
        cb.on_trial_error(0, [a, b], a)  # the kill ends it (or it fails by itself)
        a.status = "ERROR"
        cb.on_step_end(0, [a, b])
        beat = json.loads((tmp_path / LIVE).read_text())
        assert "stalled" not in beat
        assert beat.get("ended_stalled") == ({"train_tune_a": {"silent_s": 11.0, "pace_s": 2.0}} if end_stalled
                                             else None)
        (tmp_path / LIVE).unlink()
        assert capsys.readouterr().err == ""  # named once


def test_the_page_names_the_stalled_trials_while_the_sweep_runs(tmp_path):
    exp, _ = make_table_exp(tmp_path)
    write_trial(exp, 99, {"method": "mt", "vd": False, "mur": "none", "entmin_coef": 0.0, "dataset": "cifar10",
                          "num_labels": 1000, "mur_radius": 10.0, "steps": 400000, "val_size": 0, "seed": 4,
                          "trial_index": 99}, reports([40.0], done=False))
    stalled = {"train_tune_99": {"silent_s": 61.0, "pace_s": 2.1}}
    live.write_heartbeat(exp, "running", [], stalled)
    build_report(exp)
    page = (exp / "report.html").read_text()
    assert ("<p class=stalled id=stalled>Stalled: train_tune_99 (no report for 61 s; its reports came at most "
            "2.1 s apart)</p>") in page
    live.write_heartbeat(exp, "ended", [], None, stalled)  # the driver is gone, having ended it
    build_report(exp)
    page = (exp / "report.html").read_text()
    assert "id=stalled" not in page and ("<p class=stalled id=ended-stalled>Ended as stalled (--end-stalled): "
                                         "train_tune_99 (no report for 61 s;") in page
