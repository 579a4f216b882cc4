"""The paper's findings as claims, graded on committed runs of two disjoint seed sets.

docs/claims.json lists every empirical statement of the paper's results sections (and the project's own
claims about its quick preset). A testable claim names a sweep and preset, the cells it is about, the cell
each one is compared with (`against`: the cell's config with these keys replaced; a null value drops the
key), the metric (final test error unless it says otherwise) and what it claims:

    lower | higher   every cell's paired 95 % t-interval of (cell − against) over the seeds both ran
                     excludes 0 on that side
    matches          every cell's interval lies inside ± `margin` (declared in the file before the run):
                     an equivalence rule, not the absence of significance

Per committed run (one seed set) a claim is "yes" when every cell's interval is on the claimed side,
"contradicted" when some cell's is on the opposite side (for matches: wholly outside ± margin), and
"no" otherwise. Over two runs on disjoint seeds (`--seed-start`) the verdict is

    yes           yes on both sets
    contradicted  contradicted on both sets
    mixed         contradicted on one set and not on the other
    no            otherwise

All four are results. A claim the quick scale cannot test carries `"testable": false` and its reason
(`why`); a testable one whose sweep lacks a committed run on either seed set carries `pending`, what is
missing, until both are committed.
The per-seed values come from each run's trials.csv (written by `python -m sweeper.docs add`). No torch,
no Ray, no pandas here: CI's docs test runs it.

    python -m sweeper.docs             # regrade and rewrite README.md's and docs/RESULTS.md's claims tables
    pytest tests/test_claims.py -q
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from sweeper.analysis.stats import paired_diff

DIRECTIONS = ("lower", "higher", "matches")
METRICS = {"test_error": "final_test_error", "val_error": "final_val_error",
           "sensitivity_mean": "final_sensitivity_mean", "sparsity": "final_sparsity", "g0_norm": "final_g0_norm",
           "loss_mur": "final_loss_mur"}
TRIALS_CSV = "trials.csv"
VERDICTS = ("yes", "no", "mixed", "contradicted")


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
            raise ClaimError(f"{path}: claim {name!r} needs {sorted(missing) or 'cells'}; see sweeper/docgen/claims.py")
        if c["direction"] not in DIRECTIONS:
            raise ClaimError(f"{path}: claim {name!r}: direction {c['direction']!r}; use one of {DIRECTIONS}")
        if c["direction"] == "matches" and not (isinstance(c.get("margin"), (int, float)) and c["margin"] > 0):
            raise ClaimError(f"{path}: claim {name!r} says `matches`: declare its equivalence `margin` (> 0, in "
                             f"the metric's units) before the run")
        if c.get("metric", "test_error") not in METRICS:
            raise ClaimError(f"{path}: claim {name!r}: metric {c.get('metric')!r}; use one of {sorted(METRICS)}")
    return claims


# ---------------------------------------------------------------- one run's per-seed values

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


def values(trials: list[dict], cell: dict, base: dict, metric: str, where: str) -> dict[int, float]:
    """{seed: final metric} of the finished trials that are `cell`. A cell must name one configuration:
    two trials of one seed in it are an error naming the keys to add."""
    col = METRICS[metric]
    out: dict[int, float] = {}
    for t in trials:
        if not all(_same(t[k] if k in t else base.get(k), v) for k, v in cell.items()):
            continue
        if t.get("status") not in (None, "", "finished"):
            continue
        seed = int(t["seed"])
        if seed in out:
            raise ClaimError(f"{where}: cell {cell} holds several trials of seed {seed}; name the keys that tell "
                             f"them apart")
        try:
            v = float(t.get(col) or "nan")
        except ValueError:
            v = math.nan
        if math.isfinite(v):
            out[seed] = v
    return out


def reference(cell: dict, against: dict) -> dict:
    """The cell a claim compares `cell` with: its keys replaced by `against`'s, a null value dropping the key."""
    ref = {**cell, **against}
    return {k: v for k, v in ref.items() if v is not None}


def compare(trials: list[dict], base: dict, cell: dict, against: dict, metric: str, where: str) -> dict:
    """Paired difference (cell − reference) over the seeds both finished: {cell, ref, d, lo, hi, n}."""
    ref = reference(cell, against)
    a = values(trials, cell, base, metric, where)
    b = values(trials, ref, base, metric, where)
    if not a or not b:
        missing = cell if not a else ref
        raise ClaimError(f"{where}: no finished trial is the cell {missing}; fix the claim's cells or against")
    seeds = sorted(set(a) & set(b))
    d, lo, hi, n = paired_diff([a[s] for s in seeds], [b[s] for s in seeds])
    return {"cell": cell, "ref": ref, "d": d, "lo": lo, "hi": hi, "n": n}


# ---------------------------------------------------------------- verdicts

def outcome(lo: float, hi: float, direction: str, margin: float | None = None) -> str:
    """One cell on one seed set: "for" (interval on the claimed side), "against" (on the opposite side; for
    matches, wholly outside ± margin) or "open" (NaN bounds included)."""
    if math.isnan(lo) or math.isnan(hi):
        return "open"
    if direction == "lower":
        return "for" if hi < 0 else "against" if lo > 0 else "open"
    if direction == "higher":
        return "for" if lo > 0 else "against" if hi < 0 else "open"
    m = float(margin)
    return "for" if -m <= lo and hi <= m else "against" if lo > m or hi < -m else "open"


def set_verdict(outcomes: list[str]) -> str:
    """One seed set: yes (every cell for), contradicted (some cell against), no (otherwise)."""
    if "against" in outcomes:
        return "contradicted"
    return "yes" if outcomes and all(o == "for" for o in outcomes) else "no"


def combine(per_set: list[str]) -> str:
    """The verdict over two disjoint seed sets (see the module docstring)."""
    if len(per_set) != 2:
        raise ValueError(f"a verdict needs exactly two seed sets, got {len(per_set)}")
    a, b = per_set
    if a == b == "contradicted":
        return "contradicted"
    if "contradicted" in (a, b):
        return "mixed"
    return "yes" if a == b == "yes" else "no"


def grade(claim: dict, runs: list[dict]) -> dict:
    """{"verdict": one of VERDICTS, or None with `status` saying why; "sets": [(run name, set verdict,
    [comparison])]} for a testable claim over the committed runs of its sweep and preset."""
    mine = [r for r in runs if (r["sweep"], r["preset"]) == (claim["sweep"], claim["preset"])]
    sets = []
    for run in mine:
        where = f"docs/runs/{run['name']}"
        if not run["trials"]:
            raise ClaimError(f"{where}: no {TRIALS_CSV}; add the run again with `python -m sweeper.docs add`")
        base = run["meta"].get("base") or {}
        metric = claim.get("metric", "test_error")
        comps = [compare(run["trials"], base, cell, claim["against"], metric, where) for cell in claim["cells"]]
        outs = [outcome(c["lo"], c["hi"], claim["direction"], claim.get("margin")) for c in comps]
        sets.append((run["name"], set_verdict(outs), comps))
    if len(sets) < 2:
        status = "one seed set committed" if sets else "not committed"
        return {"verdict": None, "status": status, "sets": sets}
    if len(sets) > 2:
        raise ClaimError(f"claim {claim['claim']!r}: {len(sets)} committed runs of {claim['sweep']} "
                         f"({claim['preset']}); keep two on disjoint seeds")
    return {"verdict": combine([v for _, v, _ in sets]), "status": "", "sets": sets}


# ---------------------------------------------------------------- text

def _fmt(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def comparison_text(c: dict, metric: str) -> str:
    unit = "" if metric == "test_error" else f" ({metric})"
    if math.isnan(c["lo"]):
        return f"Δ{unit} {_fmt(c['d'])} (n={c['n']}, no interval)"
    return f"Δ{unit} {_fmt(c['d'])} [{_fmt(c['lo'])}, {_fmt(c['hi'])}]"


def verdict_text(claim: dict, graded: dict | None, command: str) -> str:
    if claim.get("testable", True) is False:
        return "not testable here"
    if graded["verdict"] is None:
        return f"pending ({graded['status']}): `{command}`"
    return f"**{graded['verdict']}**" if graded["verdict"] == "yes" else graded["verdict"]


def evidence_text(claim: dict, graded: dict | None) -> str:
    if claim.get("testable", True) is False:
        return claim["why"]
    metric = claim.get("metric", "test_error")
    rule = f"equal means inside ± {claim['margin']:g}; " if claim["direction"] == "matches" else ""
    parts = []
    for name, v, comps in graded["sets"]:
        seeds = name.rsplit("-s", 1)[-1]
        parts.append(f"s{seeds}: {v}, " + ", ".join(comparison_text(c, metric) for c in comps))
    return (rule + "; ".join(parts)) if parts else "—"
