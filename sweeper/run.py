"""Run a sweep: `python -m sweeper.run SWEEP [--preset quick]` (also under `ray job submit`).

Loads `search_spaces/<SWEEP>.py`, validates every trial's TrainConfig and the data before Ray
starts, builds a Ray Tune Tuner (resources, storage, failure config; for `hpo` Optuna + ASHA, which
select on the validation split's `val_error`, never on the test error),
prints Tune's progress, then the mean ± std table and the results folder. Exit status: 0 all
trials finished (a diverged trial is a result: counted in the tables, noted on stderr), 1 some trial
failed (Tune's fit() does not raise), 2 bad input (one line, nothing written; a URI carrying
credentials is bad input too), 3 interrupted (Ctrl+C, SIGTERM, `ray job stop`, also while the report
is written: the state is saved, `--resume` continues it), 4 the storage bucket stopped answering for
longer than its retries ($VBI_MUR_STORAGE_RETRY_S; `--resume` continues it), 5 the trials finished
but the report could not be built or uploaded (`python -m sweeper.report EXP_DIR` rebuilds it).
A new experiment folder is <storage>/<sweep>-<YYYYmmdd-HHMMSS>-<6 random hex digits>.

    python -m sweeper.run ablation_radius --preset quick
    python -m sweeper.run ablation_radius --preset quick --dry-run
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, fields, replace
from pathlib import Path

# Tune's classic CLI table (set before Ray is imported): compact rows of the varying keys and metrics.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# A local Ray started here sends no usage statistics off the machine (a user's own head decides for itself).
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from search_spaces import PRESETS, Sweep, SweepError, default_preset, get_sweep
from trainables.config import ConfigError, TrainConfig
from trainables.datafiles import DataError, check_readable
from trainables.files import one_line
from sweeper import storage as store
from sweeper.storage import StorageError, is_uri
from trainables.remote import redact, scheme, secret_in_uri


# The exit status of `python -m sweeper.run`: docs/USAGE.md and docs/ARCHITECTURE.md state the same codes.
EXIT_OK = 0            # every trial finished (diverged ones included: a divergence is a result, reported)
EXIT_TRIAL_FAILED = 1  # some trial failed (Tune's fit() does not raise); the report is still written
EXIT_BAD_INPUT = 2     # bad input, one line `error: ...` before Ray starts
EXIT_INTERRUPTED = 3   # Ctrl+C, SIGTERM, `ray job stop`: the state is saved, `--resume` continues it
EXIT_STORAGE_LOST = 4  # the storage bucket stopped answering for longer than its retries
EXIT_NO_REPORT = 5     # every trial finished but the report (or its upload) failed; sweeper.report rebuilds it
EXIT_CODES = (EXIT_OK, EXIT_TRIAL_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_STORAGE_LOST, EXIT_NO_REPORT)


class InputError(ValueError):
    """Bad command-line input found before any work; message names the problem and the fix."""


def seeds_arg(s: str) -> int | str:
    """--seeds: a number, or "auto"."""
    if s == "auto":
        return s
    try:
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is neither a number nor auto; write e.g. --seeds 5 or --seeds auto") from None


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one line on stderr (exit status 2), like every other bad input, without
    the usage block: `sweeper.run: error: ...; see python -m sweeper.run --help`."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"sweeper.run: error: {' '.join(message.split())}; see python -m sweeper.run --help\n")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m sweeper.run", description=__doc__.splitlines()[0])
    p.add_argument("sweep", help="a module name in search_spaces/ (see python -m sweeper.list)")
    p.add_argument("--preset", default=None,
                   help=f"one of {', '.join(PRESETS)} (default paper; with --resume, the experiment's own)")
    p.add_argument("--data-dir", default=None,
                   help="folder or URI (s3://, gs://) with CIFAR-10/100 or SVHN (default ./data); "
                        "a URI is copied to each node once")
    p.add_argument("--seeds", type=seeds_arg, default=None,
                   help="seeds per grid point (default: the sweep's own, which --dry-run shows), or auto: a few "
                        "first, then more only where a cell's paired difference from its baseline is still open, "
                        "up to --max-seeds (sweeper/sequential.py)")
    p.add_argument("--max-seeds", type=int, default=None, metavar="N", help="--seeds auto: the most seeds per config (16)")
    p.add_argument("--seed-start", type=int, default=None, metavar="N",
                   help="first seed (default: the sweep's, 0); e.g. --seed-start 8 --seeds 8 runs seeds 8-15")
    p.add_argument("--storage", default="./results",
                   help="results root: a folder or a URI pyarrow accepts, s3://BUCKET/PREFIX, gs://... "
                        "(default ./results)")
    p.add_argument("--cpus-per-trial", type=float, default=1.0)
    p.add_argument("--gpus-per-trial", type=float, default=None,
                   help="GPUs per trial, fractions pack trials on one GPU (default 1 if Ray sees a GPU, else 0)")
    p.add_argument("--max-concurrent", type=int, default=0, help="max trials at once (0: as resources allow)")
    p.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else a local Ray)")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="EXP_DIR",
                   help="continue the latest (or the given) experiment folder of this sweep")
    p.add_argument("--dry-run", action="store_true", help="print the trial grid and cost, run nothing")
    p.add_argument("--confirm", default=None, metavar="SEARCH_DIR",
                   help="searches (hpo, hpo_base): rerun that search's best trial by validation error and its "
                        "base values on fresh seeds (--seeds, default 5), paired (sweeper/confirm.py)")
    p.add_argument("--dashboard", action="store_true",
                   help="give a local Ray its dashboard on 127.0.0.1:8265 (it takes start-up time and CPU from the "
                        "trials: docs/PERFORMANCE.md; a head's dashboard, see --address, outlives the sweep)")
    p.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard event files per trial (imports torch in this driver)")
    p.add_argument("--live-every", type=float, default=30.0, metavar="SECONDS",
                   help="rebuild the report (report.html) after trials end, at most every SECONDS (default 30; "
                        "0: only at the end), uploaded on a bucket (sweeper/live.py)")
    p.add_argument("--mlflow", default=None, metavar="URI",
                   help="log every trial as an MLflow run (experiment: the sweep folder's name) to this tracking "
                        "URI, e.g. http://127.0.0.1:5000; needs pip install -e '.[mlflow]' (sweeper/mlflow_log.py)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a TrainConfig key in every trial, e.g. --set mur_radius=2 (repeatable; a "
                        "shorter run also needs its schedules: --set steps=600 --set lr_rampdown=150)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    return parser().parse_args(argv)


# ---------------------------------------------------------------- validation (before Ray starts)

def _parse_override(s: str) -> tuple[str, object]:
    if "=" not in s:
        raise InputError(f"--set {s!r} is not KEY=VALUE; write e.g. --set mur_radius=2")
    k, v = s.split("=", 1)
    if k == "seed":
        raise InputError(f"--set {s} would give every trial one seed; seeds are a grid axis: "
                         f"--seeds N (how many) and --seed-start N (the first)")
    try:
        return k, json.loads(v)
    except json.JSONDecodeError:
        return k, v


def trial_configs(sweep: Sweep, args: argparse.Namespace) -> list[dict]:
    """Every trial's config dict, validated by TrainConfig (raises ConfigError)."""
    if args.seeds is not None and args.seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {args.seeds}")
    if args.seed_start is not None and args.seed_start < 0:
        raise InputError(f"--seed-start must be >= 0, got {args.seed_start}")
    if args.seed_start is not None:
        sweep = replace(sweep, first_seed=args.seed_start)
    overrides = dict(_parse_override(s) for s in args.set)
    data_dir = args.data_dir or sweep.base.get("data_dir", "./data")
    overrides["data_dir"] = data_dir if is_uri(data_dir) else str(Path(data_dir).expanduser().resolve())  # trials run in other folders
    trials = [{**t, **overrides} for t in sweep.trials(args.seeds)]
    for t in trials:
        TrainConfig.from_dict(t)
    # one key set for every trial (rows may set keys others leave at their default, e.g. a
    # LabelSpreading row and MUR rows with a radius): the Tuner's param space is built from it
    keys = list(dict.fromkeys(k for t in trials for k in t))
    defaults = TrainConfig().to_dict()
    return [{k: t[k] if k in t else defaults[k] for k in keys} for t in trials]


def check_search(sweep: Sweep, trials: list[dict]) -> None:
    """A search (hpo) selects on the validation split, so its trials must hold one out, and a search that
    starts at its base values needs them inside the searched ranges (InputError)."""
    if not sweep.search:
        return
    for k, (kind, *a) in sweep.search["space"].items() if sweep.search.get("start_at_base") else ():
        v = trials[0][k]
        if kind in ("loguniform", "uniform") and not a[0] <= v <= a[1]:
            raise InputError(f"search {sweep.name} starts at the base value {k}={v}, outside its range "
                             f"[{a[0]:g}, {a[1]:g}]; change --set {k}=... or the range in search_spaces/{sweep.name}.py")
    cfg = TrainConfig.from_dict(trials[0])
    if cfg.n_val == 0:
        raise InputError(f"hpo selects on the validation split; these trials hold out none (val_size={cfg.val_size}): "
                         f"drop --set val_size=0, or set val_size to a positive number of images")


def check_baseline(sweep: Sweep, trials: list[dict]) -> None:
    """Sweep.baseline, baseline_within and baseline_for must name TrainConfig keys (InputError); a baseline
    that no trial matches (e.g. after --set) only costs the tables their differences: a note on stderr."""
    if not sweep.baseline:
        return
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(k for k in (*sweep.baseline, *sweep.baseline_within,
                                 *(k for row in sweep.baseline_for.values() for k in row)) if k not in known)
    if unknown:
        raise InputError(f"sweep {sweep.name}: baseline / baseline_within / baseline_for name {unknown}, not "
                         f"TrainConfig keys; fix them in search_spaces/{sweep.name}.py")
    if not any(all(TrainConfig.from_dict(t).to_dict()[k] == v for k, v in sweep.baseline.items()) for t in trials):
        print(f"note: no trial matches the sweep's baseline {sweep.baseline}; the tables will show no paired "
              f"differences", file=sys.stderr)


def credentials_hint(option: str, uri: str) -> str:
    """Where the credentials that `uri` carries belong instead (for the error naming `option`)."""
    s = scheme(uri)
    if option in ("--address", "RAY_ADDRESS"):
        return "a Ray head's token goes in RAY_AUTH_TOKEN or ~/.ray/auth_token"
    if option == "--mlflow":
        return ("give them in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" if s in ("http", "https") else
                "give the database password through its own settings (PGPASSWORD or ~/.pgpass for "
                "postgresql), or run an MLflow server and use MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")
    return store.where_keys_go(uri)


def check_credentials(args: argparse.Namespace, env=os.environ) -> None:
    """No URI option may carry credentials (https://user:pw@host, s3://KEY:SECRET@bucket): the command
    line is stored in sweep.json and on the report page, --data-dir in every trial's params.json and in
    MLflow, and URIs are printed in errors. InputError naming the option and where the key belongs; the
    message shows the URI with its userinfo masked."""
    given = [("--storage", args.storage), ("--data-dir", args.data_dir), ("--mlflow", args.mlflow),
             ("--address", args.address), ("RAY_ADDRESS", env.get("RAY_ADDRESS")), ("--confirm", args.confirm),
             *((("--resume", args.resume),) if args.resume != "latest" else ()),
             *((f"--set {o.split('=', 1)[0]}", o.split("=", 1)[1]) for o in args.set if "=" in o)]
    for option, uri in given:
        if uri and secret_in_uri(uri):
            raise InputError(f"{option} {redact(uri)} carries credentials in the URI, which would be stored "
                             f"(sweep.json, params.json, the report) and printed; pass it without them and "
                             f"{credentials_hint(option, uri)}")


def check_resources(args: argparse.Namespace) -> None:
    """Per-trial resources and concurrency that Ray would reject only after it started."""
    if not args.cpus_per_trial > 0:
        raise InputError(f"--cpus-per-trial must be > 0, got {args.cpus_per_trial:g}")
    if args.gpus_per_trial is not None and not args.gpus_per_trial >= 0:
        raise InputError(f"--gpus-per-trial must be >= 0 (fractions share a GPU), got {args.gpus_per_trial:g}")
    if args.max_concurrent < 0:
        raise InputError(f"--max-concurrent must be >= 0 (0: as resources allow), got {args.max_concurrent}")
    if not args.live_every >= 0:
        raise InputError(f"--live-every must be >= 0 seconds (0: the report only at the end), got {args.live_every:g}")


def check_storage(storage: str) -> Path | store.Location:
    """The results root, a folder or a URI (sweeper/storage.py), writable: else a one-line StorageError."""
    return store.check(storage)


def check_address(address: str | None) -> str | None:
    """Fail fast (1 s) on a Ray address that does not answer, instead of Ray's long retries."""
    if not address or address in ("auto", "local"):
        return address
    if address.startswith(("http://", "https://")):
        raise InputError(f"--address {address} is a dashboard / job API address; sweeper.run joins a cluster "
                         f"at its GCS address (host:6379), or submit it as a job: "
                         f"`ray job submit --address {address} -- python -m sweeper.run ...`")
    hostport = address.split("://", 1)[-1].rstrip("/")
    if address.startswith("ray://") and ":" not in hostport:
        hostport += ":10001"  # the Ray client's default port
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=1.0).close()
    except (OSError, ValueError):
        raise InputError(f"Ray address {address} does not answer; start a head with "
                         f"`ray start --head --dashboard-host 127.0.0.1` or omit --address for a local Ray") from None
    return address


def find_experiment(root, sweep: str, resume: str) -> tuple:
    """The experiment folder to resume (the given one, or the latest of `sweep` under root; a Path or
    a store.Location) and its sweep.json; InputError if there is none, it is torn, it holds another
    sweep or no Tune state, or two latest ones started in the same second. A bucket is read with the
    pre-flight's short retries, so one that does not answer is exit 2 within seconds."""
    if resume != "latest":
        exp = store.resolve(resume)
        if not store.is_file(store.quick(exp) / "sweep.json"):
            raise InputError(f"{exp} is not an experiment folder of sweeper.run (no sweep.json); "
                             f"pass the folder printed at the end of a run")
    else:
        runs = store.experiments(store.quick(root), sweep)
        if not runs:
            raise InputError(f"nothing to resume: no {sweep}-* experiment under {root}; run without --resume")
        if len(runs) > 1 and store.stamp(runs[-1].name) == store.stamp(runs[-2].name):
            raise InputError(f"the latest experiments {runs[-2].name} and {runs[-1].name} under {root} started in "
                             f"the same second; pass the one to continue: --resume {shlex.quote(str(root / runs[-1].name))}")
        exp = root / runs[-1].name
    try:
        meta = json.loads(store.read_text(store.quick(exp) / "sweep.json"))
        stored = meta.get("name")
    except (OSError, json.JSONDecodeError, AttributeError):
        raise InputError(f"{exp / 'sweep.json'} is not a sweep description (torn or edited); "
                         f"start a new run without --resume") from None
    if stored != sweep:
        raise InputError(f"{exp} holds the sweep {stored!r}, not {sweep!r}; "
                         f"run `{resume_command(stored, exp)}`")
    if not store.is_file(store.quick(exp) / store.TUNER_STATE):
        raise InputError(f"{exp} holds no Tune state ({store.TUNER_STATE}): it was stopped before its first trial "
                         f"was set up, so there is nothing to continue; start a new run without --resume")
    return exp, meta


def resume_command(sweep: str, exp) -> str:
    """The shell command that continues experiment `exp` (quoted: a folder may hold spaces or $)."""
    return shlex.join(["python", "-m", "sweeper.run", sweep, "--resume", str(exp)])


def stored_preset(exp: Path, meta: dict, asked: str | None) -> str:
    """The preset an experiment was started with (its sweep.json `meta`); InputError if `asked` differs."""
    stored = meta.get("preset") or "paper"
    if asked not in (None, stored):
        raise InputError(f"{exp} was run with --preset {stored}, not {asked}; resume it without --preset")
    return stored


def print_dry_run(sweep: Sweep, trials: list[dict], args) -> None:
    varying = [k for k in trials[0] if len({json.dumps(t.get(k)) for t in trials}) > 1 and k != "seed"]
    print(f"sweep {sweep.name} (preset {args.preset}): {sweep.description}")
    print(f"reproduces: {sweep.paper_ref}")
    print(f"{len(trials)} trials = {len(trials) // max(1, len({t['seed'] for t in trials}))} configs "
          f"x {len({t['seed'] for t in trials})} seeds; varying keys: {', '.join(varying) or '-'}")
    for i, t in enumerate(trials):
        print(f"  {i:>4}  " + "  ".join(f"{k}={t[k]}" for k in (*varying, "seed")))
    if sweep.search:
        print(f"plus a search of {sweep.search['num_samples']} Optuna TPE samples over "
              f"{sorted(sweep.search['space'])} with ASHA early stopping, selecting on "
              f"{sweep.search.get('metric', 'val_error')}")
        for point in start_points(sweep, trials) or []:
            print("  the first sample is the base values: " + "  ".join(f"{k}={v}" for k, v in point.items()))
    if sweep.max_seeds:  # --seeds auto: the count depends on the results
        from sweeper.auto_seeds import cost_lines as auto_cost_lines
        print("\n".join(auto_cost_lines(sweep, trials, args.preset)))
        return
    from sweeper.costs import cost_lines

    n = sweep.search["num_samples"] if sweep.search else len(trials)
    for line in cost_lines(sweep.name, args.preset, n, sweep.minutes_per_trial, bool(args.seeds or args.set)):
        print(f"cost: {line}")


# ---------------------------------------------------------------- Ray

def build_tuner(sweep: Sweep, trials: list[dict], args, exp_dir: Path, resources: dict):
    from ray import tune

    from sweeper import stopping
    from sweeper.live import live_callback
    from sweeper.mlflow_log import mlflow_callback
    from trainables.tune import train_tune

    trainable = tune.with_resources(train_tune, resources)
    varying = sorted(k for k in trials[0] if k != "seed" and len({json.dumps(t[k]) for t in trials}) > 1)
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
    # after it, the save it forces at once naming the newer one.
    run_config = tune.RunConfig(
        **store.ray_storage(exp_dir),  # name, storage_path (+ storage_filesystem for a URI)
        # a trial whose worker, or whole node (a reclaimed spot instance), is lost starts again from its
        # last registered checkpoint, in the shared storage; each loss spends one of these retries
        failure_config=tune.FailureConfig(max_failures=3),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        # hpo in a bucket: the SQLite study goes up after every trial, so another machine can resume it
        callbacks=result_loggers(args.tensorboard) + [stopping.StopAfterSaves(), live_callback(exp_dir, args.live_every)]
        + ([mlflow_callback(args.mlflow, exp_dir.name, sweep.name, args.preset,
                            [k for k in (*sweep.rows, *varying) if k not in sweep.cols], list(sweep.cols))]
           if args.mlflow else [])
        + ([store.study_upload_callback(exp_dir)] if sweep.search and not isinstance(exp_dir, Path) else [])
        # a bucket: at the end, Tune's final state must be in it (Tune only logs a failed upload)
        + ([store.stored_state_check()] if not isinstance(exp_dir, Path) else []),
        progress_reporter=reporter, verbose=1)
    if sweep.search:  # hpo: Optuna TPE + ASHA over the search space, study kept in SQLite
        import optuna
        from ray.tune.schedulers import ASHAScheduler

        from sweeper.optuna_search import MarkedOptunaSearch  # says which trials ASHA stopped (user attrs)

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
                                      metric=select, mode="min", trial_dirname_creator=_trial_dirname,
                                      reuse_actors=True,
                                      max_concurrent_trials=args.max_concurrent or None)
    elif sweep.max_seeds:  # --seeds auto: a searcher suggests each trial, seeds only where a claim is open
        from sweeper.seed_searcher import searcher_for

        algo, most = searcher_for(sweep, trials)
        param_space = {}
        tune_config = tune.TuneConfig(search_alg=algo, num_samples=most, trial_dirname_creator=_trial_dirname,
                                      max_concurrent_trials=args.max_concurrent or None, reuse_actors=True)
    else:  # a grid: trial_index picks one fully specified config (variants need not be a product)
        keys = list(trials[0])
        param_space = {"trial_index": tune.grid_search(list(range(len(trials))))}
        for k in keys:
            param_space[k] = tune.sample_from(lambda spec, k=k: trials[spec.config.trial_index][k])
        tune_config = tune.TuneConfig(max_concurrent_trials=args.max_concurrent or None,
                                      trial_dirname_creator=_trial_dirname,
                                      reuse_actors=True)  # no new process (torch import) per trial
    return tune.Tuner(trainable, param_space=param_space, tune_config=tune_config, run_config=run_config)


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
    """result.json (what sweeper.aggregate reads) and progress.csv per trial; TensorBoard files only
    on request. Tune adds its TensorBoard logger by default, and tensorboardX imports torch in the
    driver (seconds of CPU, taken from the trials); main() turns Tune's automatic
    loggers off during fit(), so these are all. They are stored with the experiment and apply on --resume."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback(), *([TBXLoggerCallback()] if tensorboard else [])]


def _trial_dirname(trial) -> str:
    """Short trial folder names (the config is in params.json, not in the path)."""
    return f"trial_{trial.trial_id}"


def _tune_domain(tune, spec):
    kind, *a = spec
    if kind == "loguniform":
        return tune.loguniform(*a)
    if kind == "uniform":
        return tune.uniform(*a)
    if kind == "choice":
        return tune.choice(*a)
    raise SweepError(f"unknown search domain {kind!r}; use loguniform, uniform or choice")


def source_commit() -> str | None:
    """The git commit of this checkout ("+dirty" with uncommitted changes to tracked files), for the
    report's provenance; None outside a git checkout (e.g. `ray job submit --working-dir`)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):  # no git installed
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def use_token_if_available(env=os.environ) -> bool:
    """Ray 2.60 heads enable token auth by default, and a client sends its token only with
    RAY_AUTH_MODE=token. When a token is at hand (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token) and the mode is unset, turn it on so `--address` just works."""
    if "RAY_AUTH_MODE" in env:
        return env["RAY_AUTH_MODE"] == "token"
    if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH") or Path("~/.ray/auth_token").expanduser().is_file():
        env["RAY_AUTH_MODE"] = "token"
        return True
    return False


def connect_ray(address: str | None, dashboard: bool = False):
    """Join the Ray at `address`, else start a local one, with its dashboard (bound to 127.0.0.1)
    only when asked: it would take CPU from the trials and it goes away with the sweep."""
    import ray

    if address:
        return ray.init(address=address, log_to_driver=True)
    with own_process_group():
        return ray.init(address="local", include_dashboard=dashboard, dashboard_host="127.0.0.1")


@contextlib.contextmanager
def own_process_group():
    """The Ray processes started in this block (a local Ray's GCS, raylet, ...; the raylet's workers
    follow it) run in a session and process group of their own. `timeout`, shells and job runtimes
    signal a job's whole process group; the SIGTERM then reaches only the driver, which stops Tune
    gracefully (graceful_stop) and shuts its Ray down itself. In the driver's group, Ray's processes
    would die at once on it (Ray blocks SIGINT in them, for Ctrl+C, but not SIGTERM) and leave the
    driver waiting for a dead GCS, with no report. Ray does the same on Windows (CREATE_NEW_PROCESS_GROUP).
    They still die with the driver: Ray sets PR_SET_PDEATHSIG in them, so a killed driver leaks none."""
    from ray._private import services

    popen = services.ConsolePopen  # the Popen that Ray's start_ray_process uses for every process

    class SessionPopen(popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "start_new_session": True})

    services.ConsolePopen = SessionPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        plan = prepare(args)
    except (SweepError, ConfigError, DataError, InputError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if plan is None:  # --dry-run: printed
        return EXIT_OK
    sweep, trials, exp_dir, address = plan
    from sweeper import stopping
    if note := stopping.job_stop_note():
        print(note, file=sys.stderr)
    # loggers: result_loggers(); Ctrl+C and SIGTERM: graceful_stop(), in place before Ray starts and before
    # sweep.json is written, so that a signal from then on stops the sweep at fit()'s first step, state saved
    resume = resume_command(sweep.name, exp_dir)
    with env_set(TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1", TUNE_DISABLE_SIGINT_HANDLER="1"), \
            graceful_stop(lambda: stopping.announce(resume, exp_dir)) as stopped, \
            credentials_from_each_node():
        try:
            resources = start_ray(address, args)
        except ConnectionError as e:  # e.g. --address auto with no cluster running here
            print(f"error: cannot connect to Ray at {address}: {str(e).splitlines()[0]}; start a head with "
                  f"`ray start --head --dashboard-host 127.0.0.1` or omit --address for a local Ray", file=sys.stderr)
            return EXIT_BAD_INPUT
        except InputError as e:  # no node can ever run a trial
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        tuner = make_tuner(sweep, trials, args, exp_dir, resources)
        try:
            grid = tuner.fit()
        except OSError as e:  # Tune lists the bucket once more after its loop: an outage still on ends here
            if isinstance(exp_dir, Path):
                raise
            return storage_lost(sweep, exp_dir, one_line(e))
    import ray
    ray.shutdown()  # prints the worker log lines Ray still buffers now: the lines of finish() end the log
    return finish(grid, sweep, exp_dir, stopped.is_set())


def prepare(args):
    """Everything checked before Ray starts: (sweep, trial configs, experiment folder, Ray address), or
    None after a dry run's printout. SweepError, ConfigError, DataError, InputError or StorageError
    with the fix on bad input."""
    check_credentials(args)  # before any URI is stored, printed or used as a cache folder's name
    get_sweep(args.sweep, args.preset or default_preset(args.sweep))  # unknown sweep or preset: the valid ones
    exp_dir = None
    if args.resume and not args.dry_run:  # the stored run decides the preset; its configs were checked
        exp_dir, meta = find_experiment(check_storage(args.storage),
                                        args.sweep + ("_confirm" if args.confirm else ""), args.resume)
        args.preset = stored_preset(exp_dir, meta, args.preset)
    args.preset = args.preset or default_preset(args.sweep)
    sweep = get_sweep(args.sweep, args.preset)
    if args.confirm:  # the search's best trial and its base values, paired over fresh seeds
        from sweeper.confirm import ConfirmError, confirm_sweep
        try:
            sweep = confirm_sweep(sweep, args.confirm, args.seeds)
        except ConfirmError as e:
            raise InputError(str(e)) from None
    if args.seeds == "auto":  # the first look's seeds, then more where a cell's claim is open
        from sweeper.auto_seeds import auto_sweep
        from sweeper.sequential import SequentialError
        try:
            sweep, args.seeds = auto_sweep(sweep, args.max_seeds), None
        except SequentialError as e:
            raise InputError(str(e)) from None
    elif args.max_seeds is not None:
        raise InputError("--max-seeds caps --seeds auto; add --seeds auto, or drop --max-seeds")
    trials = trial_configs(sweep, args)
    check_search(sweep, trials)
    check_baseline(sweep, trials)
    check_resources(args)
    if args.mlflow:  # mlflow installed, its server answering: before Ray starts
        from sweeper.mlflow_log import MLflowError, check_mlflow
        try:
            check_mlflow(args.mlflow)
        except MLflowError as e:
            raise InputError(str(e)) from None
    if exp_dir is None:  # on --resume the trials run their stored configs, data_dir included
        for name in sorted({(t["dataset"], t["data_dir"], t.get("download", False)) for t in trials}):
            check_readable(*name)  # parses the files: a corrupt one fails now, not in every trial
    if args.dry_run:
        print_dry_run(sweep, trials, args)
        return None
    root = check_storage(args.storage)
    if exp_dir is None:
        exp_dir = root / store.experiment_name(sweep.name, time.time())
    address = check_address(args.address or os.environ.get("RAY_ADDRESS"))
    if address:
        use_token_if_available()  # before Ray is imported: it reads the mode once
    return sweep, trials, exp_dir, address


def start_ray(address: str | None, args) -> dict:
    """Connect to Ray (a head at `address`, else a local Ray); each trial's resources {"cpu", "gpu"}.
    ConnectionError when no Ray answers at `address`."""
    ctx = connect_ray(address, dashboard=args.dashboard)
    reinstall_handlers()  # at once: ray.init took SIGTERM over
    if getattr(ctx, "dashboard_url", None):
        print(f"Ray dashboard: http://{ctx.dashboard_url}")
    elif not address:
        print("local Ray without a dashboard (add --dashboard, or submit to a head: see docs/USAGE.md)")
    import ray

    gpus = args.gpus_per_trial
    if gpus is None:
        gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    resources = {"cpu": args.cpus_per_trial, "gpu": gpus}
    if not any(fits(n, resources) for n in ray.nodes() if n.get("Alive")):
        largest = max((n for n in ray.nodes() if n.get("Alive")), default={},
                      key=lambda n: (n.get("Resources", {}).get("GPU", 0), n.get("Resources", {}).get("CPU", 0)))
        have = largest.get("Resources", {})
        need = f"{resources['cpu']:g} CPUs and {resources['gpu']:g} GPUs per trial"
        if not address:  # a local Ray never grows: the trials would wait forever
            ray.shutdown()
            raise InputError(f"{need}, but this machine's Ray has {have.get('CPU', 0):g} CPUs and "
                             f"{have.get('GPU', 0):g} GPUs; lower --cpus-per-trial / --gpus-per-trial")
        print(f"warning: no node of the cluster has {need} now (the largest: {have.get('CPU', 0):g} CPUs, "
              f"{have.get('GPU', 0):g} GPUs); the trials stay PENDING until an autoscaler adds one that does "
              f"(`ray status` shows the pending demand)", file=sys.stderr)
    return resources


def fits(node: dict, resources: dict) -> bool:
    """Whether a node of ray.nodes() has, in all, the CPUs and GPUs one trial asks for."""
    have = node.get("Resources", {})
    return have.get("CPU", 0) >= resources["cpu"] and have.get("GPU", 0) >= resources["gpu"]


def make_tuner(sweep: Sweep, trials: list[dict], args, exp_dir, resources: dict):
    """The stored experiment's Tuner on --resume, else a new experiment folder (sweep.json) and its Tuner."""
    from ray import tune

    if args.resume:
        print(f"resuming {exp_dir}")
        if args.set or args.seeds is not None:
            print("note: --set and --seeds do not apply on --resume; the stored trial configs run on", file=sys.stderr)
        from trainables.tune import train_tune

        return tune.Tuner.restore(trainable=tune.with_resources(train_tune, resources), resume_unfinished=True,
                                  resume_errored=True, **store.prepare_restore(exp_dir))
    meta = {**asdict(sweep), "preset": args.preset, "n_trials": len(trials), "argv": sys.argv,
            "start_points": start_points(sweep, trials), "commit": source_commit()}
    store.create_experiment(exp_dir)
    tuner = build_tuner(sweep, trials, args, exp_dir, resources)  # Tune writes its tuner.pkl here
    # sweep.json last: a folder that has one is an experiment that --resume can continue
    store.write_text(exp_dir / "sweep.json", json.dumps(meta, indent=1, default=str))
    return tuner


def finish(grid, sweep: Sweep, exp_dir, stopped: bool) -> int:
    """The report and the failed trials printed; the exit code: 0 every trial finished (diverged ones
    included: a divergence is a result, noted on stderr), 1 a trial failed, 3 stopped (a signal during
    the report too), 4 the bucket could not take the sweep's final state (no report: the bucket does not
    hold it all), 5 the trials finished but their report could not be built or uploaded."""
    from sweeper.aggregate import AggregateError
    from sweeper.report import report_at

    errors = [r for r in grid if r.error is not None]
    if not isinstance(exp_dir, Path) and (lost := store.stored_state_error()):
        for r in errors:
            print(f"trial {r.path} failed: {type(r.error).__name__}: {str(r.error).splitlines()[0]}", file=sys.stderr)
        return storage_lost(sweep, exp_dir, lost)
    no_report = None
    try:
        with signals_interrupt():
            paths = report_at(exp_dir)  # a URI: built in a local cache, uploaded
    except KeyboardInterrupt:  # Ctrl+C or SIGTERM while the report is built: the state is saved
        print(f"interrupted while writing the report: the sweep's state is saved; `{resume_command(sweep.name, exp_dir)}` "
              f"finishes it and writes the report", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (AggregateError, StorageError) as e:  # e.g. no trial reported anything, or the upload failed
        print(f"no report: {e}", file=sys.stderr)
        paths, no_report = {}, e
    for name in ("table.md", "table_ranked.md"):  # the ranked table: searches (hpo) only
        if paths.get(name):
            print(Path(paths[name]).read_text())
    for r in errors:
        print(f"trial {r.path} failed: {type(r.error).__name__}: {str(r.error).splitlines()[0]}", file=sys.stderr)
    diverged = [r for r in grid if r.error is None and (r.metrics or {}).get("diverged") == 1]
    if diverged:
        print(f"note: {len(diverged)} trial(s) diverged (a result: the tables count them, `n_diverged`)",
              file=sys.stderr)
    refused = [r for r in grid if r.error is None and (r.metrics or {}).get("resume_error")]  # trainables/tune.py
    for r in refused:
        print(f"trial {r.path} failed: {r.metrics['resume_error']}", file=sys.stderr)
    print(f"results: {exp_dir}")
    if stopped:
        print(f"interrupted: the sweep's state is saved; continue it with `{resume_command(sweep.name, exp_dir)}`",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if errors or refused:
        return EXIT_TRIAL_FAILED
    if no_report is not None:
        print(f"error: the trials finished but the report was not written; rebuild it with "
              f"`{shlex.join(['python', '-m', 'sweeper.report', str(exp_dir)])}`", file=sys.stderr)
        return EXIT_NO_REPORT
    return EXIT_OK


def storage_lost(sweep: Sweep, exp_dir, why: str) -> int:
    """Exit status 4: the bucket stopped answering for longer than its retries, so it may lack the last
    results, checkpoints and Tune's final state; no report (it would read the bucket). One line."""
    print(f"error: storage {exp_dir} unreachable at the end of the sweep ({why}); it holds the state of its "
          f"last successful upload; once it answers again, continue with "
          f"`{resume_command(sweep.name, exp_dir)}`", file=sys.stderr)
    return EXIT_STORAGE_LOST


_wanted: dict = {}  # signal -> the handler graceful_stop() wants in place now


def _want(sig, handler) -> None:
    _wanted[sig] = handler
    signal.signal(sig, handler)


def reinstall_handlers() -> None:
    """Put graceful_stop()'s handlers back: Ray's driver takes SIGTERM over when it connects (a handler
    that exits at once, and a C++ one that aborts), which would end the sweep without saving it."""
    for sig, handler in _wanted.items():
        signal.signal(sig, handler)


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


@contextlib.contextmanager
def graceful_stop(announce=None):
    """Ctrl+C and SIGTERM (what `ray job stop` and most schedulers send) stop the sweep through Tune's
    own interrupt (SIGUSR1), sent once the checkpoints the trials reported are registered
    (sweeper/stopping.py): it ends the running trials and saves the experiment state, then fit()
    returns. Yields an Event that tells whether that happened (Tune marks the trials it stopped
    done=True, so the results cannot). A second signal acts at once. Tune's own SIGINT handler must
    be off (TUNE_DISABLE_SIGINT_HANDLER=1) or it would replace this one inside fit(). `announce()` runs
    first, before anything waits (stopping.announce: the --resume command and trials.parquet, for a
    sender that SIGKILLs seconds later, as `ray job stop` does)."""
    from sweeper import stopping

    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return

    def handler(signum, frame):
        stopped.set()
        _want(signal.SIGINT, signal.default_int_handler)
        _want(signal.SIGTERM, signal.SIG_DFL)
        if announce is not None:
            announce()
        stopping.request()  # SIGUSR1 once no trial is saving a checkpoint it reported

    stopping.reset()

    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in old:
        _want(sig, handler)
    try:
        yield stopped
    finally:
        _wanted.clear()
        for sig, h in old.items():
            signal.signal(sig, h)
        stopping.settle()


@contextlib.contextmanager
def credentials_from_each_node():
    """Tune copies the driver's AWS keys (the secret key, session tokens) into every trial actor's
    runtime env, where Ray's runtime env agent logs them in plain text (runtime_env_agent.log) and
    its GCS keeps them (actor table, dashboard). Inside this block it copies none: storage
    credentials come from each node's own settings (environment, profile, instance role; see the
    README), and a local Ray's workers inherit the driver's environment anyway."""
    from ray.tune.execution import class_cache

    keys = {k for k in class_cache.ENV_VARS_TO_PROPAGATE if k.startswith("AWS_")}
    class_cache.ENV_VARS_TO_PROPAGATE -= keys
    try:
        yield
    finally:
        class_cache.ENV_VARS_TO_PROPAGATE |= keys


@contextlib.contextmanager
def env_set(**values: str):
    """Environment variables set for the block only (Tune reads some of them inside fit())."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    sys.exit(main())
