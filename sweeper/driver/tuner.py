"""The Ray Tune Tuner of a sweep: a grid over its trials, Optuna + ASHA for a search, or the `--seeds auto`
searcher, with its storage, failure config, checkpoints and callbacks; on --resume the stored one.

`make_tuner` writes the new experiment folder's sweep.json (the Sweep, preset, argv, commit) after
`build_tuner` has made Tune write its state there, so a folder with a sweep.json is one --resume can
continue. A grid's exact trial configs go to trials.json beside it: Tune creates a grid's trials
lazily and keeps none of the functions that fill their configs, so --resume rebuilds the same grid
from that list for the trials Tune had not yet created when the run stopped.

    python -m sweeper.run ablation_radius --preset quick
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from search_spaces import Sweep, SweepError
from sweeper import storage as store
from sweeper.driver.preflight import InputError
from sweeper.driver.provenance import source_commit
from sweeper.driver.tune_state import created_trials, grid_trials, sha256_hex
from sweeper.storage import TRIALS_FILE, grid_meta

MAX_FAILURES = 3  # restarts of a failed trial before it counts as failed (--max-failures; build_tuner)


def make_tuner(sweep: Sweep, trials: list[dict], args, exp_dir, resources: dict, lease):
    """The stored experiment's Tuner on --resume, else a new experiment folder (sweep.json) and its Tuner,
    with `lease` (sweeper/driver/lease.py) taken on the folder as soon as it exists. sweep.json records the
    SHA-256 of the tuner.pkl Tune wrote (`tuner_digest`), which --resume checks (sweeper/driver/tune_state.py)."""
    from ray import tune

    if args.resume:
        skip_callback_usage_tag()  # a new experiment's build_tuner skips it itself
        print(f"resuming {exp_dir}")
        if args.set or args.seeds is not None:
            print("note: --set and --seeds do not apply on --resume; the stored trial configs run on", file=sys.stderr)
        from trainables.tune import train_tune

        try:
            return tune.Tuner.restore(trainable=tune.with_resources(train_tune, resources), resume_unfinished=True,
                                      resume_errored=True, param_space=stored_grid(exp_dir),
                                      **store.prepare_restore(exp_dir))
        except ModuleNotFoundError as e:  # Tune's tuner.pkl names a module this version no longer has
            raise InputError(f"{exp_dir} was stored by a version of the sweeper with module {e.name!r}, which "
                             f"this one lacks; resume it from the commit that started it (sweep.json's "
                             f"\"commit\")") from None
    meta = {**asdict(sweep), "preset": args.preset, "n_trials": len(trials), "argv": sys.argv,
            "start_points": start_points(sweep, trials), "commit": source_commit(),
            "launch_order": launch_order(sweep, trials, args)}
    store.create_experiment(exp_dir)
    lease.acquire()
    tuner = build_tuner(sweep, trials, args, exp_dir, resources)  # Tune writes its tuner.pkl here
    meta["tuner_digest"] = sha256_hex(store.read_bytes(exp_dir / store.TUNER_STATE))
    if is_grid(sweep):  # before sweep.json, which records its digest
        kept = json.dumps(trials, indent=0).encode()
        store.write_bytes(exp_dir / TRIALS_FILE, kept)
        meta["trials_digest"] = sha256_hex(kept)
    # sweep.json last: a folder that has one is an experiment that --resume can continue
    store.write_text(exp_dir / "sweep.json", json.dumps(meta, indent=1, default=str))
    return tuner


def skip_callback_usage_tag() -> None:
    """Tune's usage statistics count a run's callbacks by importing every tracker integration Ray ships
    (MLflow, W&B, Aim, Comet: seconds of each driver's start) to test each callback's class. With usage
    statistics off (sweeper.run sets RAY_USAGE_STATS_ENABLED=0 where the environment does not decide) the
    count goes nowhere, so it is skipped; a user who turns them on gets Ray's own behaviour."""
    if os.environ.get("RAY_USAGE_STATS_ENABLED") == "0":
        from ray.air._internal import usage

        usage.tag_callbacks = lambda callbacks: False


def build_tuner(sweep: Sweep, trials: list[dict], args, exp_dir: Path, resources: dict):
    from ray import tune

    from sweeper.driver import stopping
    from sweeper.driver.live import live_callback

    skip_callback_usage_tag()
    from sweeper.driver.mlflow_log import mlflow_callback
    from sweeper.driver.wandb_log import wandb_callback
    from trainables.tune import train_tune

    trainable = tune.with_resources(train_tune, resources)
    varying = sorted(varying_keys(trials))
    row_keys = [k for k in (*sweep.rows, *varying) if k not in sweep.cols]  # the tables' row and column keys
    reporter = tune.CLIReporter(
        metric_columns={"step": "step", "val_error": "val %", "test_error": "err %", "best_test_error": "best %",
                        "loss_total": "loss", "steps_per_s": "steps/s"},
        parameter_columns=[*varying, "seed"] if not sweep.search else list(sweep.search["space"]),
        max_report_frequency=30)
    # num_to_keep=2: Tune forces a save of its whole experiment state (O(trials)) once a trial has
    # checkpointed num_to_keep times since the last save, besides its own period (>= 10 s). With 1 it
    # saved after every checkpoint, which made the driver quadratic in the trials
    # (benchmarks/driver_scale.py); trials checkpoint at most every checkpoint_every_s (10 s), so with
    # 2 the saves keep Tune's period. A killed driver resumes a trial from the checkpoint its last save
    # names (at most one period old): Tune deletes that one only on the trial's second checkpoint
    # after it, and forces a save naming the newer one; a kill before that save is stored leaves a
    # state naming the deleted one (docs/RELIABILITY.md, What is not covered).
    run_config = tune.RunConfig(
        **store.ray_storage(exp_dir),  # name, storage_path (+ storage_filesystem for a URI)
        # a trial whose worker, or whole node (a reclaimed spot instance), is lost, or whose upload fails past
        # the retries, starts again from its last registered checkpoint, in the shared storage; each failure
        # spends one of these restarts (--max-failures; a resume keeps the stored ones: Tune restores them)
        failure_config=tune.FailureConfig(
            max_failures=MAX_FAILURES if args.max_failures is None else args.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        # hpo in a bucket: the SQLite study goes up after every trial, so another machine can resume it
        callbacks=result_loggers(args.tensorboard)
        + [stopping.StopAfterSaves(), live_callback(exp_dir, args.live_every, stall_after=args.stall_after,
                                                    end_stalled=args.end_stalled)]
        + ([mlflow_callback(args.mlflow, exp_dir.name, sweep.name, args.preset, row_keys, list(sweep.cols))]
           if args.mlflow else [])
        + ([wandb_callback(args.wandb, exp_dir.name, sweep.name, args.preset, row_keys, list(sweep.cols))]
           if args.wandb else [])
        + ([store.study_upload_callback(exp_dir)] if sweep.search and not isinstance(exp_dir, Path) else [])
        # a bucket: at the end, Tune's final state must be in it (Tune only logs a failed upload)
        + ([store.stored_state_check()] if not isinstance(exp_dir, Path) else []),
        progress_reporter=reporter, verbose=1)
    if sweep.search:  # hpo: Optuna TPE + ASHA over the search space, study kept in SQLite
        import optuna
        from ray.tune.schedulers import ASHAScheduler

        from sweeper.driver.optuna_search import MarkedOptunaSearch  # says which trials ASHA stopped (user attrs)

        s = sweep.search
        select = s.get("metric", "val_error")  # selection never looks at the test set
        space = {k: _tune_domain(tune, spec) for k, spec in s["space"].items()}
        param_space = {**trials[0], **space}
        storage = optuna.storages.RDBStorage(f"sqlite:///{store.local_file(exp_dir, 'optuna.db')}")
        algo = MarkedOptunaSearch(metric=select, mode="min", study_name=sweep.name, storage=storage, seed=0,
                                  points_to_evaluate=start_points(sweep, trials), steps=trials[0]["steps"])
        # ASHA takes metric / mode (val_error, min) from the TuneConfig: Tune rejects them set in both
        sched = ASHAScheduler(time_attr="step", max_t=trials[0]["steps"],
                              grace_period=grace_period(s, trials[0]["steps"], trials[0]["eval_every"]),
                              reduction_factor=s.get("reduction_factor", 3))
        tune_config = tune.TuneConfig(search_alg=algo, scheduler=sched, num_samples=s["num_samples"],
                                      metric=select, mode="min", trial_dirname_creator=trial_dirname,
                                      reuse_actors=True,
                                      max_concurrent_trials=args.max_concurrent or None)
    elif sweep.max_seeds:  # --seeds auto: a searcher suggests each trial, seeds only where a claim is open
        from sweeper.seeds.seed_searcher import searcher_for

        algo, most = searcher_for(sweep, trials)
        param_space = {}
        tune_config = tune.TuneConfig(search_alg=algo, num_samples=most, trial_dirname_creator=trial_dirname,
                                      max_concurrent_trials=args.max_concurrent or None, reuse_actors=True)
    else:  # a grid: trial_index picks one fully specified config (variants need not be a product)
        param_space = grid_space(trials, launch_order(sweep, trials, args))
        tune_config = tune.TuneConfig(max_concurrent_trials=args.max_concurrent or None,
                                      trial_dirname_creator=trial_dirname,
                                      reuse_actors=True)  # no new process (torch import) per trial
    return tune.Tuner(trainable, param_space=param_space, tune_config=tune_config, run_config=run_config)


def is_grid(sweep: Sweep) -> bool:
    """A fixed list of trials (neither a search nor --seeds auto, whose searchers suggest the configs)."""
    return not sweep.search and not sweep.max_seeds


def launch_order(sweep: Sweep, trials: list[dict], args) -> list[int] | None:
    """A GPU preset's grid starts its trials longest first by their GPU prices (sweeper/gpu_cost.py), so that
    no long trial is left running alone at the end; None (grid order) for a quick preset, whose trials run
    on CPUs, and for a search or --seeds auto, whose searchers choose. Only the order moves: trial_index,
    seed and folder stay; sweep.json records it for --resume."""
    if not is_grid(sweep) or args.preset == "quick":
        return None
    from sweeper.gpu_cost import longest_first, pick_kind, price

    kind, _ = pick_kind(getattr(args, "gpu_kind", None))
    return longest_first([price(t, kind, sweep.minutes_per_trial)[0] for t in trials])


def grid_space(trials: list[dict], order: list[int] | None = None) -> dict:
    """Tune's param_space of a grid over `trials`: trial_index picks one fully specified config, and Tune
    creates the trials in `order` (default: trial_index order). Tune resolves the functions when it
    creates a trial and stores only placeholders for them, so a restored Tuner needs this same space
    again, in the same order (stored_grid), for the trials it creates after a stop."""
    from ray import tune

    space = {"trial_index": tune.grid_search(list(range(len(trials))) if order is None else list(order))}
    for k in trials[0]:
        space[k] = tune.sample_from(lambda config, k=k: trials[config["trial_index"]][k])
    return space


def stored_grid(exp_dir) -> dict | None:
    """On --resume: the grid rebuilt from the experiment's trials.json (checked by tune_state.grid_trials),
    None for a search or --seeds auto. A grid experiment that keeps no trials.json keeps Tune's stored
    space: a trial Tune had not created by the stop gets no config, is refused by the trainable and left
    out of the tables by name."""
    meta = json.loads(store.read_text(exp_dir / "sweep.json"))
    if not grid_meta(meta):
        return None
    trials = grid_trials(exp_dir, meta)
    if trials is None and (missing := (meta.get("n_trials") or 0) - created_trials(exp_dir)) > 0:
        print(f"note: {exp_dir} keeps no {TRIALS_FILE}, so the {missing} trial(s) Tune had not created before the "
              f"stop cannot get their configs: they are refused and left out of the tables; run their seeds in "
              f"a new run", file=sys.stderr)
    order = meta.get("launch_order")
    if trials is not None and order is not None and sorted(order) != list(range(len(trials))):
        raise InputError(f"{exp_dir}/sweep.json's launch_order is not an order of its {len(trials)} trials (edited?); "
                         f"restore sweep.json from a copy, or start a new run without --resume")
    return None if trials is None else grid_space(trials, order)


def start_points(sweep: Sweep, trials: list[dict]) -> list[dict] | None:
    """search["start_at_base"]: the first sample is the base config's own values of the searched keys
    (the hand-set values, after any --set), so the ranking shows how far the search gets beyond them."""
    if not (sweep.search or {}).get("start_at_base"):
        return None
    return [{k: trials[0][k] for k in sweep.search["space"]}]


def grace_period(search: dict, steps: int, eval_every: int) -> int:
    """ASHA's first rung in steps: search["grace_fraction"] of the run (so that `--set steps=N` keeps it
    inside the run), at least one evaluation; else search["grace_period"], else one evaluation."""
    if "grace_fraction" in search:
        return max(eval_every, int(search["grace_fraction"] * steps))
    return min(search.get("grace_period", eval_every), steps)


def result_loggers(tensorboard: bool) -> list:
    """result.json (what sweeper.analysis.aggregate reads) and progress.csv per trial; TensorBoard files only
    on request. Tune adds its TensorBoard logger by default, and tensorboardX imports torch in the
    driver (seconds of CPU, taken from the trials); sweeper.run's main() turns Tune's automatic
    loggers off during fit(), so these are all. They are stored with the experiment and apply on --resume."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback(), *([TBXLoggerCallback()] if tensorboard else [])]


def varying_keys(trials: list[dict]) -> list[str]:
    """The config keys (but the seed) whose value differs between trials, in the first trial's order."""
    return [k for k in trials[0] if k != "seed" and len({json.dumps(t.get(k)) for t in trials}) > 1]


def trial_dirname(trial) -> str:
    """Short trial folder names (the config is in params.json, not in the path). Tune stores this
    function by its module and name in tuner.pkl, so `--resume` needs both to stay as they are."""
    return f"{store.TRIAL_DIR_PREFIX}{trial.trial_id}"


def _tune_domain(tune, spec):
    kind, *a = spec
    if kind == "loguniform":
        return tune.loguniform(*a)
    if kind == "uniform":
        return tune.uniform(*a)
    if kind == "choice":
        return tune.choice(*a)
    raise SweepError(f"unknown search domain {kind!r}; use loguniform, uniform or choice")
