"""Run a sweep: `python -m sweeper.run SWEEP [--preset quick]` (also under `ray job submit`).

Loads `search_spaces/<SWEEP>.py`, validates every trial's TrainConfig and the data before Ray
starts, builds a Ray Tune Tuner (resources, storage, failure config; for `hpo` Optuna + ASHA, which
select on the validation split's `val_error`, never on the test error),
prints Tune's progress, then the mean ± std table and the results folder. Exit status: 0 all
trials finished (a diverged trial is a result: counted in the tables, noted on stderr), 1 some trial
failed (Tune's fit() does not raise), 2 bad input (one line, nothing written; a URI carrying
credentials is bad input too, and so is an experiment another live driver holds), 3 interrupted (Ctrl+C, SIGTERM, `ray job stop`, SIGHUP, at any moment, the report
included: the state is saved, `--resume` continues it, and the command is kept in the folder's resume.txt), 4 the storage bucket stopped answering for
longer than its retries ($VBI_MUR_STORAGE_RETRY_S; `--resume` continues it), or the disk of a local
results folder ran full (one line with its free space; `--resume` continues it once there is space), 5 the trials finished
but the report could not be built or uploaded (`python -m sweeper.report EXP_DIR` rebuilds it).
A new experiment folder is <storage>/<sweep>-<YYYYmmdd-HHMMSS>-<6 random hex digits>.
The steps have modules of their own: sweeper/driver/preflight.py (the checks before Ray starts),
sweeper/driver/ray_session.py (a local Ray or a head), sweeper/driver/tuner.py (the Tuner), sweeper/driver/stopping.py
(Ctrl+C and SIGTERM: the graceful stop, one object per run), sweeper/driver/provenance.py (what sweep.json records of the code and machine),
sweeper/driver/lease.py (one driver per experiment: a second one is exit 2), sweeper/driver/tune_state.py (what
--resume lets Tune unpickle and restore, checked first).

    python -m sweeper.run ablation_radius --preset quick
    python -m sweeper.run ablation_radius --preset quick --dry-run
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import pickle
import shlex
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

# Tune's classic CLI table (set before Ray is imported): compact rows of the varying keys and metrics.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# A local Ray this driver starts (sweeper/driver/ray_session.py) sends no usage statistics off the machine (a user's own head decides for itself).
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from search_spaces import PRESETS, Sweep, SweepError, default_preset, get_sweep
from trainables.config import ConfigError
from trainables.datafiles import DataError, check_available, check_readable
from trainables.files import one_line, refusal
from sweeper import storage as store
from sweeper.driver.lease import DriverLease
from sweeper.driver.preflight import (InputError, check_address, check_baseline, check_cache, check_credentials,
                                      check_data_dir, check_device, check_paths, check_resources, check_search,
                                      select_cells, trial_configs)
from sweeper.driver.ray_session import env_set, start_ray, trial_actor_env, use_token_if_available
from sweeper.driver.signals import STOP_SIGNALS, pause_point, signals_interrupt
from sweeper.driver.stopping import GracefulStop, job_stop_note
from sweeper.driver.stalls import FACTOR as STALL_FACTOR, MIN_PACE_S
from sweeper.storage import StorageError
from sweeper.driver.tune_state import check_resumable
from sweeper.driver.tuner import MAX_FAILURES, make_tuner, start_points, varying_keys


# The exit status of `python -m sweeper.run`: docs/USAGE.md and docs/ARCHITECTURE.md state the same codes.
EXIT_OK = 0            # every trial finished (diverged ones included: a divergence is a result, reported)
EXIT_TRIAL_FAILED = 1  # some trial failed (Tune's fit() does not raise); the report is still written
EXIT_BAD_INPUT = 2     # bad input, one line `error: ...` before Ray starts
EXIT_INTERRUPTED = 3   # Ctrl+C, SIGTERM, `ray job stop`, SIGHUP: the state is saved, `--resume` continues it
EXIT_STORAGE_LOST = 4  # the storage bucket stopped answering for longer than its retries, or its disk ran full
EXIT_NO_REPORT = 5     # every trial finished but the report (or its upload) failed; sweeper.report rebuilds it
LOW_SPACE = 16 << 20  # bytes: a disk with less free is full for a sweep (a checkpoint is larger)
EXIT_CODES = (EXIT_OK, EXIT_TRIAL_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_STORAGE_LOST, EXIT_NO_REPORT)


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
                        "up to --max-seeds (sweeper/seeds/sequential.py)")
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
    p.add_argument("--max-failures", type=int, default=None, metavar="N",
                   help=f"restarts of a trial from its last checkpoint after it fails (a lost worker or node, "
                        f"an upload past the retries) before it counts as failed (default {MAX_FAILURES}; "
                        f"--resume keeps the experiment's own)")
    p.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS, else a local Ray)")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="EXP_DIR",
                   help="continue the latest (or the given) experiment folder of this sweep, unless another live "
                        "driver holds it. Tune's restore unpickles the experiment's state (tuner.pkl, its callback "
                        "and searcher states), which runs any code put there: resume only folders and buckets you "
                        "trust. tuner.pkl must be the file the experiment wrote at its start (its SHA-256 is in "
                        "sweep.json)")
    p.add_argument("--dry-run", action="store_true", help="print the trial grid and cost, run nothing")
    p.add_argument("--gpu-kind", default=None, metavar="KIND",
                   help="price a GPU preset's trials on this GPU kind, e.g. H100 (default: this machine's GPU, else "
                        "the most recently measured kind; sweeper/gpu_cost.py), and launch a grid's trials longest "
                        "first by those prices")
    p.add_argument("--gpus", type=float, default=None, metavar="N",
                   help="--dry-run: the sweep's wall time on N GPUs at --gpus-per-trial (default: one trial at a time)")
    p.add_argument("--confirm", default=None, metavar="SEARCH_DIR",
                   help="searches (hpo, hpo_base): rerun that search's best trial by validation error and its "
                        "base values on fresh seeds (--seeds, default 5), paired (sweeper/seeds/confirm.py)")
    p.add_argument("--dashboard", action="store_true",
                   help="give a local Ray its dashboard on 127.0.0.1:8265 (it takes start-up time and CPU from the "
                        "trials: docs/PERFORMANCE.md; a head's dashboard, see --address, outlives the sweep)")
    p.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard event files per trial (imports torch in this driver)")
    p.add_argument("--live-every", type=float, default=30.0, metavar="SECONDS",
                   help="rebuild the report (report.html) after trials end, at most every SECONDS (default 30; "
                        "0: only at the end), uploaded on a bucket (sweeper/driver/live.py)")
    p.add_argument("--stall-after", type=float, default=STALL_FACTOR, metavar="FACTOR",
                   help="name a running trial stalled (stderr, live.json, report.html) once it has not reported "
                        f"for FACTOR times the longest interval between its reports so far, {MIN_PACE_S:g} s at least "
                        f"(default {STALL_FACTOR:g}; 0: never; sweeper/driver/stalls.py)")
    p.add_argument("--end-stalled", action="store_true",
                   help="end a stalled trial as failed (no retry) so that the sweep can finish")
    p.add_argument("--mlflow", default=None, metavar="URI",
                   help="log every trial as an MLflow run (experiment: the sweep folder's name) to this tracking "
                        "URI, e.g. http://127.0.0.1:5000; needs pip install -e '.[mlflow]' (sweeper/driver/mlflow_log.py)")
    p.add_argument("--wandb", default=None, metavar="PROJECT",
                   help="log every trial as a Weights & Biases run of PROJECT (group: the sweep folder's name; "
                        "--resume continues the same runs); WANDB_MODE=offline writes them locally for wandb sync; "
                        "needs pip install -e '.[wandb]' (sweeper/driver/wandb_log.py)")
    p.add_argument("--cells", action="append", default=[], metavar="KEY=VALUE",
                   help="run only the cells whose config has KEY=VALUE (repeatable: all must hold), with the cells "
                        "they are compared with, e.g. --cells mur_step_size=0.1: more seeds for a claim between "
                        "two cells of a large sweep; alternatives joined by '|', the pairs of one by ',', e.g. "
                        "--cells 'vd=true,mur=none|vd=false,mur=direct' (--resume takes the same --cells)")
    p.add_argument("--cells-only", action="store_true",
                   help="with --cells and fixed seeds: train the cells --cells names and not the cells they are "
                        "compared with, for a claim between two named cells (the run's own table then lacks "
                        "those differences; the claims pair its trials with every committed run's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a TrainConfig key in every trial, e.g. --set mur_radius=2 (repeatable; a "
                        "shorter run also needs its schedules: --set steps=600 --set lr_rampdown=150)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    return parser().parse_args(argv)


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
                         f"run `{resume_command(stored, exp, *argv_cells(meta.get('argv') or []))}`")
    if not store.is_file(store.quick(exp) / store.TUNER_STATE):
        raise InputError(f"{exp} holds no Tune state ({store.TUNER_STATE}): it was stopped before its first trial "
                         f"was set up, so there is nothing to continue; start a new run without --resume")
    return exp, meta


def resume_command(sweep: str, exp, cells: list[str] = (), cells_only: bool = False) -> str:
    """The shell command that continues experiment `exp` (quoted: a folder may hold spaces or $), with the
    --cells (and --cells-only) it ran: a run of some cells resumes only with those (prepare)."""
    return shlex.join(["python", "-m", "sweeper.run", sweep, "--resume", str(exp),
                       *(x for c in cells for x in ("--cells", c)), *(["--cells-only"] if cells_only else [])])


def argv_value(argv: list[str], option: str) -> str | None:
    """The last value of `option` in a stored command line (sweep.json's argv), None where it is absent."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == option] + \
        [a.split("=", 1)[1] for a in argv if a.startswith(option + "=")]
    return values[-1] if values else None


def argv_cells(argv: list[str]) -> tuple[list[str], bool]:
    """The --cells values and --cells-only of a stored command line (sweep.json's argv)."""
    cells = [v for a, v in zip(argv, argv[1:]) if a == "--cells"] + [a.split("=", 1)[1] for a in argv
                                                                      if a.startswith("--cells=")]
    return cells, "--cells-only" in argv


def stored_preset(exp: Path, meta: dict, asked: str | None) -> str:
    """The preset an experiment was started with (its sweep.json `meta`); InputError if `asked` differs."""
    stored = meta.get("preset") or "paper"
    if asked not in (None, stored):
        raise InputError(f"{exp} was run with --preset {stored}, not {asked}; resume it without --preset")
    return stored


def print_dry_run(sweep: Sweep, trials: list[dict], args) -> None:
    varying = varying_keys(trials)
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
    from sweeper.costs import cost_lines, trial_prices
    from sweeper.driver.provenance import cpu_kernels

    # a quick trial's price follows the CPU's kernels; the paper presets' trials run on a GPU
    on_cpu = args.preset == "quick"
    if sweep.max_seeds:  # --seeds auto: the count depends on the results; each configuration at its own price
        from sweeper.seeds.auto_seeds import configurations, cost_lines as auto_cost_lines
        cells = configurations(trials)
        prices, how = trial_prices(sweep.name, args.preset, cells, cpu_kernels() if on_cpu else None)
        print("\n".join(auto_cost_lines(sweep, trials, args.preset, prices, how)))
        return
    if not on_cpu and not sweep.search:  # a GPU preset: each trial priced on a named kind, the sweep on N GPUs
        per_trial = args.gpus_per_trial if args.gpus_per_trial else 1.0
        print(f"resources per trial: {args.cpus_per_trial:g} CPU, {per_trial:g} GPU (--gpus-per-trial)")
        from sweeper.gpu_cost import cost_lines as gpu_lines
        for line in gpu_lines(trials, sweep.minutes_per_trial, args.gpu_kind,
                              args.gpus if args.gpus else per_trial, per_trial):
            print(line)
    n = sweep.search["num_samples"] if sweep.search else len(trials)
    changed = bool(args.seeds or args.set or args.cells)
    planned = None if sweep.search else trials
    kernels = cpu_kernels() if planned and on_cpu else None
    for line in cost_lines(sweep.name, args.preset, n, sweep.minutes_per_trial, changed,
                           planned=planned, kernels=kernels):
        print(f"cost: {line}")


def main(argv=None) -> int:
    """The run, its exit status, and at a stop signal at any moment (SIGINT, SIGTERM, SIGHUP) exit status 3
    with the --resume line; for 3 and 4 that line is also kept in the experiment folder (RESUME_FILE)."""
    args = parse_args(argv)
    run: dict = {}  # the experiment folder and its --resume command, once known: what a stop's last line needs
    with signals_interrupt():
        try:
            status = drive(args, run)
            ignore_stop_signals()  # the run is over: its last lines are written whatever comes now
        except KeyboardInterrupt:
            ignore_stop_signals()
            status = interrupted(run)
        keep_resume_line(run, status)
    return status


def ignore_stop_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def interrupted(run: dict) -> int:
    """A stop signal outside Tune's fit() (its graceful stop ends fit() itself): the --resume line where the
    experiment holds a Tune state, else that there is nothing to continue."""
    exp = run.get("exp_dir")
    if exp is not None and resumable(exp):
        print(f"interrupted: the sweep's state is saved; continue it with `{run['resume']}`", file=sys.stderr)
    else:
        print("interrupted before the sweep's first trial was set up: there is nothing to continue; run the "
              "command again", file=sys.stderr)
    return EXIT_INTERRUPTED


def resumable(exp) -> bool:
    try:
        return store.is_file(store.quick(exp) / store.TUNER_STATE)
    except (OSError, StorageError):
        return False


RESUME_FILE = "resume.txt"  # an experiment's --resume command, kept there by a run that ended with 3 or 4


def keep_resume_line(run: dict, status: int) -> None:
    """The --resume command into the experiment folder after exit 3 or 4 (after SIGHUP no terminal read it),
    removed again once a run of it ends with 0; a folder that does not take it is a note, not an error."""
    exp = run.get("exp_dir")
    if exp is None or not resumable(exp):
        return
    path = store.quick(exp) / RESUME_FILE
    try:
        if status in (EXIT_INTERRUPTED, EXIT_STORAGE_LOST):
            store.write_text(path, run["resume"] + "\n")
        elif status == EXIT_OK and store.is_file(path):
            store.remove(path)
    except (OSError, StorageError) as e:
        if status != EXIT_STORAGE_LOST:  # exit 4 is this storage failing: its last line names the folder and command
            print(f"note: {RESUME_FILE} not updated in {exp} ({one_line(e)})", file=sys.stderr)


def drive(args, run: dict) -> int:
    """Checks, lease, Ray, Tune and the report: the exit status (main turns a stop signal into 3)."""
    try:
        plan = prepare(args)
    except (SweepError, ConfigError, DataError, InputError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if plan is None:  # --dry-run: printed
        return EXIT_OK
    sweep, trials, exp_dir, address = plan
    run.update(exp_dir=exp_dir, resume=resume_command(sweep.name, exp_dir, args.cells, args.cells_only))
    pause_point("checked")
    try:
        # one driver per experiment
        lease = DriverLease(exp_dir, resume_command(sweep.name, exp_dir, args.cells, args.cells_only))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args.resume:  # held before anything in the folder is read for Tune or set aside
            try:
                lease.acquire()
                for note in check_resumable(exp_dir):
                    print(note, file=sys.stderr)
            except (InputError, StorageError) as e:
                print(f"error: {e}", file=sys.stderr)
                return EXIT_BAD_INPUT
        return run_sweep(args, sweep, trials, exp_dir, address, lease)
    finally:
        lease.release()


def run_sweep(args, sweep: Sweep, trials: list[dict], exp_dir, address: str | None, lease: DriverLease) -> int:
    """Ray started, the Tuner built (a new experiment folder: `lease` taken once it exists) and run, the
    report written; the exit status."""
    if note := job_stop_note():
        print(note, file=sys.stderr)
    # loggers: result_loggers(); Ctrl+C and SIGTERM: the GracefulStop, in place before Ray starts and before
    # sweep.json is written, so that a signal from then on stops the sweep at fit()'s first step, state saved
    with env_set(TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1", TUNE_DISABLE_SIGINT_HANDLER="1"), \
            GracefulStop(resume_command(sweep.name, exp_dir, args.cells, args.cells_only), exp_dir) as stop, \
            trial_actor_env():
        try:
            resources = start_ray(address, args, stop)
            pause_point("ray_up")
        except ConnectionError as e:  # e.g. --address auto with no cluster running here
            print(f"error: cannot connect to Ray at {address}: {str(e).splitlines()[0]}; start a head with "
                  f"`ray start --head --dashboard-host 127.0.0.1` or omit --address for a local Ray", file=sys.stderr)
            return EXIT_BAD_INPUT
        except InputError as e:  # no node can ever run a trial
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        try:
            tuner = make_tuner(sweep, trials, args, exp_dir, resources, lease)
        except InputError as e:  # the new folder's lease could not be taken (the bucket refused the write)
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        try:
            grid = tuner.fit()
        except (OSError, *UNREADABLE_PICKLE) as e:  # Tune lists the bucket once more after its loop: an outage
            if isinstance(exp_dir, Path) and disk_full(e, exp_dir):  # still on ends here; Tune's cut error.pkl
                storage_full(stop.resume, exp_dir)
                return exit_status(storage=True)
            if isinstance(exp_dir, Path) or isinstance(e, UNREADABLE_PICKLE):
                raise
            storage_lost(stop.resume, exp_dir, one_line(e))
            return exit_status(storage=True)
    pause_point("fit_done")  # the graceful stop's block is over: signals_interrupt has the signals again
    import ray
    ray.shutdown()  # prints the worker log lines Ray still buffers now: the lines of finish() end the log
    pause_point("ray_down")
    return finish(grid, exp_dir, stop)


def prepare(args):
    """Everything checked before Ray starts: (sweep, trial configs, experiment folder, Ray address), or
    None after a dry run's printout. SweepError, ConfigError, DataError, InputError or StorageError
    with the fix on bad input."""
    check_credentials(args)  # before any URI is stored, printed or used as a cache folder's name
    check_paths(args)
    get_sweep(args.sweep, args.preset or default_preset(args.sweep))  # unknown sweep or preset: the closest ones
    exp_dir = root = None
    if args.resume and not args.dry_run:  # the stored run decides the preset; its configs were checked
        # --resume DIR reads and writes DIR alone: the results root is looked at only to find the latest
        root = store.check(args.storage) if args.resume == "latest" else None
        exp_dir, meta = find_experiment(root, args.sweep + ("_confirm" if args.confirm else ""), args.resume)
        store.check_resumable(exp_dir)  # Tune writes into it: a read-only folder ends here, not inside Ray
        args.preset = stored_preset(exp_dir, meta, args.preset)
        if args.max_failures is not None:  # Tune restores the run's FailureConfig with its state
            raise InputError(f"{exp_dir} keeps the --max-failures it was started with; resume it without "
                             f"--max-failures")
    args.preset = args.preset or default_preset(args.sweep)
    sweep = get_sweep(args.sweep, args.preset)
    if args.confirm:  # the search's best trial and its base values, paired over fresh seeds
        from sweeper.seeds.confirm import ConfirmError, confirm_sweep
        try:
            sweep = confirm_sweep(sweep, args.confirm, args.seeds)
        except ConfirmError as e:
            raise InputError(str(e)) from None
    if args.cells_only and not args.cells:
        raise InputError("--cells-only keeps the cells --cells names; add --cells KEY=VALUE, or drop --cells-only")
    if args.cells_only and args.seeds == "auto":
        raise InputError("--seeds auto decides each cell against the cell it is compared with, which --cells-only "
                         "leaves out; give fixed seeds (--seeds N --seed-start S), or drop --cells-only")
    if args.cells:
        sweep = select_cells(sweep, args.cells, compared=not args.cells_only)
    if exp_dir is not None and (args.cells or "--cells" in (meta.get("argv") or [])) and \
            json.loads(json.dumps(sweep.variants)) != meta.get("variants"):
        raise InputError(f"{exp_dir} was run with other cells (sweep.json's variants; its command: "
                         f"{' '.join(meta.get('argv') or [])}); resume it with the --cells (and --cells-only) "
                         f"it started with")
    if exp_dir is not None:  # a --seeds auto run resumes with the plan it started with, or not at all
        from sweeper.seeds.auto_seeds import check_resume
        from sweeper.seeds.sequential import SequentialError
        try:
            check_resume(meta, sweep, args.seeds == "auto", args.max_seeds, exp_dir)
        except SequentialError as e:
            raise InputError(str(e)) from None
    if args.seeds == "auto":  # the first look's seeds, then more where a cell's claim is open
        from sweeper.seeds.auto_seeds import auto_sweep
        from sweeper.seeds.sequential import SequentialError
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
    check_device(trials, args)
    check_data_dir(trials)
    check_cache(trials, args)
    if args.mlflow:  # mlflow installed, its server answering: before Ray starts
        from sweeper.driver.mlflow_log import MLflowError, check_mlflow
        try:
            check_mlflow(args.mlflow)
        except MLflowError as e:
            raise InputError(str(e)) from None
    check_wandb_run(args, None if exp_dir is None else meta)
    missing = []  # a dry run plans without the data: one line per data set it lacks, after the plan
    if exp_dir is None:  # on --resume the trials run their stored configs, data_dir included
        for name, data_dir, download in sorted({(t["dataset"], t["data_dir"], bool(t.get("download", False)))
                                                for t in trials}):
            if args.dry_run:  # never downloads; a data set not there yet is a line, a corrupt one still an error
                try:
                    check_available(name, data_dir, False)
                except DataError as e:
                    missing.append(f"data: {name}: not in {data_dir} yet; the run downloads it (download=true)"
                                   if download else f"data: {name}: {e}")
                    continue
            check_readable(name, data_dir, download and not args.dry_run)  # parses the files: a corrupt one fails now
    if args.dry_run:  # the results root as a real run checks it, but a local one is not created
        store.check(args.storage, create=False)
        print_dry_run(sweep, trials, args)
        for line in missing:
            print(line)
        return None
    if exp_dir is None:  # a new experiment under the results root, writable (a bucket: probed once)
        root = root or store.check(args.storage)
        exp_dir = root / store.experiment_name(sweep.name, time.time())
    address = check_address(args.address or os.environ.get("RAY_ADDRESS"))
    if address:
        use_token_if_available()  # before Ray is imported: it reads the mode once
    return sweep, trials, exp_dir, address


def check_wandb_run(args, meta: dict | None) -> None:
    """--wandb's project checked before Ray starts (wandb_log.check_wandb). On --resume (`meta`: its sweep.json)
    the stored callbacks log, so the project the experiment started with is checked, and another --wandb is
    a note."""
    project = args.wandb if meta is None else argv_value(meta.get("argv") or [], "--wandb")
    if meta is not None and args.wandb not in (None, project):
        print(f"note: --wandb does not apply on --resume; the experiment logs as it started "
              f"({f'W&B project {project}' if project else 'no W&B'})", file=sys.stderr)
    if not project:
        return
    from sweeper.driver.wandb_log import WandbError, check_wandb
    try:
        check_wandb(project)
    except WandbError as e:
        raise InputError(str(e)) from None


def exit_status(*, storage: bool = False, stopped: bool = False, failed: bool = False,
                no_report: bool = False) -> int:
    """The exit status of a run that reached Ray: the code of the first of these that holds.
    4 the storage could not take the sweep (its disk ran full, or the bucket stopped answering): no report,
      since the storage does not hold it all; `--resume` continues once it does;
    3 a stop signal (Ctrl+C, SIGTERM, `ray job stop`), during fit() or while the report was written: the
      state is saved, `--resume` continues it;
    1 a trial failed (Tune's fit() does not raise; a diverged trial is a result, not a failure);
    5 every trial finished but the report could not be built or uploaded;
    0 otherwise. Bad input (2) ends the run before Ray starts."""
    for holds, code in ((storage, EXIT_STORAGE_LOST), (stopped, EXIT_INTERRUPTED), (failed, EXIT_TRIAL_FAILED),
                        (no_report, EXIT_NO_REPORT)):
        if holds:
            return code
    return EXIT_OK


def finish(grid, exp_dir, stop: GracefulStop) -> int:
    """The report, the failed and diverged trials and the --resume command printed; the exit status
    (`exit_status`)."""
    from sweeper.analysis.aggregate import AggregateError
    from sweeper.report import report_at

    errors = [r for r in grid if r.error is not None]
    if isinstance(exp_dir, Path) and any(disk_full(r.error, exp_dir) for r in errors):
        print_failed(errors)
        storage_full(stop.resume, exp_dir)
        return exit_status(storage=True)
    if not isinstance(exp_dir, Path) and (lost := store.stored_state_error()):
        print_failed(errors)
        storage_lost(stop.resume, exp_dir, lost)
        return exit_status(storage=True)
    no_report = None
    try:
        with signals_interrupt():
            pause_point("report")
            paths = report_at(exp_dir)  # a URI: built in a local cache, uploaded
    except KeyboardInterrupt:  # Ctrl+C or SIGTERM while the report is built: the state is saved
        print(f"interrupted while writing the report: the sweep's state is saved; `{stop.resume}` "
              f"finishes it and writes the report", file=sys.stderr)
        return exit_status(stopped=True)
    except (AggregateError, StorageError) as e:  # e.g. no trial reported anything, or the upload failed
        print(f"no report: {e}", file=sys.stderr)
        paths, no_report = {}, e
    for name in ("table.md", "table_ranked.md"):  # the ranked table: searches (hpo) only
        if paths.get(name):
            print(Path(paths[name]).read_text())
    print_failed(errors)
    diverged = [r for r in grid if r.error is None and (r.metrics or {}).get("diverged") == 1]
    if diverged:
        print(f"note: {len(diverged)} trial(s) diverged (a result: the tables count them, `n_diverged`)",
              file=sys.stderr)
    refused = [r for r in grid if r.error is None and refusal(r.metrics or {})]
    for r in refused:
        print(f"trial {r.path} failed: {refusal(r.metrics)}", file=sys.stderr)
    print(f"results: {exp_dir}")
    pause_point("reported")
    status = exit_status(stopped=stop.stopped.is_set(), failed=bool(errors or refused), no_report=no_report is not None)
    if status == EXIT_INTERRUPTED:
        print(f"interrupted: the sweep's state is saved; continue it with `{stop.resume}`",
              file=sys.stderr)
    elif status == EXIT_NO_REPORT:
        print(f"error: the trials finished but the report was not written; rebuild it with "
              f"`{shlex.join(['python', '-m', 'sweeper.report', str(exp_dir)])}`", file=sys.stderr)
    return status


def print_failed(errors) -> None:
    """One stderr line per errored trial of the result grid: its folder and its error by its cause."""
    for r in errors:
        print(f"trial {r.path} failed: {error_line(r.error)}", file=sys.stderr)


def error_line(error: BaseException) -> str:
    """A failed trial's error in one line, by its cause: a RayTaskError's own first line is a header (the
    function, PID, actor id); the exception the trial raised is its `cause`."""
    cause = getattr(error, "cause", None)
    while isinstance(getattr(cause, "cause", None), BaseException):  # nested task errors
        cause = cause.cause
    return one_line(cause if isinstance(cause, BaseException) else error)


# What reading a pickle cut short raises: EOFError when it is empty, UnpicklingError when it stops midway
UNREADABLE_PICKLE = (EOFError, pickle.UnpicklingError)


def disk_full(e: BaseException, exp_dir: Path) -> bool:
    """Whether `e` comes from the experiment's disk running full: an OSError "No space left on device"
    in its chain (a RayTaskError's cause included), or an UNREADABLE_PICKLE (Tune reading the error.pkl
    it could not write in full) while that disk has less than LOW_SPACE bytes free."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and (e.errno == errno.ENOSPC or "No space left on device" in str(e)):
            return True
        if isinstance(e, UNREADABLE_PICKLE):
            return free_bytes(exp_dir) < LOW_SPACE
        e = getattr(e, "cause", None) or e.__cause__ or e.__context__
    return False


def free_bytes(folder: Path) -> int:
    """Bytes free on the file system of `folder` (or of its nearest existing parent)."""
    return shutil.disk_usage(store.nearest_existing(folder)).free


def storage_full(resume: str, exp_dir: Path) -> None:
    """Why exit status 4, when the experiment's disk ran full, so trials could not store their results or
    checkpoints and Tune its state; no report (it would need space too). One line with the free space."""
    print(f"error: no space left on the disk of {exp_dir} ({free_bytes(exp_dir) / 2**20:.1f} MiB free); its "
          f"trials and Tune's state could not be stored; free space, then continue with "
          f"`{resume}`", file=sys.stderr)


def storage_lost(resume: str, exp_dir, why: str) -> None:
    """Why exit status 4, when the bucket stopped answering for longer than its retries, so it may lack the last
    results, checkpoints and Tune's final state; no report (it would read the bucket). One line."""
    print(f"error: storage {exp_dir} unreachable at the end of the sweep ({why}); it holds the state of its "
          f"last successful upload; once it answers again, continue with "
          f"`{resume}`", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
