"""Stalled trials (sweeper/driver/stalls.py, sweeper/driver/live.py): named on stderr, in live.json and on the page, and
ended as failed with --end-stalled. The real case, a trial process stopped with SIGSTOP, is in
tests/test_reliability.py.

    pytest tests/test_stalls.py -q     # seconds
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from conftest import write_trial
from test_report import make_table_exp, reports

from sweeper.driver import live
from sweeper.analysis.html import LIVE
from sweeper.report import build_report
from sweeper.driver.stalls import StallWatch


def look(w: StallWatch, running: list[str], start: float, end: float, every: float = 0.1) -> dict:
    """The driver's loop from start to end, looking every `every` s (Tune's loop waits at most 0.1 s for
    an event); what the last look found."""
    out, n = {}, 0
    while start + n * every <= end + 1e-9:
        out = w.stalled(running, start + n * every)
        n += 1
    return out


def test_a_trial_is_stalled_after_factor_times_its_longest_interval():
    w = StallWatch(factor=10)
    w.start("a", 0.0)
    assert look(w, ["a"], 0.0, 3.0) == {}  # no report yet: no pace, never stalled
    for t in (3.0, 4.0, 5.0):  # the first interval (3 s, the start-up) is its longest
        w.report("a", t)
        look(w, ["a"], t, t + 0.9)
    assert look(w, ["a"], 5.0, 34.9) == {}  # under 10 x 3 s: not yet
    assert w.stalled(["a"], 35.5) == {"a": {"silent_s": 30.5, "pace_s": 3.0}}
    assert w.stalled([], 35.6) == {}  # not running (ended, paused): not stalled
    w.report("a", 40.0)  # it reported after all: its pace is now 35 s
    assert look(w, ["a"], 35.6, 40.0 + 349.9) == {} and "a" in w.stalled(["a"], 40.0 + 350.5)
    w.start("a", 500.0)  # restarted: measured afresh
    assert look(w, ["a"], 500.0, 2000.0, every=0.5) == {}
    assert StallWatch(factor=0).stalled(["a"], 1e9) == {}  # 0: no watch


def test_a_pace_under_two_seconds_counts_as_two():
    """A trial on a reused worker reports every 0.5 s from its start: a stall is 3 x 2 s of silence."""
    w = StallWatch(factor=3)
    w.start("a", 0.0)
    for t in (0.5, 1.0, 1.5):
        w.report("a", t)
    assert look(w, ["a"], 1.5, 1.5 + 5.9) == {}  # eleven of its intervals, but under 3 x 2 s
    assert w.stalled(["a"], 1.5 + 6.1) == {"a": {"silent_s": 6.1, "pace_s": 0.5}}


def test_a_busy_driver_is_no_trials_silence():
    """A turn of the driver's loop that took 8 s (another trial's worker ended, the experiment saved):
    its first second counts as silence, the other 7 do not, nor do they lengthen the next interval."""
    w = StallWatch(factor=3)
    w.start("a", 0.0)
    for t in (3.0, 6.0):  # its pace: 3 s, so a stall is 9 s of silence
        look(w, ["a"], t - 3.0, t - 0.1)
        w.report("a", t)
    assert look(w, ["a"], 6.0, 8.0) == {}
    assert w.stalled(["a"], 16.0) == {}  # busy from 8 to 16: 2 s + 1 s of silence counted
    assert look(w, ["a"], 16.1, 21.9) == {}  # 9 s counted at 22
    assert w.stalled(["a"], 22.1) == {"a": {"silent_s": 9.1, "pace_s": 3.0}}
    w.report("a", 22.5)  # it reported: the interval it measures is the 9.5 s counted, not 16.5
    assert w.paces["a"].longest == 9.5
    v = StallWatch(factor=3)  # a driver busy 5 s at every turn still counts 1 s a turn
    v.start("a", 0.0)
    v.report("a", 3.0)
    assert v.stalled(["a"], 3.0) == {}
    found = [t for t in range(8, 80, 5) if v.stalled(["a"], float(t))]
    assert found[0] == 53  # the tenth turn: 10 s counted, 50 s on the clock


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


@pytest.mark.slow
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
