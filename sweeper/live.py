"""The report while the sweep runs: a Tune callback that rebuilds it (report.html included) after trials end.

When a trial ends (finished, stopped by ASHA, failed), the report is rebuilt and, on a bucket,
uploaded (storage.report_at), at most once every `every_s` seconds; a trial that ends inside that
window is picked up by the next rebuild, at most `every_s` later. The rebuild runs in the driver
between Tune's steps, while the trials keep running in their own processes (benchmarks/live_report.py
measures what it costs the quick start). The callback also keeps live.json, the driver's heartbeat
that tells a running sweep from an interrupted one (html.sweep_state): "running" at the start and
every `heartbeat_s`, "ended" when fit() returns (Tune calls on_experiment_end after an interrupt too).

    python -m sweeper.run ablation_radius --preset quick                  # report.html from the first trial on
    python -m sweeper.run ablation_radius --preset quick --live-every 0   # the page only at the end
"""
from __future__ import annotations

import json
import math
import sys
import time

from sweeper import storage as store
from sweeper.aggregate import AggregateError
from sweeper.html import LIVE
from sweeper.storage import StorageError

EVERY_S = 30.0       # at most one rebuild per this many seconds
HEARTBEAT_S = 60.0   # live.json's "updated" is refreshed this often (html.STALE_S must be well above it)


def write_heartbeat(exp: store.Folder, state: str) -> None:
    store.write_text(exp / LIVE, json.dumps({"state": state, "updated": time.time()}))


def live_callback(exp: store.Folder, every_s: float = EVERY_S, heartbeat_s: float = HEARTBEAT_S):
    """A tune.Callback for tune.RunConfig(callbacks=...); every_s=0 keeps the heartbeat only."""
    from ray import tune

    class LiveReport(tune.Callback):
        def __init__(self):
            self.last_build = self.last_beat = -math.inf
            self.pending = False
            self.last_error = None

        def setup(self, **info):
            self.beat("running")

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.pending = True
            self.maybe_build()

        def on_trial_error(self, iteration, trials, trial, **info):
            self.pending = True
            self.maybe_build()

        def on_step_end(self, iteration, trials, **info):
            self.maybe_build()
            if time.monotonic() - self.last_beat >= heartbeat_s:
                self.beat("running")

        def on_experiment_end(self, trials, **info):
            self.beat("ended")

        def beat(self, state: str) -> None:
            try:
                write_heartbeat(exp, state)
            except (OSError, StorageError) as e:  # a bucket's hiccup must not end the sweep
                print(f"live report: heartbeat not written: {e}", file=sys.stderr)
            self.last_beat = time.monotonic()

        def maybe_build(self) -> None:
            if not (self.pending and every_s > 0 and time.monotonic() - self.last_build >= every_s):
                return
            self.pending = False
            try:
                store.report_at(exp)
            except (AggregateError, OSError, StorageError) as e:
                # e.g. the first trial's results not yet in the folder, a bucket's hiccup: tried again
                # after the window (said once per message); the sweep goes on either way
                self.pending = True
                msg = str(e).splitlines()[0]
                if msg != self.last_error:
                    print(f"live report: not rebuilt, trying again in {every_s:g} s: {msg}", file=sys.stderr)
                self.last_error = msg
            self.last_build = time.monotonic()  # after the build: its own cost never fills the window

    return LiveReport()
