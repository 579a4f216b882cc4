"""The driver's signal handlers: Ctrl+C and SIGTERM stop a sweep gracefully, its state saved.

`graceful_stop()` is in place around Tune's fit() (sweeper/driver/stopping.py does the stop itself);
`reinstall_handlers()` puts its handlers back after Ray's driver takes SIGTERM over on connecting;
`signals_interrupt()` turns both signals into KeyboardInterrupt while the report is written.

    python -m sweeper.run ablation_radius --preset quick   # then Ctrl+C: exit status 3, --resume continues
"""
from __future__ import annotations

import contextlib
import signal
import threading


_wanted: dict = {}  # signal -> the handler graceful_stop() wants in place now


def _want(sig, handler) -> None:
    _wanted[sig] = handler
    signal.signal(sig, handler)


def reinstall_handlers() -> None:
    """Put graceful_stop()'s handlers back: Ray's driver takes SIGTERM over when it connects (a handler
    that exits at once, and a C++ one that aborts), which would end the sweep without saving it."""
    for sig, handler in _wanted.items():
        signal.signal(sig, handler)


@contextlib.contextmanager
def signals_interrupt():
    """SIGINT and SIGTERM raise KeyboardInterrupt in the block (SIGTERM's default would end the process
    without a word); the handlers before it come back after. In the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


@contextlib.contextmanager
def graceful_stop(announce=None):
    """Ctrl+C and SIGTERM (what `ray job stop` and most schedulers send) stop the sweep through Tune's
    own interrupt (SIGUSR1), sent once the checkpoints the trials reported are registered
    (sweeper/driver/stopping.py): it ends the running trials and saves the experiment state, then fit()
    returns. Yields an Event that tells whether that happened (Tune marks the trials it stopped
    done=True, so the results cannot). A second signal acts at once. Tune's own SIGINT handler must
    be off (TUNE_DISABLE_SIGINT_HANDLER=1) or it would replace this one inside fit(). `announce()` runs
    first, before anything waits (stopping.announce: the --resume command and trials.parquet, for a
    sender that SIGKILLs seconds later, as `ray job stop` does)."""
    from sweeper.driver import stopping

    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return

    def handler(signum, frame):
        stopped.set()
        _want(signal.SIGINT, signal.default_int_handler)
        _want(signal.SIGTERM, signal.SIG_DFL)
        if announce is not None:
            announce()
        stopping.request()  # SIGUSR1 once no trial is saving a checkpoint it reported

    stopping.reset()

    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in old:
        _want(sig, handler)
    try:
        yield stopped
    finally:
        _wanted.clear()
        for sig, h in old.items():
            signal.signal(sig, h)
        stopping.settle()
