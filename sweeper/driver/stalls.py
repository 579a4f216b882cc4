"""Stalled trials: a running trial that has not reported for much longer than its own reports came.

A trial's pace is the longest interval between its reports since it (re)started, counting the first
one from its start (data loading and compilation included), so a trial's slow start or a checkpoint
save never looks like a stall. A running trial is stalled once `factor` times that interval passed
without a report (`--stall-after FACTOR`, default 10; 0 turns the watch off). A trial that has not
reported yet has no pace and is never called stalled. sweeper/driver/live.py names the stalled trials in
live.json (the report page shows them) and on stderr, and with `--end-stalled` ends them as failed
(no retry) so that the sweep can finish. Pure: no Ray, the clock passed in.

    python -m sweeper.run ablation_radius --preset quick --stall-after 5 --end-stalled
"""
from __future__ import annotations

from dataclasses import dataclass, field

FACTOR = 10.0  # default of --stall-after: a stall is this many of the trial's own longest report intervals


@dataclass
class Pace:
    started: float          # when the trial (re)started, clock seconds
    last: float             # its newest report (or its start)
    longest: float = 0.0    # the longest interval between its reports so far; 0: none yet


@dataclass
class StallWatch:
    factor: float = FACTOR  # a stall is factor x the trial's longest interval without a report; 0: never
    paces: dict[str, Pace] = field(default_factory=dict)  # trial name -> its pace

    def start(self, trial: str, now: float) -> None:
        """The trial started or restarted (after a failure, on --resume): its pace is measured afresh."""
        self.paces[trial] = Pace(started=now, last=now)

    def report(self, trial: str, now: float) -> None:
        pace = self.paces.setdefault(trial, Pace(started=now, last=now))
        pace.longest = max(pace.longest, now - pace.last)
        pace.last = now

    def end(self, trial: str) -> None:
        self.paces.pop(trial, None)

    def stalled(self, running: list[str], now: float) -> dict[str, dict]:
        """{trial: {"silent_s": seconds since its last report, "pace_s": its longest interval}} for each
        running trial that has been silent for more than factor x its longest interval."""
        if not self.factor > 0:
            return {}
        out = {}
        for t in running:
            pace = self.paces.get(t)
            if pace and pace.longest > 0 and now - pace.last > self.factor * pace.longest:
                out[t] = {"silent_s": round(now - pace.last, 1), "pace_s": round(pace.longest, 2)}
        return out


def stalled_line(trial: str, s: dict, ending: bool) -> str:
    """The stderr line for a trial found stalled."""
    what = ("ending it as failed (--end-stalled)" if ending else
            "still waiting for it; --end-stalled would end it as failed so the sweep can finish")
    return (f"stalled: trial {trial} has not reported for {s['silent_s']:g} s, its reports came at most "
            f"{s['pace_s']:g} s apart; {what}")
