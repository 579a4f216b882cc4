"""The report while the sweep runs: a Tune callback that rebuilds it (report.html included) after trials end.

When a trial ends (finished, stopped by ASHA, failed), the report is rebuilt and, on a bucket,
uploaded, at most once every `every_s` seconds; a trial that ends inside that window is picked up
by the next rebuild, at most `every_s` later. The rebuild is `python -m sweeper.report EXP` in a
child process at the lowest priority (nice 19): Tune's loop must not wait for it, since a trial's report()
waits for the driver to take its result, and on a small machine the trials come first
(benchmarks/live_report.py measures the quick start with and without it). One rebuild at a time;
fit() returning waits for the last one, so the final report written after it is the newest. The
callback also keeps live.json, the driver's heartbeat that tells a running sweep from an
interrupted one (html.sweep_state): "running" at the start and every `heartbeat_s`, "ended" when
fit() returns (Tune calls on_experiment_end after an interrupt too). After a stop signal the rebuild
still running is killed, not waited for: the final report replaces it. It also watches for stalled
trials (sweeper/driver/stalls.py): each is named on stderr once and in live.json's "stalled" at once (the
page shows them), and with --end-stalled its actor is killed and the trial ends as failed.

    python -m sweeper.run ablation_radius --preset quick                  # report.html from the first trial on
    python -m sweeper.run ablation_radius --preset quick --live-every 0   # the page only at the end
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time

from sweeper.driver import stopping
from sweeper import storage as store
from sweeper.analysis.html import LIVE, read_live, stored_loads
from sweeper.driver.stalls import FACTOR, StallWatch, stalled_line
from sweeper.storage import StorageError

EVERY_S = 30.0       # at most one rebuild per this many seconds
HEARTBEAT_S = 60.0   # live.json's "updated" is refreshed this often (html.STALE_S must be well above it)
WAIT_S = 300.0       # fit() returning waits at most this long for a rebuild still running
NICE = 19            # the lowest priority: below the trials (Ray starts its workers at nice 15)


def write_heartbeat(exp: store.Folder, state: str, loads: list[float], stalled: dict | None = None,
                    ended_stalled: dict | None = None) -> None:
    """live.json; `loads`: the driver machine's 1-minute load averages sampled at each beat so far,
    kept so that a run's wall time can be read with the load it ran under (committed_runs.machine_info);
    `stalled`: the running trials that stopped reporting (sweeper/driver/stalls.py), by trial folder;
    `ended_stalled`: those --end-stalled ended as failed, kept for the report of why they failed."""
    beat = {"state": state, "updated": time.time()}
    if loads:
        beat["load_avg"] = loads
    if stalled:
        beat["stalled"] = stalled
    if ended_stalled:
        beat["ended_stalled"] = ended_stalled
    store.write_text(exp / LIVE, json.dumps(beat))


def stored_ended_stalled(exp: store.Folder) -> dict:
    """The trials earlier drivers of this experiment ended as stalled (live.json), else {}."""
    try:
        return (read_live(exp) or {}).get("ended_stalled") or {}
    except (OSError, StorageError, ValueError):  # unreadable or torn: start anew
        return {}


def load_average() -> float | None:
    """The machine's load average over the last minute (os.getloadavg()[0]); None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # no load average on this OS
        return None


def start_rebuild(exp: store.Folder) -> subprocess.Popen:
    """`python -m sweeper.report EXP` in a child at low priority; its stderr goes to a temporary file
    (read when it ends: a pipe could fill and stall it)."""
    err = tempfile.TemporaryFile(mode="w+")
    child = subprocess.Popen([sys.executable, "-m", "sweeper.report", str(exp)], stdout=subprocess.DEVNULL,
                             stderr=err, stdin=subprocess.DEVNULL,
                             start_new_session=True)  # Ctrl+C stops the sweep, not a page half rebuilt
    child.err = err
    try:
        os.setpriority(os.PRIO_PROCESS, child.pid, NICE)
    except (AttributeError, OSError):  # no setpriority on this OS, or the child already ended
        pass
    return child


def end_rebuild(child: subprocess.Popen) -> None:
    """The last rebuild when fit() returns: waited for at most WAIT_S, then killed; after a stop (Ctrl+C,
    SIGTERM) not waited for, since its sender may SIGKILL soon (sweeper/driver/stopping.py)."""
    try:
        child.wait(timeout=0 if stopping.current().requested else WAIT_S)
    except subprocess.TimeoutExpired:  # e.g. a bucket that stopped answering
        child.kill()
        child.wait()


def rebuild_error(child: subprocess.Popen) -> str | None:
    """An ended rebuild's error, the last line of its stderr (else its exit status), or None when it
    succeeded; its stderr file is closed."""
    msg = None
    if child.returncode != 0:
        child.err.seek(0)
        lines = [s for s in child.err.read().splitlines() if s.strip()]
        msg = lines[-1] if lines else f"exit status {child.returncode}"
    child.err.close()
    return msg


def keep_heartbeat(exp: store.Folder, state: str, loads: list[float], stalled: dict | None = None,
                   ended_stalled: dict | None = None) -> None:
    """write_heartbeat, a failure said on stderr: a bucket's hiccup must not end the sweep."""
    try:
        write_heartbeat(exp, state, loads, stalled, ended_stalled)
    except (OSError, StorageError) as e:
        print(f"live report: heartbeat not written: {e}", file=sys.stderr)


def end_trial(trial) -> None:
    """End a stalled trial as failed: its actor killed (SIGKILL also ends a stopped process), and no
    retry, since Tune would otherwise count the kill as a lost worker and start the trial again."""
    import ray

    trial.max_failures = 0
    actor = trial.temporary_state.ray_actor
    if actor is not None:
        ray.kill(actor, no_restart=True)


def live_callback(exp: store.Folder, every_s: float = EVERY_S, heartbeat_s: float = HEARTBEAT_S,
                  stall_after: float = FACTOR, end_stalled: bool = False):
    """A tune.Callback for tune.RunConfig(callbacks=...); every_s=0 keeps the heartbeat only; a running
    trial silent for stall_after x its own longest report interval is named stalled (sweeper/driver/stalls.py),
    and ended as failed with end_stalled."""
    from ray import tune

    class LiveReport(tune.Callback):
        def __init__(self):
            self.last_build = self.last_beat = -math.inf
            self.pending = False
            self.child = None
            self.last_error = None
            self.loads = []  # the 1-minute load average at each beat
            self.watch = StallWatch(stall_after)
            self.stalled = {}  # trial folder -> {"silent_s", "pace_s"}: the stalled trials live.json names
            self.ended_stalled = {}  # the same, for the trials --end-stalled ended

        def __getstate__(self):  # stored with the experiment (tuner.pkl): without a running child
            return {**self.__dict__, "child": None}

        def setup(self, **info):
            self.loads = stored_loads(exp)  # on --resume: the earlier drivers' samples
            self.watch = StallWatch(stall_after)  # another process's clock
            self.stalled = {}
            self.ended_stalled = stored_ended_stalled(exp)
            self.beat("running")

        def on_trial_start(self, iteration, trials, trial, **info):
            self.watch.start(trial.relative_logdir, time.monotonic())

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.watch.report(trial.relative_logdir, time.monotonic())

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.watch.end(trial.relative_logdir)
            self.pending = True
            self.maybe_build()

        def on_trial_error(self, iteration, trials, trial, **info):
            self.watch.end(trial.relative_logdir)
            self.pending = True
            self.maybe_build()

        def on_step_end(self, iteration, trials, **info):
            self.maybe_build()
            changed = self.watch_stalls(trials)
            if changed or time.monotonic() - self.last_beat >= heartbeat_s:
                self.beat("running")

        def watch_stalls(self, trials) -> bool:
            """Names newly stalled trials on stderr (and ends them with end_stalled); True when the set
            of stalled trials changed, so that live.json and the page say so now."""
            running = {t.relative_logdir: t for t in trials if t.status == "RUNNING"}
            now = self.watch.stalled(list(running), time.monotonic())
            for name in sorted(now.keys() - self.stalled.keys()):
                print(stalled_line(name, now[name], end_stalled), file=sys.stderr)
                if end_stalled:
                    end_trial(running[name])
                    self.ended_stalled[name] = now[name]
            changed = now.keys() != self.stalled.keys()
            self.stalled = now
            if changed:
                self.pending = True  # the page names them at the next rebuild
            return changed

        def on_experiment_end(self, trials, **info):
            if self.child is not None:
                end_rebuild(self.child)
                self.reap()
            self.beat("ended")

        def beat(self, state: str) -> None:
            load = load_average()
            if load is not None:
                self.loads.append(load)
            keep_heartbeat(exp, state, self.loads, self.stalled if state == "running" else None, self.ended_stalled)
            self.last_beat = time.monotonic()

        def reap(self) -> None:
            """The ended child: on failure (e.g. the first trial's results not in the folder yet, a
            bucket's hiccup) the rebuild is due again, and its error said once per message."""
            child, self.child = self.child, None
            msg = rebuild_error(child)
            if msg is not None:
                self.pending = True
                if msg != self.last_error:
                    print(f"live report: not rebuilt, trying again in {every_s:g} s: {msg}", file=sys.stderr)
                self.last_error = msg

        def maybe_build(self) -> None:
            if self.child is not None:
                if self.child.poll() is None:
                    return  # one rebuild at a time
                self.reap()
            if not (self.pending and every_s > 0 and time.monotonic() - self.last_build >= every_s):
                return
            self.pending = False
            self.child = start_rebuild(exp)
            self.last_build = time.monotonic()

    return LiveReport()
