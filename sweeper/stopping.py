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
"""
from __future__ import annotations

import os
import signal
import sys
import time

from ray import tune

WAIT_S = 10.0  # a save is one actor call: the worker uploaded the checkpoint before it reported

_state = {"requested": None, "active": False, "sent": False, "told": False}


def reset() -> None:
    """Before a run (fit() then starts the StopAfterSaves stored with it)."""
    _state.update(requested=None, active=False, sent=False, told=False)


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
