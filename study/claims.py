"""The paper's findings as claims, each graded once per comparison on every committed seed of it.

docs/claims.json lists every empirical statement of the paper's results sections (and the project's own
claims about its quick preset). A testable claim names a sweep and preset, the cells it is about, the cell
each one is compared with (`against`: the cell's config with these keys replaced; a null value drops the
key), the metric (final test error unless it says otherwise), what it claims, and the smallest difference
that matters, declared with the rule that gives it (docs/DECISIONS.md) before any run that grades it:

    lower | higher   `effect`: the effect size, in the metric's units
    matches          `margin`: equal means lie inside ± margin

Each cell against its reference is a comparison of two full configurations (study/evidence.py). It is
graded once, on every committed trial of both (whichever sweep ran it, each configuration and seed once),
and every claim naming it cites that grade, at the smallest size those claims declare. The seeds both
configurations ran, sorted, are split into two disjoint halves (the first ceil(n/2) and the rest: the
replication rule), and each half's paired 95 % t-interval of (cell − reference) decides

    yes           on the claimed side of 0 (matches: inside ± margin)
    contradicted  on the other side of 0 (matches: wholly outside ± margin)
    absent        inside ± effect, not excluding 0: the effect is ruled out at the size that matters
    undecided     none of these

The comparison is what both halves say; `disagree` when they decide differently (one shows the effect,
the other its opposite or its absence: a real disagreement), `undecided` otherwise. An undecided one
`leans` to the pooled interval's verdict when both halves' means point that way (the same sign, one half
underpowered), and says the seeds per half that would decide it at its pooled effect and spread (power
0.8; toward the verdict it leans to). A claim of several cells is contradicted when one cell is, else
disagree when one disagrees, else yes when every cell is, else absent when one is, else undecided. A
claim the quick scale cannot test carries `"testable": false` and its reason (`why`); a testable one whose
sweep lacks a committed run on either seed set carries `pending` until both are.
No torch, no Ray, no pandas here: CI's docs test runs it.

    python -m study.docs             # regrade: README.md's claims summary, docs/RESULTS.md's table, docs/claims.png
    pytest tests/test_claims.py -q
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

from study.evidence import EvidenceError, as_number, index
from sweeper.analysis.stats import paired_diff
from sweeper.trial_identity import identity, row_config

DIRECTIONS = ("lower", "higher", "matches")
METRICS = {"test_error": "final_test_error", "val_error": "final_val_error",
           "sensitivity_mean": "final_sensitivity_mean", "sparsity": "final_sparsity", "g0_norm": "final_g0_norm",
           "loss_mur": "final_loss_mur"}
TRIALS_CSV = "trials.csv"
VERDICTS = ("yes", "contradicted", "absent", "disagree", "undecided")
MEANING = {  # one sentence each, for RESULTS.md and the README
    "yes": "both halves of the seeds show the effect in the claimed direction (95 % interval on that side of 0; "
           "for matches: inside ± the margin)",
    "contradicted": "both halves show the opposite (the interval on the other side of 0; for matches: outside "
                    "± the margin)",
    "absent": "on both halves the interval lies inside ± the declared effect size: an effect of the size that "
              "matters is ruled out",
    "disagree": "the two halves decide differently (one shows the effect, the other its opposite or its absence): "
                "a real disagreement, not too few seeds",
    "undecided": "the halves do not both decide: beside it are the seeds per half that would decide it at its "
                 "pooled effect and spread (power 0.8), and `leans X` where both halves' means point to X and the "
                 "pooled interval shows X (one half underpowered)",
}
POWER = 0.80  # the power at which `need` counts the seeds a verdict takes
MAX_NEED = 1000      # seeds per half above which `need` says "more than"


class ClaimError(ValueError):
    """docs/claims.json or a committed run cannot grade a claim; the message names the fix."""


# ---------------------------------------------------------------- the file

def load(path: Path) -> list[dict]:
    """The claims of docs/claims.json, each checked for the keys its kind needs."""
    claims = json.loads(path.read_text())
    for c in claims:
        name = c.get("claim", c)
        if "claim" not in c or "source" not in c:
            raise ClaimError(f"{path}: claim {name!r} needs `claim` (the statement) and `source` (where the paper "
                             f"makes it)")
        if c.get("testable", True) is False:
            if not c.get("why"):
                raise ClaimError(f"{path}: untestable claim {name!r} needs `why` (what the quick scale lacks)")
            continue
        missing = {"sweep", "preset", "cells", "against", "direction"} - set(c)
        if missing or not c["cells"]:
            raise ClaimError(f"{path}: claim {name!r} needs {sorted(missing) or 'cells'}; see study/claims.py")
        if c["direction"] not in DIRECTIONS:
            raise ClaimError(f"{path}: claim {name!r}: direction {c['direction']!r}; use one of {DIRECTIONS}")
        key = "margin" if c["direction"] == "matches" else "effect"
        if not (isinstance(c.get(key), (int, float)) and not isinstance(c[key], bool) and c[key] > 0):
            raise ClaimError(f"{path}: claim {name!r} says `{c['direction']}`: declare its `{key}` (> 0, in the "
                             f"metric's units, the smallest difference that matters) before the run")
        if c.get("metric", "test_error") not in METRICS:
            raise ClaimError(f"{path}: claim {name!r}: metric {c.get('metric')!r}; use one of {sorted(METRICS)}")
    return claims


def size(claim: dict) -> float:
    """The claim's declared size: its margin for matches, its effect otherwise."""
    return float(claim["margin"] if claim["direction"] == "matches" else claim["effect"])


# ---------------------------------------------------------------- the trials a cell names

def read_trials(folder: Path) -> list[dict]:
    """The rows of a committed run's trials.csv (one per trial: its varying config keys, seed, status and
    final metrics); [] when the run has none."""
    path = folder / TRIALS_CSV
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _same(have, want) -> bool:
    if have is None or have == "":
        return want is None
    if isinstance(want, bool):
        return str(have).strip().lower() == str(want).lower()
    if isinstance(want, (int, float)):
        try:
            return math.isclose(float(have), float(want))
        except ValueError:
            return False
    return str(have) == str(want)


def matches(trials: list[dict], configs: list[dict], cell: dict) -> list[tuple[dict, dict]]:
    """(row, its full configuration) of the finished rows of `trials` that are `cell`; `configs` are the
    rows' trial_identity.row_config, so a key a trials.csv lacks comes from the row's variant, base or default."""
    return [(t, c) for t, c in zip(trials, configs) if t.get("status") in (None, "", "finished")
            and all(_same(c.get(k), v) for k, v in cell.items())]


def run_configs(run: dict) -> list[dict]:
    """Each trials.csv row's full configuration (committed_runs.read_run computes them once per run)."""
    return run["configs"] if "configs" in run else [row_config(t, run["meta"]) for t in run["trials"]]


def values(trials: list[dict], configs: list[dict], cell: dict, metric: str, where: str) -> dict[int, float]:
    """{seed: final metric} of the finished trials that are `cell` (`configs`: run_configs). A cell must
    name one configuration: two trials of one seed in it are an error naming the keys to add."""
    col = METRICS[metric]
    out: dict[int, float] = {}
    for t, _ in matches(trials, configs, cell):
        seed = int(t["seed"])
        if seed in out:
            raise ClaimError(f"{where}: cell {cell} holds several trials of seed {seed}; name the keys that tell "
                             f"them apart")
        v = as_number(t.get(col))
        if math.isfinite(v):
            out[seed] = v
    return out


def reference(cell: dict, against: dict) -> dict:
    """The cell a claim compares `cell` with: its keys replaced by `against`'s, a null value dropping the key."""
    ref = {**cell, **against}
    return {k: v for k, v in ref.items() if v is not None}


def configuration(runs: list[dict], cell: dict, where: str) -> tuple:
    """The one full configuration (trial_identity.identity) that `cell` names in `runs` (its claim's sweep)."""
    ids = set()
    for run in runs:
        configs = run_configs(run)
        values(run["trials"], configs, cell, "test_error", where)  # one trial per seed
        ids |= {identity(c) for _, c in matches(run["trials"], configs, cell)}
    if not ids:
        raise ClaimError(f"{where}: no finished trial is the cell {cell}; fix the claim's cells or against")
    if len(ids) > 1:
        raise ClaimError(f"{where}: cell {cell} names {len(ids)} configurations; name the keys that tell them apart")
    return ids.pop()


# ---------------------------------------------------------------- verdicts

def orient(d: float, direction: str) -> float:
    """A difference with the claimed direction positive (lower: −d); matches keeps d."""
    return -d if direction == "lower" else d


def decide(lo: float, hi: float, direction: str, size: float) -> str:
    """One interval of (cell − reference): yes, contradicted, absent or undecided (NaN bounds: undecided)."""
    if math.isnan(lo) or math.isnan(hi):
        return "undecided"
    if direction == "matches":
        return "yes" if -size <= lo and hi <= size else "contradicted" if lo > size or hi < -size else "undecided"
    lo, hi = sorted((orient(lo, direction), orient(hi, direction)))
    if lo > 0:
        return "yes"
    if hi < 0:
        return "contradicted"
    return "absent" if -size < lo and hi < size else "undecided"


def combine(per_half: list[str]) -> str:
    """The verdict over two disjoint halves (see the module docstring)."""
    if len(per_half) != 2:
        raise ValueError(f"a verdict needs exactly two seed sets, got {len(per_half)}")
    a, b = per_half
    if a == b:
        return a
    return "disagree" if "undecided" not in (a, b) else "undecided"


def lean(half_means: list[float], pooled: str, direction: str, size: float) -> str | None:
    """For an undecided comparison: the pooled interval's verdict when both halves' means point to it (one
    half underpowered), else None (the halves point different ways, or the pooled interval decides nothing)."""
    if pooled == "undecided" or any(math.isnan(m) for m in half_means):
        return None
    if direction == "matches":
        inside = [abs(m) < size for m in half_means]
        same_side = len({m > 0 for m in half_means}) == 1
        ok = all(inside) if pooled == "yes" else not any(inside) and same_side
    elif pooled == "absent":
        ok = all(abs(m) < size for m in half_means)
    else:
        want = pooled == "yes"
        ok = all((orient(m, direction) > 0) == want and m != 0 for m in half_means)
    return pooled if ok else None


def seeds_needed(d: float, sd: float, direction: str, size: float, target: str | None = None
                 ) -> tuple[int | None, str]:
    """(seeds per half, the verdict they reach) for power 0.8 to decide at the pooled effect d and the
    spread sd of the paired differences: n with (t_.975 + t_.80)(n − 1) · sd / √n below the gap from d to
    the bound it must clear; for `target` when given, else the nearer of the verdicts d points to.
    (None, "") when no spread or no gap."""
    from scipy import stats  # a slow import, needed only here

    e = orient(d, direction)
    if direction == "matches":
        gaps = [(size - abs(d), "yes")] if abs(d) < size else [(abs(d) - size, "contradicted")]
    else:
        gaps = [(abs(e), "yes" if e > 0 else "contradicted")] + ([(size - abs(e), "absent")] if abs(e) < size else [])
    best: tuple[int | None, str] = (None, "")
    for gap, reach in gaps:
        if target is not None and reach != target:
            continue
        if not (gap > 0 and sd > 0 and math.isfinite(sd)):
            continue
        z = stats.norm.ppf(0.975) + stats.norm.ppf(POWER)
        n = max(2, int((z * sd / gap) ** 2))  # the normal answer; t's quantiles are larger, so count up from it
        while n <= MAX_NEED and (stats.t.ppf(0.975, n - 1) + stats.t.ppf(POWER, n - 1)) * sd / math.sqrt(n) > gap:
            n += 1
        if best[0] is None or n < best[0]:
            best = (n, reach)
    return best


def halves(seeds: list[int]) -> tuple[list[int], list[int]]:
    """The seeds, sorted, as two disjoint halves: the first ceil(n/2) and the rest."""
    s = sorted(seeds)
    k = (len(s) + 1) // 2
    return s[:k], s[k:]


def _interval(a: dict[int, float], b: dict[int, float], seeds: list[int]) -> dict:
    d, lo, hi, n = paired_diff([a[s] for s in seeds], [b[s] for s in seeds])
    sd = statistics.stdev([a[s] - b[s] for s in seeds]) if n >= 2 else math.nan
    return {"seeds": seeds, "d": d, "lo": lo, "hi": hi, "n": n, "sd": sd}


def grade_pair(a: dict[int, float], b: dict[int, float], direction: str, size: float) -> dict:
    """One comparison: {sets: [half, half], pooled, verdict, lean, need} over the seeds both a and b hold
    ({seed: value}); each half and the pooled interval also carry their own verdict."""
    seeds = sorted(set(a) & set(b))
    sets = [_interval(a, b, h) for h in halves(seeds)]
    pooled = _interval(a, b, seeds)
    for x in (*sets, pooled):
        x["verdict"] = decide(x["lo"], x["hi"], direction, size)
    verdict = combine([x["verdict"] for x in sets])
    out = {"sets": sets, "pooled": pooled, "verdict": verdict, "lean": None, "need": (None, ""), "size": size}
    if verdict == "undecided":
        out["lean"] = lean([x["d"] for x in sets], pooled["verdict"], direction, size)
        out["need"] = seeds_needed(pooled["d"], pooled["sd"], direction, size, out["lean"])
    return out


def claim_verdict(verdicts: list[str]) -> str:
    """A claim over its cells' comparisons: contradicted when one cell is, else disagree when one disagrees,
    else yes when every cell is yes, else absent when one is absent (the claim holds for every cell or not
    at all), else undecided."""
    for v in ("contradicted", "disagree"):
        if v in verdicts:
            return v
    if verdicts and all(v == "yes" for v in verdicts):
        return "yes"
    return "absent" if "absent" in verdicts else "undecided"


# ---------------------------------------------------------------- every claim, each comparison once

def _pairs(claim: dict, runs: list[dict]) -> list[tuple]:
    """The comparisons a claim names, as (key, flipped, cell, reference): key = (the two configurations in
    one fixed order, metric, whether a margin or an effect size applies), flipped when the claim's cell is
    the second of the two. Checks every cell against the runs of the claim's sweep and preset."""
    mine = [r for r in runs if (r["sweep"], r["preset"]) == (claim["sweep"], claim["preset"])]
    where = f"docs/runs/{claim['sweep']}-{claim['preset']}-*"
    out = []
    for cell in claim["cells"] if mine else []:
        ref = reference(cell, claim["against"])
        x, y = configuration(mine, cell, where), configuration(mine, ref, where)
        key = (*sorted((x, y), key=repr), claim.get("metric", "test_error"), claim["direction"] == "matches")
        out.append((key, repr(y) < repr(x), cell, ref))  # repr orders configurations whatever their value types
    return out


def grade_all(claims: list[dict], runs: list[dict]) -> list[dict | None]:
    """One grade per testable claim (None for an untestable one): {"verdict": one of VERDICTS, or None with
    `status` saying why; "cells": [each cell's comparison, seen from this claim]; "lean"; "need"}. A
    comparison (cell and reference configuration, metric) is graded once, at the smallest size the claims
    naming it declare, and each cell lists the other claims that cite it (`shared`)."""
    try:
        idx = index(runs)
    except EvidenceError as e:
        raise ClaimError(str(e)) from None
    plan: list[list[tuple] | str | None] = []  # per claim: its comparisons, why it is pending, or None
    sizes: dict[tuple, float] = {}
    citing: dict[tuple, list[str]] = {}
    for c in claims:
        if c.get("testable", True) is False:
            plan.append(None)
            continue
        pairs = _pairs(c, runs)  # checks the cells of a pending claim's committed run too
        committed = sum((r["sweep"], r["preset"]) == (c["sweep"], c["preset"]) for r in runs)
        if committed < 2:
            plan.append("one seed set committed" if committed else "not committed")
            continue
        for key, *_ in pairs:
            sizes[key] = min(sizes.get(key, math.inf), size(c))
            citing.setdefault(key, []).append(c["claim"])
        plan.append(pairs)
    graded: dict[tuple, dict] = {}
    sweep_of = {r["name"]: r["sweep"] for r in runs}
    adaptive = {r["name"] for r in runs if r["meta"].get("max_seeds")}  # --seeds auto runs
    out: list[dict | None] = []
    for c, pairs in zip(claims, plan):
        if pairs is None:
            out.append(None)
            continue
        if isinstance(pairs, str):
            out.append({"verdict": None, "status": pairs, "cells": [], "lean": None, "need": (None, "")})
            continue
        views = []
        for key, flipped, cell, ref in pairs:
            x, y, metric, _ = key
            if (key, flipped, c["direction"]) not in graded:
                a, b = (_finite(idx.get(k, {}), METRICS[metric]) for k in ((y, x) if flipped else (x, y)))
                graded[key, flipped, c["direction"]] = grade_pair(a, b, c["direction"], sizes[key])
            g = graded[key, flipped, c["direction"]]
            held = sorted({n for k in (x, y) for s in g["pooled"]["seeds"] for n in idx[k][s][0]})
            views.append({**g, "cell": cell, "ref": ref, "runs": held, "sweeps": sorted({sweep_of[n] for n in held}),
                          "shared": [n for n in dict.fromkeys(citing[key]) if n != c["claim"]],
                          "adaptive": [n for n in held if n in adaptive]})
        out.append(_claim_grade(views))
    return out


def _finite(trials: dict[int, tuple[list[str], dict]], col: str) -> dict[int, float]:
    """{seed: the metric} of one configuration's trials (evidence.index), where it is finite."""
    vals = {s: as_number(row.get(col)) for s, (_, row) in trials.items()}
    return {s: v for s, v in vals.items() if math.isfinite(v)}


def _claim_grade(views: list[dict]) -> dict:
    """A claim's grade from its cells' comparisons: the verdict, the verdict every undecided cell leans to
    (where one), and the most seeds per half its undecided cells need (where each has a count)."""
    verdict = claim_verdict([v["verdict"] for v in views])
    undecided = [v for v in views if v["verdict"] == "undecided"]
    leans = {v["lean"] for v in undecided} | {v["verdict"] for v in views if v["verdict"] != "undecided"}
    needs = [v["need"] for v in undecided if v["need"][0] is not None]
    need = max(needs, key=lambda n: n[0]) if needs and len(needs) == len(undecided) else (None, "")
    lean_ = leans.pop() if verdict == "undecided" and len(leans) == 1 else None
    return {"verdict": verdict, "status": "", "cells": views, "lean": lean_, "need": need}


# ---------------------------------------------------------------- text

def signed(x: float) -> str:
    """+1.90 / −1.90, with a true minus sign, as the tables print a difference."""
    return f"{x:+.2f}".replace("-", "−")


def seed_text(seeds: list[int]) -> str:
    """s0-7, or s0-4,10-12 for seeds with gaps."""
    parts, start = [], None
    for i, s in enumerate(seeds):
        if start is None:
            start = s
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            parts.append(f"{start}-{s}" if s != start else f"{s}")
            start = None
    return "s" + ",".join(parts) if parts else "s-"


def interval_text(x: dict, metric: str) -> str:
    unit = "" if metric == "test_error" else f" ({metric})"
    if math.isnan(x["lo"]):
        return f"Δ{unit} {signed(x['d'])} (n={x['n']}, no interval)"
    return f"Δ{unit} {signed(x['d'])} [{signed(x['lo'])}, {signed(x['hi'])}]"


def need_text(need: tuple[int | None, str]) -> str:
    n, target = need
    if n is None:
        return "no seed count follows from its spread"
    return f"needs more than {MAX_NEED} seeds per half" if n > MAX_NEED else f"needs ~{n} seeds per half ({target})"


def verdict_text(claim: dict, graded: dict | None, command: str) -> str:
    if claim.get("testable", True) is False:
        return "not testable here"
    if graded["verdict"] is None:
        return f"pending ({graded['status']}): `{command}`"
    v = graded["verdict"]
    if v == "yes":
        return "**yes**"
    if v == "undecided":
        leaning = f", leans {graded['lean']} (one half underpowered)" if graded["lean"] else ""
        return f"undecided{leaning}; {need_text(graded['need'])}"
    return v


def evidence_text(claim: dict, graded: dict | None) -> str:
    if claim.get("testable", True) is False:
        return claim["why"]
    if not graded["cells"]:
        return "—"
    metric = claim.get("metric", "test_error")
    kind = "equal means inside ±" if claim["direction"] == "matches" else "effect size"
    parts = []
    for v in graded["cells"]:
        halves_ = "; ".join(f"{seed_text(x['seeds'])}: {x['verdict']}, {interval_text(x, metric)}" for x in v["sets"])
        shared = f"; shared with: {', '.join(v['shared'])}" if v["shared"] else ""
        # a --seeds auto run added seeds where a cell was still open: those seeds depend on the results, so
        # the halves' plain 95 % intervals over them are approximate (docs/DECISIONS.md)
        adaptive = (f"; seeds partly chosen by --seeds auto ({', '.join(v['adaptive'])}): intervals approximate"
                    if v.get("adaptive") else "")
        parts.append(f"{halves_} ({kind} {v['size']:g}; trials of {', '.join(v['sweeps'])}{shared}{adaptive})")
    return " / ".join(parts)
