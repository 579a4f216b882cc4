"""Confirm a search's choice over fresh seeds: its best trial by validation error against its first
sample (the preset's hand-set values), two rows paired over seeds, tabulated on validation error.

A search ranks single-seed trials on the validation split, so its winner's margin is optimistic (the
best of n noisy numbers). Rerunning both configurations on seeds the search did not use, paired, says
whether the gain is real: the table's "· Δ [low, high]" of the best row against the base row, in
validation error (what a choice may rest on); the test error follows beside it in a note. The
validation images are the search's own (the split is fixed per data set), so a winner keeps some of
its selection advantage there; the test error, never chosen on, is the independent check.

    python -m sweeper.run hpo --preset quick --confirm results/hpo-<stamp>             # 2 configs x 5 seeds
    python -m sweeper.run hpo --preset quick --confirm results/hpo-<stamp> --dry-run   # what would run
"""
from __future__ import annotations

from search_spaces import Sweep
from sweeper.analysis.aggregate import SELECT_METRIC, AggregateError, load_trials, read_sweep
from sweeper.analysis.labels import py_value
from sweeper.analysis.ranking import ranking_frame
from trainables.config import TrainConfig

CONFIRM_SEEDS = 5  # default seeds per configuration


class ConfirmError(ValueError):
    """The folder is not a finished search this version can confirm; the message says what to pass."""


def confirm_sweep(search: Sweep, exp: str, seeds: int | None = None) -> Sweep:
    """The two-row Sweep `<search>_confirm`: every key of the search's best finished trial (lowest
    final validation error: ranking.ranking_frame's rank 1) except the searched ones, which are either
    the base values (sweep.json start_points, the baseline row) or the best trial's; seeds start past
    the search's own. Reads the search's files (a bucket's through the local cache), writes nothing."""
    from sweeper.storage import StorageError, report_inputs

    if not search.search:
        raise ConfirmError(f"--confirm takes a search's experiment folder; {search.name} is not a search "
                           f"(hpo and hpo_base are)")
    try:
        _, folder = report_inputs(exp)
        meta = read_sweep(folder) or {}
        if meta.get("name") != search.name:
            raise ConfirmError(f"--confirm {exp} holds a {meta.get('name', 'unnamed')} experiment, not "
                               f"{search.name}; pass a {search.name}-<stamp> folder")
        trials = load_trials(folder)
    except (AggregateError, StorageError) as e:
        raise ConfirmError(f"--confirm {exp}: {e}") from None
    space = list(meta["search"]["space"])
    starts = meta.get("start_points") or []
    if not starts:
        raise ConfirmError(f"--confirm {exp}: this search did not record its start point (it ran before searches "
                           f"started at their base values); run the search again")
    ranked = ranking_frame(trials, space, meta["search"].get("metric", SELECT_METRIC))
    done = ranked[(ranked["status"] == "finished") & ranked["rank"].notna()]
    if not len(done):
        raise ConfirmError(f"--confirm {exp}: no trial finished with a validation error; resume the search "
                           f"(--resume) or run it again")
    row = trials[trials["trial_id"] == done.iloc[0]["trial_id"]].iloc[0]
    common = {k: py_value(row[k]) if k in trials.columns else v  # a key the search did not set: the default it ran
              for k, v in TrainConfig().to_dict().items() if k != "seed" and k not in space}
    base = {k: starts[0][k] for k in space}
    best = {k: py_value(row[k]) for k in space}
    return Sweep(
        name=f"{search.name}_confirm", paper_ref=search.paper_ref,
        description=f"{search.name}'s best trial by validation error ({str(exp).rstrip('/').rsplit('/', 1)[-1]}) "
                    f"vs its base values, paired over fresh seeds",
        base=common, variants=[base] if best == base else [base, best],
        seeds=CONFIRM_SEEDS if seeds is None else seeds, first_seed=int(trials["seed"].max()) + 1,
        rows=("method", *space), cols=(), baseline=base, metric=SELECT_METRIC,  # decided on validation
        minutes_per_trial=search.minutes_per_trial)
