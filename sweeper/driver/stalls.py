"""Stalled trials: a running trial that has not reported for much longer than its own reports came.

A trial's pace is the longest interval between its reports since it (re)started, counting the first
one from its start (data loading and compilation included), and at least MIN_PACE_S: a trial started
on a reused worker reports within a second, and the machine's ordinary pauses beside it (a new trial's
worker importing torch, a checkpoint save) are longer than that. A running trial is stalled once
`factor` times its pace passed without a report (`--stall-after FACTOR`, default 10; 0 turns the watch
off). Silence counts only while the driver listens: a gap of more than DEAF_S between two looks is the
driver busy (ending another trial's worker, saving the experiment), when reports wait in its queue
unread, so that gap past its first DEAF_S is no trial's silence (a driver busy at every turn still
counts DEAF_S a turn, so a stopped trial is still found). A trial that has not reported yet has no
pace and is never called stalled. sweeper/driver/live.py names the stalled trials in live.json (the
report page shows them) and on stderr, and with `--end-stalled` ends them as failed (no retry) so
that the sweep can finish. Pure: no Ray, the clock passed in.

    python -m sweeper.run ablation_radius --preset quick --stall-after 5 --end-stalled
"""
from __future__ import annotations

from dataclasses import dataclass, field

FACTOR = 10.0  # default of --stall-after: a stall is this many of the trial's own longest report intervals
MIN_PACE_S = 2.0  # a pace below this counts as this: sub-second report intervals are shorter than the machine's pauses
DEAF_S = 1.0  # a longer gap between two looks is the driver busy: Tune's loop waits at most 0.1 s for an event


@dataclass
class Pace:
    last: float             # its newest report (or its start), moved on by the driver's busy gaps
    longest: float = 0.0    # the longest interval between its reports so far; 0: none yet


@dataclass
class StallWatch:
    factor: float = FACTOR  # a stall is factor x the trial's pace without a report; 0: never
    paces: dict[str, Pace] = field(default_factory=dict)  # trial name -> its pace
    looked: float | None = None  # the clock at the previous look (stalled()); None: none yet

    def start(self, trial: str, now: float) -> None:
        """The trial started or restarted (after a failure, on --resume): its pace is measured afresh."""
        self.paces[trial] = Pace(last=now)

    def report(self, trial: str, now: float) -> None:
        pace = self.paces.setdefault(trial, Pace(last=now))
        pace.longest = max(pace.longest, now - pace.last)
        pace.last = now

    def end(self, trial: str) -> None:
        self.paces.pop(trial, None)

    def stalled(self, running: list[str], now: float) -> dict[str, dict]:
        """{trial: {"silent_s": seconds since its last report the driver listened for, "pace_s": its longest
        interval}} for each running trial silent for more than factor x its pace (MIN_PACE_S at least).
        Called at every turn of the driver's loop: what a gap since the previous call has past DEAF_S is
        taken out of every trial's silence (and out of the interval its next report measures)."""
        if not self.factor > 0:
            return {}
        if self.looked is not None and now - self.looked > DEAF_S:
            deaf_from = self.looked + DEAF_S
            for pace in self.paces.values():  # silence before the deaf part is kept; the deaf part is not
                pace.last += now - max(pace.last, deaf_from)
        self.looked = now
        out = {}
        for t in running:
            pace = self.paces.get(t)
            if pace and pace.longest > 0 and now - pace.last > self.factor * max(pace.longest, MIN_PACE_S):
                out[t] = {"silent_s": round(now - pace.last, 1), "pace_s": round(pace.longest, 2)}
        return out


def stalled_line(trial: str, s: dict, ending: bool) -> str:
    """The stderr line for a trial found stalled."""
    what = ("ending it as failed (--end-stalled)" if ending else
            "still waiting for it; --end-stalled would end it as failed so the sweep can finish")
    return (f"stalled: trial {trial} has not reported for {s['silent_s']:g} s, its reports came at most "
            f"{s['pace_s']:g} s apart; {what}")
