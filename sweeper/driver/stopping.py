"""The driver's graceful stop, in one object: Ctrl+C, SIGTERM and SIGHUP stop a sweep with every checkpoint a
trial has reported kept, its state saved, and exit status 3.

    python -m sweeper.run ablation_radius --preset quick   # then Ctrl+C: exit status 3, --resume continues

`GracefulStop` owns the whole stop: the handlers it wants in place (put back after Ray's driver takes
SIGTERM over on connecting), when a stop was asked for, whether Tune's interrupt went out, the thread
writing trials.parquet at the signal, and `stopped`, which sweeper.run turns into the exit status. The
driver makes one per run, in a `with` block around Ray and Tune's fit(), and passes it to what needs it.

Tune stops a run on SIGUSR1: it leaves its loop, saves the experiment state and stops the trials. A
function trainable's checkpoint reaches that state in two steps: its result (which the loggers write
to result.json at once), then a save call to the trial's actor that registers the checkpoint, already
in storage, with the trial. An interrupt between the two saves a state without it, and `--resume`
restarts the trial from its previous checkpoint, or from scratch (the call waits longer on a loaded
machine, so the window is wider there). `request()` therefore interrupts Tune only once no trial is
saving (StopAfterSaves, at the end of a step of Tune's loop), after at most WAIT_S; with no
StopAfterSaves running (an experiment stored without it) it interrupts at once.

That stop takes seconds (the saves, Tune's state, then the report), and whoever sent the signal may
not wait: `ray job stop` SIGKILLs the driver RAY_JOB_STOP_WAIT_TIME_S (default 3) seconds after its
SIGTERM. So the handler first prints the `--resume` command, then writes trials.parquet of the trials
as they stand in a thread (a local folder; on a bucket it would first download every trial's files),
and leaving the block waits for it before the full report replaces it. `job_stop_note()` tells a `ray
job submit` user how to give the stop its time.

StopAfterSaves and the live report are pickled with the experiment (tuner.pkl) and come back on
`--resume` as they were stored, so they cannot hold the run's stop: they ask `current()`, the stop
whose block is running (an inert one outside any).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from ray import tune

from sweeper.driver.signals import STOP_SIGNALS, away_from_a_closed_terminal

WAIT_S = 10.0  # a save is one actor call: the worker uploaded the checkpoint before it reported
# RAY_JOB_STOP_WAIT_TIME_S that docs/USAGE.md asks `ray job submit` for: WAIT_S for the saves, then
# Tune's state and the report, with room for a loaded machine
JOB_STOP_WAIT_S = 60
RAY_DEFAULT_JOB_STOP_WAIT_S = 3  # Ray's JobSupervisor.DEFAULT_RAY_JOB_STOP_WAIT_TIME_S
SIGNALS = STOP_SIGNALS  # Ctrl+C, SIGTERM (`ray job stop`, schedulers), SIGHUP (a closed terminal)


class GracefulStop:
    """The stop of one driver run. `with GracefulStop(resume, exp_dir) as stop:` puts its handler on
    Ctrl+C, SIGTERM and SIGHUP (in the main thread; elsewhere the block runs without one); a signal then sets
    `stopped`, prints `resume`, starts trials.parquet of `exp_dir` (a local folder) and asks Tune to stop
    once no trial is saving. A second signal acts at once. Tune's own SIGINT handler must be off
    (TUNE_DISABLE_SIGINT_HANDLER=1) or it would replace this one inside fit()."""

    def __init__(self, resume: str | None = None, exp_dir=None):
        self.resume = resume            # the command that continues the sweep, printed at the signal
        self.exp_dir = exp_dir          # a local folder gets trials.parquet at the signal; a URI does not
        self.stopped = threading.Event()  # a signal arrived (or the report was interrupted): exit status 3
        self.requested_at = None        # time.monotonic() of the stop request, None before
        self.watching = False           # a StopAfterSaves runs in fit(): it sends the interrupt, not request()
        self.sent = False               # Tune's SIGUSR1 went out (once per run)
        self.told = False               # the "stopping once N trial(s) registered ..." line was printed
        self.early = None               # the thread writing trials.parquet at the signal
        self.handlers: dict = {}        # signal -> the handler this stop wants in place now
        self.before: dict = {}          # signal -> the handler before the block, put back after it

    def __enter__(self) -> GracefulStop:
        global _current
        _current = self
        if threading.current_thread() is threading.main_thread():
            self.before = {sig: signal.getsignal(sig) for sig in SIGNALS}
            for sig in SIGNALS:
                self._want(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        global _current
        self.handlers.clear()
        for sig, h in self.before.items():
            signal.signal(sig, h)
        if self.early is not None:  # trials.parquet of the signal (atomic) is complete: the report's is newer
            self.early.join()
        _current = None

    def _want(self, sig, handler) -> None:
        self.handlers[sig] = handler
        signal.signal(sig, handler)

    def reinstall_handlers(self) -> None:
        """Put this stop's handlers back: Ray's driver takes SIGTERM over when it connects (a handler
        that exits at once, and a C++ one that aborts), which would end the sweep without saving it."""
        for sig, handler in self.handlers.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame) -> None:
        away_from_a_closed_terminal(signum)
        self.stopped.set()
        self._want(signal.SIGINT, signal.default_int_handler)  # a second signal acts at once
        self._want(signal.SIGTERM, signal.SIG_DFL)
        self._want(signal.SIGHUP, signal.SIG_IGN)  # the terminal is gone already
        self.announce()
        self.request()

    def announce(self) -> None:
        """First thing on a stop signal: the command that continues the sweep (one unbuffered write, safe
        in a signal handler), then trials.parquet of what finished, written in a thread while Tune stops."""
        if self.resume:
            os.write(2, f"stopping: the sweep's state is being saved; continue it with `{self.resume}`\n".encode())
        if isinstance(self.exp_dir, Path) and self.early is None:
            self.early = threading.Thread(target=_write_trials, args=(self.exp_dir,), daemon=True)
            self.early.start()

    def request(self) -> None:
        """Stop the run once the saves in flight are registered (or now, if no StopAfterSaves runs)."""
        self.requested_at = time.monotonic()
        if not self.watching:
            self._interrupt()

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for in this run."""
        return self.requested_at is not None

    def _interrupt(self) -> None:
        # before fit() installs Tune's handler, SIGUSR1 would end the process: StopAfterSaves sends it at
        # fit()'s first step instead
        if not self.sent and signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
            self.sent = True
            os.kill(os.getpid(), signal.SIGUSR1)  # Tune's own interrupt

    def on_step_end(self, trials) -> None:
        """At the end of a step of Tune's loop: the interrupt, once no trial is saving or WAIT_S passed."""
        if self.requested_at is None or self.sent:
            return
        saving = [t for t in trials if t.is_saving]
        if not saving or time.monotonic() - self.requested_at > WAIT_S:
            self._interrupt()
        elif not self.told:
            self.told = True
            print(f"stopping once {len(saving)} trial(s) registered the checkpoint they reported "
                  f"(at most {WAIT_S:g} s)", file=sys.stderr)


_current: GracefulStop | None = None  # the stop whose block runs now: what the pickled callbacks reach


def current() -> GracefulStop:
    """The running block's stop, else an inert one (no handlers, nothing requested)."""
    return _current if _current is not None else GracefulStop()


def _write_trials(exp_dir: Path) -> None:
    from sweeper.analysis.aggregate import AggregateError, load_trials, write_trials

    try:
        write_trials(load_trials(exp_dir), exp_dir / "trials.parquet")
    except (AggregateError, OSError, ValueError) as e:  # e.g. no trial folder yet; the final report tries again
        print(f"trials.parquet not written at the stop signal: {e}", file=sys.stderr)


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


class StopAfterSaves(tune.Callback):
    """Turns the running stop's request into Tune's interrupt at the first step with no trial saving. It
    holds no state of its own, so it pickles with the experiment and works again on --resume."""

    def setup(self, **info):
        current().watching = True

    def on_step_end(self, iteration, trials, **info):
        current().on_step_end(trials)

    def on_experiment_end(self, trials, **info):
        current().watching = False
