"""The stop signals outside Tune's fit(): `signals_interrupt()` turns Ctrl+C, SIGTERM and SIGHUP into
KeyboardInterrupt, so that sweeper.run ends with exit status 3 and the `--resume` command at any moment
of its life (the checks, Ray's start and shutdown, the report). During fit() the graceful stop has them
(sweeper/driver/stopping.py), and puts this handler back after.

`pause_point(name)` is the driver's test-only pause: where VBI_MUR_PAUSE_AT names the moment, the driver
says "paused at NAME" on stderr and waits there for a signal, so a test can signal each moment without
guessing its time. Unset, it does nothing.

    python -m sweeper.run ablation_radius --preset quick   # Ctrl+C while "writing the report": exit status 3
    VBI_MUR_PAUSE_AT=ray_down python -m sweeper.run ...     # then kill -HUP: exit status 3, resume.txt written
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # a user, `ray job stop` and schedulers, a closed terminal
PAUSE_POINTS = ("checked", "ray_up", "fit_done", "ray_down", "report", "reported")  # in the order a run meets them


def away_from_a_closed_terminal(signum: int) -> None:
    """After SIGHUP the terminal is gone and a write to it fails (EIO): stdout and stderr that are a
    terminal go to /dev/null, so the stop can finish; the --resume line is in the experiment folder."""
    if signum != signal.SIGHUP:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.isatty():
                stream.flush()
                os.dup2(null, stream.fileno())
        except (OSError, ValueError):  # already closed or detached: nothing to write to either way
            pass
    os.close(null)


@contextlib.contextmanager
def signals_interrupt():
    """Each of STOP_SIGNALS raises KeyboardInterrupt in the block (SIGTERM's and SIGHUP's defaults would end
    the process without a word); the handlers before it come back after. In the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        away_from_a_closed_terminal(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def pause_point(name: str) -> None:
    """Test-only: wait for a signal here where VBI_MUR_PAUSE_AT=name (one of PAUSE_POINTS)."""
    if os.environ.get("VBI_MUR_PAUSE_AT") == name:
        os.write(2, f"paused at {name}\n".encode())
        signal.pause()  # returns once a handler ran, or raises what it raised
