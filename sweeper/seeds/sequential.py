"""`--seeds auto`: add seeds only where a cell's paired comparison with its baseline is still open.

Every configuration starts with `first` seeds (first_seed ..); a cell is then looked at each time it
and its baseline have run the seeds of the next planned look, n_k in `looks` (3, 5, 8, 12, 16 for a
cap of 16: each about 1.5 times the last). At look k the paired differences d_s = cell_s -
baseline_s (the seeds both finished with a finite value) give Student's t-interval

    mean(d) ± t.ppf(1 - p_k / 2, m - 1) * sd(d, ddof=1) / sqrt(m)      (m pairs, p_k the look's nominal level)

with an O'Brien-Fleming-type boundary: p_k = 2 (1 - Phi(c * sqrt(n_K / n_k))), strict at the early
looks and close to alpha at the last, the constant c calibrated by simulation (`obf_constant`) so
that the chance that any of the K intervals misses the true difference is alpha. That pivot does not
depend on the difference, so stopping at the first look that decides keeps each verdict's error rate
at alpha (a plain 95 % interval at every look would not). `boundary="bonferroni"` instead puts every
look at p_k = alpha / K; benchmarks/sequential_seeds.py compares the two, and DECISIONS.md says why
the O'Brien-Fleming type is the default. A cell is decided when its interval excludes 0 ("differs")
or, with a margin, lies inside (-margin, +margin) ("matches"); a look whose differences are all equal
(stats.no_spread: a test set's error moves in steps of 100/N points) has no interval and decides
nothing. An open cell at the cap is "capped". Only open cells, and their baselines (pairs share
seeds), get the next look's seeds.

Pure functions over per-seed errors ({seed: value}, NaN where a seed ran without a finite value);
the Tune searcher that runs them is sweeper/seeds/seed_searcher.py.

    pytest tests/test_sequential.py -q
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sweeper.analysis.stats import t_interval

FIRST_SEEDS = 3     # seeds every configuration runs before its first look
GROWTH = 1.5        # each planned look has about this many times the seeds of the last
MAX_SEEDS = 16      # --max-seeds unless given: a cell still open at 16 seeds is called "capped"
ALPHA = 0.05        # the chance of any wrong "differs" or "matches" of one cell, over all its looks
STATUSES = ("differs", "matches", "capped", "open")
BOUNDARIES = ("obf", "bonferroni")  # how alpha is spread over the looks (module docstring)
CALIBRATION_SWEEPS = 200_000  # null sweeps behind obf_constant: its false-positive rate within ~0.0005 of alpha
CALIBRATION_SEED = 0          # fixed, so that a plan's boundary is the same on every machine and on --resume


class SequentialError(ValueError):
    """A `--seeds auto` setting that cannot work; the message names it and the fix."""


@dataclass(frozen=True)
class Plan:
    first_seed: int = 0                # seeds first_seed, first_seed + 1, ... in this order
    cap: int = MAX_SEEDS               # the most seeds a configuration runs (--max-seeds)
    match_margin: float | None = None  # |difference| below this (metric units) decides "matches"; None: never
    alpha: float = ALPHA               # the chance of a wrong verdict over all looks (module docstring)
    first: int = FIRST_SEEDS           # seeds of the first look
    boundary: str = "obf"              # one of BOUNDARIES: each look's nominal level

    def __post_init__(self):
        if self.cap < self.first:
            raise SequentialError(f"--max-seeds must be >= {self.first} (the seeds of the first look), got {self.cap}")
        if self.first < 2:
            raise SequentialError(f"the first look needs >= 2 seeds for a t-interval, got {self.first}")
        if self.match_margin is not None and not self.match_margin > 0:
            raise SequentialError(f"match_margin must be > 0 (metric units) or None, got {self.match_margin}")
        if not 0 < self.alpha < 1:
            raise SequentialError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.boundary not in BOUNDARIES:
            raise SequentialError(f"boundary must be one of {', '.join(BOUNDARIES)}, got {self.boundary!r}")

    @property
    def looks(self) -> tuple[int, ...]:
        """Seed counts at which a cell is looked at: first, then x GROWTH (rounded up), ending at the cap."""
        out = [self.first]
        while out[-1] < self.cap:
            out.append(min(self.cap, math.ceil(out[-1] * GROWTH)))
        return tuple(out)

    @property
    def levels(self) -> tuple[float, ...]:
        """Confidence level of each look's interval: 1 - p_k (module docstring)."""
        from scipy import stats

        n = np.asarray(self.looks, dtype=float)  # (K,)
        if self.boundary == "bonferroni":
            return tuple(float(x) for x in np.full(len(n), 1.0 - self.alpha / len(n)))
        c = obf_constant(self.looks, self.alpha)
        return tuple(float(x) for x in 1.0 - 2.0 * stats.norm.sf(c * np.sqrt(n[-1] / n)))

    def seeds(self, n: int) -> list[int]:
        """The first n seeds of this plan."""
        return list(range(self.first_seed, self.first_seed + n))

    def describe(self) -> str:
        """One sentence for a table's notes: the procedure and its looks."""
        looks = ", ".join(f"{n} (1 − {1 - lv:.2g})" for n, lv in zip(self.looks, self.levels))
        rule = ("O'Brien-Fleming-type boundary, calibrated by simulation" if self.boundary == "obf"
                else f"Bonferroni over the {len(self.looks)} planned looks")
        margin = (f"; \"matches\" where it lies inside ±{self.match_margin:g}" if self.match_margin else "")
        return (f"The intervals are not plain {1 - self.alpha:.0%} ones: seeds were added sequentially (--seeds auto), "
                f"looks at {looks} seeds (each look's paired t-interval at the level in brackets: {rule}, "
                f"together {1 - self.alpha:.0%} and valid under optional stopping); a cell stopped at the first look whose "
                f"interval excludes 0 (\"differs\"){margin}, and shows that look's interval and seeds; a look whose "
                f"differences are all equal decides nothing; \"capped\": still open at {self.cap} seeds.")


@lru_cache(maxsize=None)
def obf_constant(looks: tuple[int, ...], alpha: float) -> float:
    """c of the O'Brien-Fleming-type boundary over `looks`: the value at which CALIBRATION_SWEEPS
    simulated null sweeps (normal differences, the same t-intervals and looks) have a false-positive
    rate of alpha at some look. The t-statistic's distribution is free of the mean and sd, so one
    calibration holds for every cell; bisection on c, the rate falling as c grows."""
    from scipy import stats

    rng = np.random.default_rng(CALIBRATION_SEED)
    d = rng.standard_normal((CALIBRATION_SWEEPS, looks[-1]))                     # (S, cap)
    n = np.asarray(looks)                                                       # (K,)
    t = np.stack([d[:, :k].mean(1) / d[:, :k].std(1, ddof=1) * math.sqrt(k) for k in looks], 1)  # (S, K)
    t = np.abs(t)

    def rate(c: float) -> float:
        p = 2.0 * stats.norm.sf(c * np.sqrt(n[-1] / n))                        # (K,) nominal levels
        return float((t > stats.t.isf(p / 2.0, n - 1)).any(axis=1).mean())

    lo, hi = 0.5, 10.0
    for _ in range(40):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if rate(mid) > alpha else (lo, mid)
    return hi


@dataclass(frozen=True)
class Verdict:
    status: str   # one of STATUSES
    n: int        # seeds in the look that decided, or the last look made (0: none made yet)
    pairs: int    # seeds of that look with a finite value in the cell and its baseline
    mean: float   # mean paired difference, cell - baseline (metric units); NaN without pairs
    lo: float     # the look's interval at its level (Plan.levels); NaN below 2 pairs or without spread
    hi: float


def decide(lo: float, hi: float, margin: float | None) -> str:
    """"differs" if [lo, hi] excludes 0, "matches" if it lies inside (-margin, margin), else "open" (NaN: open)."""
    if lo > 0.0 or hi < 0.0:
        return "differs"
    if margin is not None and lo > -margin and hi < margin:
        return "matches"
    return "open"


def verdict(cell: dict, base: dict, plan: Plan) -> Verdict:
    """The cell's verdict against its baseline, looks replayed in order: the first look that decides,
    else the last look made ("capped" if it was the cap's). A look is made once both ran its seeds."""
    last = Verdict("open", 0, 0, math.nan, math.nan, math.nan)
    levels = plan.levels
    for k, n in enumerate(plan.looks):
        seeds = plan.seeds(n)
        if not all(s in cell and s in base for s in seeds):
            break
        d = [cell[s] - base[s] for s in seeds if math.isfinite(cell[s]) and math.isfinite(base[s])]
        mean, lo, hi = t_interval(d, levels[k])
        status = decide(lo, hi, plan.match_margin)
        if status != "open":
            return Verdict(status, n, len(d), mean, lo, hi)
        last = Verdict("capped" if k == len(plan.looks) - 1 else "open", n, len(d), mean, lo, hi)
    return last


def targets(values: list[dict], baseline_of: list[int | None], plan: Plan) -> list[int]:
    """How many seeds each configuration needs now: the first look's, and for every open cell (and
    its baseline, with which it pairs) its next look's. values[c]: {seed: value} of configuration c's
    finished seeds; baseline_of[c]: the configuration c is compared with (None: not compared)."""
    out = [plan.looks[0]] * len(values)
    for c, b in enumerate(baseline_of):
        if b is None:
            continue
        v = verdict(values[c], values[b], plan)
        if v.status != "open" or v.n == 0:
            continue
        nxt = plan.looks[plan.looks.index(v.n) + 1]
        out[c], out[b] = max(out[c], nxt), max(out[b], nxt)
    return out


def simulate(plan: Plan, effect: float, sd: float, sweeps: int, rng: np.random.Generator,
             level: float | None = None) -> dict[str, np.ndarray]:
    """Many sweeps of one cell against its baseline at once: each seed's error is a fixed mean plus
    N(0, sd²) noise, independently per trial, the cell's mean `effect` above the baseline's. The same
    looks and rule as `verdict` (level: every look's, default plan.levels; 0.95 is the uncorrected
    procedure). Returns per sweep "status" (index into STATUSES) and "n" (the cell's seeds; its
    baseline ran as many for it), and "mean" (the deciding look's mean difference)."""
    from scipy import stats

    levels = plan.levels if level is None else (level,) * len(plan.looks)
    d = rng.normal(effect, sd, (sweeps, plan.cap)) - rng.normal(0.0, sd, (sweeps, plan.cap))  # (S, cap)
    status = np.full(sweeps, STATUSES.index("open"))
    n_used = np.zeros(sweeps, dtype=int)
    mean_at = np.full(sweeps, math.nan)
    undecided = np.ones(sweeps, dtype=bool)
    for k, n in enumerate(plan.looks):
        mean = d[:, :n].mean(axis=1)                                                # (S,)
        sdev = d[:, :n].std(axis=1, ddof=1)                                         # (S,)
        half = np.where(np.ptp(d[:, :n], axis=1) > 0,                               # no spread: no interval
                        stats.t.ppf(0.5 + levels[k] / 2.0, n - 1) * sdev / math.sqrt(n), math.nan)
        lo, hi = mean - half, mean + half
        differs = (lo > 0) | (hi < 0)
        matches = ~differs & ((lo > -plan.match_margin) & (hi < plan.match_margin)
                              if plan.match_margin is not None else False)
        now = undecided & (differs | matches)
        status[now & differs] = STATUSES.index("differs")
        status[now & matches] = STATUSES.index("matches")
        n_used[undecided] = n
        mean_at[undecided] = mean[undecided]
        undecided &= ~now
    status[undecided] = STATUSES.index("capped")
    return {"status": status, "n": n_used, "mean": mean_at}
