"""A stop that keeps every checkpoint a trial has reported.

Tune stops a run on SIGUSR1: it leaves its loop, saves the experiment state and stops the trials.
A function trainable's checkpoint reaches that state in two steps: its result (which the loggers
write to result.json at once), then a save call to the trial's actor that registers the checkpoint,
already in storage, with the trial. An interrupt between the two saves a state without it, and
`--resume` restarts the trial from its previous checkpoint, or from scratch (the call waits longer
on a loaded machine, so the window is wider there).
`request()` therefore interrupts Tune only once no trial is saving (StopAfterSaves, at the end of a
step of Tune's loop), after at most WAIT_S; with no StopAfterSaves running (an experiment stored
without it) it interrupts at once.

That stop takes seconds (the saves, Tune's state, then the report), and whoever sent the signal may
not wait: `ray job stop` SIGKILLs the driver RAY_JOB_STOP_WAIT_TIME_S (default 3) seconds after its
SIGTERM. So `announce()`, called by the signal handler before anything waits, first prints the
`--resume` command, then writes trials.parquet of the trials as they stand in a thread (a local
folder; on a bucket it would first download every trial's files), and `settle()` waits for it
before the full report replaces it. `job_stop_note()` tells a `ray job submit` user how to give the
stop its time.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from ray import tune

WAIT_S = 10.0  # a save is one actor call: the worker uploaded the checkpoint before it reported
# RAY_JOB_STOP_WAIT_TIME_S that docs/USAGE.md asks `ray job submit` for: WAIT_S for the saves, then
# Tune's state and the report, with room for a loaded machine
JOB_STOP_WAIT_S = 60
RAY_DEFAULT_JOB_STOP_WAIT_S = 3  # Ray's JobSupervisor.DEFAULT_RAY_JOB_STOP_WAIT_TIME_S

_state = {"requested": None, "active": False, "sent": False, "told": False, "early": None}


def reset() -> None:
    """Before a run (fit() then starts the StopAfterSaves stored with it)."""
    _state.update(requested=None, active=False, sent=False, told=False, early=None)


def requested() -> bool:
    """Whether a stop was asked for in this run."""
    return _state["requested"] is not None


def announce(resume: str, exp_dir) -> None:
    """First thing on a stop signal: the command that continues the sweep (one unbuffered write, safe in a
    signal handler), then trials.parquet of what finished, written in a thread while Tune stops."""
    os.write(2, f"stopping: the sweep's state is being saved; continue it with `{resume}`\n".encode())
    if isinstance(exp_dir, Path) and _state["early"] is None:
        _state["early"] = threading.Thread(target=_write_trials, args=(exp_dir,), daemon=True)
        _state["early"].start()


def _write_trials(exp_dir: Path) -> None:
    from sweeper.analysis.aggregate import AggregateError, load_trials, write_trials

    try:
        write_trials(load_trials(exp_dir), exp_dir / "trials.parquet")
    except (AggregateError, OSError, ValueError) as e:  # e.g. no trial folder yet; the final report tries again
        print(f"trials.parquet not written at the stop signal: {e}", file=sys.stderr)


def settle() -> None:
    """Wait for announce()'s trials.parquet (atomic), so that the final report's is the newer."""
    if _state["early"] is not None:
        _state["early"].join()


def job_stop_note(env=os.environ) -> str | None:
    """Inside a Ray job (its supervisor sets RAY_JOB_CONFIG_JSON_ENV_VAR for the driver, whose environment
    also holds the supervisor's RAY_JOB_STOP_WAIT_TIME_S): a note when `ray job stop` would SIGKILL this
    driver before its stop could end; None elsewhere, or with time enough."""
    if "RAY_JOB_CONFIG_JSON_ENV_VAR" not in env:
        return None
    wait = env.get("RAY_JOB_STOP_WAIT_TIME_S", str(RAY_DEFAULT_JOB_STOP_WAIT_S))
    if wait.strip().isdigit() and int(wait) >= JOB_STOP_WAIT_S:
        return None
    return (f"note: `ray job stop` SIGKILLs this driver {wait} s after its SIGTERM (RAY_JOB_STOP_WAIT_TIME_S), "
            f"before the stop can save the sweep's state and report; submit with --runtime-env-json "
            f"'{{\"env_vars\": {{\"RAY_JOB_STOP_WAIT_TIME_S\": \"{JOB_STOP_WAIT_S}\"}}}}' (docs/USAGE.md)")


def request() -> None:
    """Stop the run once the saves in flight are registered (or now, if no StopAfterSaves runs)."""
    _state["requested"] = time.monotonic()
    if not _state["active"]:
        _interrupt()


def _interrupt() -> None:
    # before fit() installs Tune's handler, SIGUSR1 would end the process: StopAfterSaves sends it at
    # fit()'s first step instead
    if not _state["sent"] and signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
        _state["sent"] = True
        os.kill(os.getpid(), signal.SIGUSR1)  # Tune's own interrupt


class StopAfterSaves(tune.Callback):
    """Turns a requested stop into Tune's interrupt at the first step with no trial saving. It holds
    no state of its own, so it pickles with the experiment and works again on --resume."""

    def setup(self, **info):
        _state["active"] = True

    def on_step_end(self, iteration, trials, **info):
        asked = _state["requested"]
        if asked is None or _state["sent"]:
            return
        saving = [t for t in trials if t.is_saving]
        if not saving or time.monotonic() - asked > WAIT_S:
            _interrupt()
        elif not _state["told"]:
            _state["told"] = True
            print(f"stopping once {len(saving)} trial(s) registered the checkpoint they reported "
                  f"(at most {WAIT_S:g} s)", file=sys.stderr)

    def on_experiment_end(self, trials, **info):
        _state["active"] = False
