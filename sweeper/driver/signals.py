"""Ctrl+C and SIGTERM while the report is written: `signals_interrupt()` turns both into KeyboardInterrupt,
so that sweeper.run ends with exit status 3 and the `--resume` command (the sweep's state is saved by
then). During Ray and Tune's fit() the graceful stop has them (sweeper/driver/stopping.py).

    python -m sweeper.run ablation_radius --preset quick   # Ctrl+C while "writing the report": exit status 3
"""
from __future__ import annotations

import contextlib
import signal
import threading


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
