"""What `--resume` lets Tune restore, checked before Ray starts: Tune's experiment state and its tuner.pkl.

Tune writes `experiment_state-<start>.json` in place (not atomically), one per driver run, and
on restore reads only the newest by name; a torn one, or none, makes Tune log the error and start the
whole experiment again from nothing (a new trial with an empty config). So there must be one, and the
newest must parse: a torn one, when an earlier run's complete state is kept, is set aside with the
other state files of its run (renamed to `<name>.torn`, nothing deleted) and Tune restores the
earlier one; with none complete, `--resume` is refused in one line. A state that parses must hold the sweep's
trials: each config carries the keys every sweep trial has, and a grid's `trial_index` values are
distinct and inside the grid (sweep.json's n_trials).

Tune's restore unpickles tuner.pkl (and the callback and searcher states), so it runs whatever code
they hold: only folders one trusts are resumed. tuner.pkl is written once, when the experiment starts,
and sweep.json records its SHA-256 then (`tuner_digest`); `check_tuner` refuses a tuner.pkl that is not
that file (replaced or corrupted). That stops a swapped or damaged file, not someone who can rewrite
both files.

A grid's trials.json (its trial configs in trial_index order, from which --resume rebuilds the grid
for the trials Tune had not created by the stop: sweeper/driver/tuner.py) is checked the same way,
against the SHA-256 sweep.json records (`trials_digest`): a torn or edited list would give those
trials other configs than the ones the run started with.

    python -m sweeper.run ablation_radius --resume    # runs both checks first
"""
from __future__ import annotations

import hashlib
import json

from sweeper import storage as store
from sweeper.storage import TRIALS_FILE, grid_meta
from sweeper.driver.preflight import InputError
from trainables.config import SWEEP_KEYS

TORN = ".torn"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_tuner(exp, meta: dict) -> None:
    """InputError unless exp's tuner.pkl has the digest sweep.json recorded (`meta["tuner_digest"]`);
    an experiment started before digests were recorded has none to compare with, and passes."""
    want = meta.get("tuner_digest")
    if want is None:
        return
    got = sha256_hex(store.read_bytes(exp / store.TUNER_STATE))
    if got != want:
        raise InputError(f"{exp / store.TUNER_STATE} is not the file this experiment wrote when it started (SHA-256 "
                         f"{got[:12]}..., sweep.json records {want[:12]}...): it was replaced or corrupted, and Tune "
                         f"would unpickle it; restore it from a backup or start a new run without --resume")


def check_resumable(exp) -> list[str]:
    """Both checks on an experiment folder that --resume found (sweeper.run holds its lease): notes for
    stderr, or InputError (StorageError where a bucket cannot be read)."""
    meta = json.loads(store.read_text(exp / "sweep.json"))
    check_tuner(exp, meta)
    grid_trials(exp, meta)
    return check_state(exp, meta)


def grid_trials(exp, meta: dict) -> list[dict] | None:
    """The trial configs of a grid experiment, from its trials.json, checked against sweep.json's
    `trials_digest` (InputError, one line, where they differ or the file is gone); None for a search,
    --seeds auto, or a grid whose sweep.json records no trials.json."""
    want = meta.get("trials_digest")
    if want is None or not grid_meta(meta):
        return None
    kept = exp / TRIALS_FILE
    if not store.is_file(kept):
        raise InputError(f"{kept} is missing: it lists the grid's trials that --resume gives the trials Tune had "
                         f"not created yet; restore it from a copy, or start a new run without --resume")
    raw = store.read_bytes(kept)
    if sha256_hex(raw) != want:
        raise InputError(f"{kept} is not the list this experiment wrote when it started (SHA-256 "
                         f"{sha256_hex(raw)[:12]}..., sweep.json records {want[:12]}...): torn or edited, it would "
                         f"give trials other configs; restore it from a copy, or start a new run without --resume")
    return json.loads(raw)


def created_trials(exp) -> int:
    """How many trials Tune had created by its newest saved state (check_state has set any torn one aside)."""
    newest = _states(store.listdir(exp))[0]
    return len(json.loads(store.read_bytes(newest))["trial_data"])


def _problem(raw: bytes, meta: dict) -> tuple[str | None, bool]:
    """(why this state cannot be restored, whether it is torn) or (None, False) if it can."""
    try:
        data = json.loads(raw)  # bytes: a file cut inside a UTF-8 character is torn too
        trials = [json.loads(t) for t, _ in data["trial_data"]]
        configs = [t["config"] for t in trials]
        data["runner_data"]
    except (ValueError, KeyError, TypeError) as e:  # json's and UTF-8's errors are ValueErrors
        return f"{type(e).__name__}: {' '.join(str(e).split())}", True
    for t, c in zip(trials, configs):
        if not isinstance(c, dict) or (missing := [k for k in SWEEP_KEYS if k not in c]):
            return f"trial {t.get('trial_id')} has the config {c!r}, without {missing or SWEEP_KEYS}", False
    if grid_meta(meta):  # each trial one of the grid's n_trials points
        index = [c.get("trial_index") for c in configs]
        n = meta.get("n_trials")
        bad = [i for i in index if not isinstance(i, int) or n is None or not 0 <= i < n]
        if bad or len(set(index)) != len(index):
            return f"its trials' trial_index values {sorted(index, key=str)} are not distinct points of the " \
                   f"grid of {n} trials", False
    return None, False


def _states(files: list) -> list:
    """The experiment_state-*.json files among `files`, newest (greatest name, as Tune picks) first."""
    return sorted((f for f in files if store.EXPERIMENT_STATE.fullmatch(f.name)), key=lambda f: f.name, reverse=True)


def check_state(exp, meta: dict) -> list[str]:
    """Make the newest experiment state Tune will read a complete one of this sweep's trials; returns
    notes for stderr (a torn state set aside). InputError (one line) when no state can be restored."""
    files = store.listdir(exp)  # listed once: the moves below rename only files of torn states
    states = _states(files)
    if not states:  # Tune would start the experiment over with an empty config
        raise InputError(f"{exp} holds no saved Tune state (experiment_state-*.json): its driver ended before "
                         f"Tune's first save, so there is nothing to continue; start a new run without --resume")
    notes, torn = [], []
    for f in states:
        why, is_torn = _problem(store.read_bytes(f), meta)
        if why is None:
            break
        if not is_torn:
            raise InputError(f"{f} does not hold this sweep's trials ({why}); it was edited or belongs to another "
                             f"run, so it is not resumed: start a new run without --resume")
        torn.append((f, why))
    else:
        f, why = torn[0]
        raise InputError(f"{f} is torn ({why}) and {exp} keeps no earlier complete Tune state to fall back to; "
                         f"nothing can be resumed: start a new run without --resume")
    for f, why in torn:
        start = store.EXPERIMENT_STATE.fullmatch(f.name).group(1)  # the driver run's start, in each of its files
        for g in files:
            if g.name.endswith((f"-{start}.json", f"-{start}.pkl")):
                store.move(g, exp / (g.name + TORN))
        notes.append(f"note: {f} is torn ({why}); resuming from the previous complete state "
                     f"{states[len(torn)].name} (that run's state files are kept beside it as *{TORN})")
    return notes
