"""The checks `python -m sweeper.run` makes before Ray starts: each one a one-line InputError naming the fix.

No URI may carry credentials (checked first, before any URI is stored or printed); every trial's
config is built from the sweep and the command line (`select_cells`: --cells; `trial_configs`: --seeds,
--seed-start, --set) and validated as a TrainConfig; a search must hold out a validation split and start inside its
ranges; the baseline must name config keys; the per-trial resources must be ones Ray accepts; a Ray
address must answer. sweeper/run.py's `prepare` calls them in that order, and checks the results
root (`storage.check`) before the address.

    python -m sweeper.run ablation_radius --preset quick --set seed=1   # error: ... one line, exit 2
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import sys
from dataclasses import fields, replace
from pathlib import Path

from search_spaces import Sweep
from trainables.config import TrainConfig, full_config, unknown_keys
from sweeper import storage as store
from sweeper.storage import is_uri
from trainables.remote import cache_root, half_uri, redact, scheme, secret_in_uri


class InputError(ValueError):
    """Bad command-line input found before any work; message names the problem and the fix."""


def _parse_override(s: str) -> tuple[str, object]:
    if "=" not in s:
        raise InputError(f"--set {s!r} is not KEY=VALUE; write e.g. --set mur_radius=2")
    k, v = s.split("=", 1)
    if k == "seed":
        raise InputError(f"--set {s} would give every trial one seed; seeds are a grid axis: "
                         f"--seeds N (how many) and --seed-start N (the first)")
    return k, _value(v)


def _value(v: str) -> object:
    """A command-line value as JSON reads it (2, 0.1, true), else the string itself (mt, direct)."""
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


def trial_configs(sweep: Sweep, args: argparse.Namespace) -> list[dict]:
    """Every trial's config dict, validated by TrainConfig (raises ConfigError)."""
    if args.seeds is not None and args.seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {args.seeds}")
    if args.seed_start is not None and args.seed_start < 0:
        raise InputError(f"--seed-start must be >= 0, got {args.seed_start}")
    if args.seed_start is not None:
        sweep = replace(sweep, first_seed=args.seed_start)
    overrides = dict(_parse_override(s) for s in args.set)
    known = {f.name for f in fields(TrainConfig)}
    if bad := sorted(set(overrides) - known):
        raise InputError(f"--set: {unknown_keys(bad, known, 'key')}")
    data_dir = args.data_dir or overrides.get("data_dir") or sweep.base.get("data_dir", "./data")
    overrides["data_dir"] = data_dir if is_uri(data_dir) else str(Path(data_dir).expanduser().resolve())  # trials run in other folders
    trials = [{**t, **overrides} for t in sweep.trials(args.seeds)]
    for t in trials:
        TrainConfig.from_dict(t)
    # one key set for every trial (rows may set keys others leave at their default, e.g. a
    # LabelSpreading row and MUR rows with a radius): the Tuner's param space is built from it
    keys = list(dict.fromkeys(k for t in trials for k in t))
    return [{k: full[k] for k in keys} for full in map(full_config, trials)]


def select_cells(sweep: Sweep, specs: list[str], compared: bool = True) -> Sweep:
    """The sweep cut to the cells (variant x grid point) that every spec of `specs` (--cells) admits, each
    with the cell it is compared with by the tables' rule (analysis.paired.baseline_cells: Sweep.baseline
    within its baseline_within keys, else the baseline_for row), so that its paired differences and --seeds
    auto still work; `compared=False` (--cells-only) keeps the admitted cells alone, for a fixed-seed claim
    between two of them that needs no third cell trained again. A spec is KEY=VALUE, or alternatives
    joined by "|", each KEY=VALUE pairs joined by ",": "vd=true,mur=none|vd=false,mur=direct" admits
    those two cells and no cell with both or neither.
    The kept cells become explicit variants and the grid empties: sweep.json then records the run's own
    cells. InputError where a key is no TrainConfig field or no cell matches. Why: a claim between two
    cells of a large sweep (neither of them the baseline) needs more seeds of those cells alone."""
    alts = [[[term.split("=", 1) for term in alt.split(",")] for alt in s.split("|")] for s in specs]
    if any(len(term) != 2 or not term[0] for spec in alts for alt in spec for term in alt):
        raise InputError(f"--cells {' '.join(specs)}: give KEY=VALUE (alternatives joined by '|', pairs of one "
                         f"alternative by ','), e.g. --cells mur_step_size=0.1")
    want = [[{k: _value(v) for k, v in alt} for alt in spec] for spec in alts]  # every spec, any alternative
    known = {f.name for f in fields(TrainConfig)}
    bad = sorted({k for spec in want for alt in spec for k in alt} - known)
    if bad:
        raise InputError(f"--cells: {unknown_keys(bad, known, 'key')}")
    keys = list(sweep.grid)
    cells = [{**v, **dict(zip(keys, vals))} for v in sweep.variants
             for vals in itertools.product(*(sweep.grid[k] for k in keys))]
    full = [full_config({**sweep.base, **c}, check=True) for c in cells]
    hit = [all(any(all(f[k] == v for k, v in alt.items()) for alt in spec) for spec in want) for f in full]
    if not any(hit):
        raise InputError(f"--cells {' '.join(specs)}: no cell of sweep {sweep.name} has those values; "
                         f"see its cells with --dry-run")
    if not compared:
        return replace(sweep, variants=[c for c, h in zip(cells, hit) if h], grid={})
    import pandas as pd  # the tables' pairing rule, so a cut sweep's tables pair what it ran

    from sweeper.analysis.aggregate import NON_GROUP_KEYS
    from sweeper.analysis.paired import baseline_cells

    frame = pd.DataFrame([{k: v for k, v in f.items() if k not in NON_GROUP_KEYS} for f in full])
    pairs, _ = baseline_cells(frame, sweep.baseline, sweep.rows, sweep.cols, sweep.baseline_within,
                              sweep.baseline_for)
    keep = list(hit)
    for i in range(len(full)):  # the cell each kept one is compared with
        if hit[i] and pairs.get(i) is not None:
            keep[pairs[i]] = True
    return replace(sweep, variants=[c for c, k in zip(cells, keep) if k], grid={})


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
    if not any(all(full_config(t, check=True)[k] == v for k, v in sweep.baseline.items()) for t in trials):
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


def path_options(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(option, value) of every option that names a folder or a URI and was given."""
    return [(o, v) for o, v in (("--storage", args.storage), ("--data-dir", args.data_dir),
                                ("--resume", None if args.resume == "latest" else args.resume),
                                ("--confirm", args.confirm),
                                *(("--set data_dir", o.split("=", 1)[1]) for o in args.set
                                  if o.split("=", 1)[0] == "data_dir")) if v is not None]


def check_paths(args: argparse.Namespace) -> None:
    """A folder option that is empty (it would mean the working folder, or the default, silently) or that
    starts like a URI without its "//" (s3:/bucket would train into a local folder named "s3:"): InputError."""
    for option, value in [*path_options(args), *((("--mlflow", args.mlflow),) if args.mlflow is not None else ())]:
        if not value.strip():
            raise InputError(f"{option} is empty; name a folder or a URI (s3://BUCKET/PREFIX), or leave "
                             f"{option.split()[0]} out for its default")
        if s := half_uri(value):
            rest = value[len(s) + 1:].lstrip("/")
            raise InputError(f"{option} {value} is neither a folder nor a URI (no // after {s}:); "
                             f"write {s}://{rest}, or ./{value} for a local folder of that name")


def check_cache(trials: list[dict], args: argparse.Namespace) -> None:
    """Where a URI is read or written (--storage, a data_dir, --resume, --confirm), this machine keeps local
    copies in the cache folder (trainables/remote.py cache_root): it must be, or be creatable as, a
    writable folder, checked now rather than after the trials have trained (InputError)."""
    if not any(is_uri(v) for _, v in path_options(args)) and not any(is_uri(t["data_dir"]) for t in trials):
        return
    root = cache_root()
    named = f"VBI_MUR_CACHE={root}" if os.environ.get("VBI_MUR_CACHE") else f"the cache folder {root}"
    here = store.nearest_existing(root)
    if not here.is_dir():
        raise InputError(f"{named} cannot be a folder: {here} is a file; set VBI_MUR_CACHE to a folder "
                         f"(the local copies of what a URI holds go there)")
    if not os.access(here, os.W_OK | os.X_OK):
        raise InputError(f"{named} cannot be written ({here} is not writable); set VBI_MUR_CACHE to a "
                         f"writable folder")


def check_resources(args: argparse.Namespace) -> None:
    """Per-trial resources and concurrency that Ray would reject only after it started."""
    if not args.cpus_per_trial > 0:
        raise InputError(f"--cpus-per-trial must be > 0, got {args.cpus_per_trial:g}")
    if args.gpus_per_trial is not None and not args.gpus_per_trial >= 0:
        raise InputError(f"--gpus-per-trial must be >= 0 (fractions share a GPU), got {args.gpus_per_trial:g}")
    if args.max_failures is not None and args.max_failures < 0:
        raise InputError(f"--max-failures must be >= 0 (0: a failed trial is not restarted), got {args.max_failures}")
    if args.max_concurrent < 0:
        raise InputError(f"--max-concurrent must be >= 0 (0: as resources allow), got {args.max_concurrent}")
    if not (args.stall_after >= 0 and args.stall_after < float("inf")):
        raise InputError(f"--stall-after must be a factor >= 0 (0: no stall watch), got {args.stall_after:g}")
    if not args.live_every >= 0:
        raise InputError(f"--live-every must be >= 0 seconds (0: the report only at the end), got {args.live_every:g}")


def local_gpus(env=os.environ) -> int:
    """NVIDIA GPUs a local Ray would give trials, without importing torch: those CUDA_VISIBLE_DEVICES
    names where it is set (empty: none), else the /dev/nvidiaN device files."""
    if "CUDA_VISIBLE_DEVICES" in env:
        return len([d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() not in ("", "-1")])
    return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()]) \
        if os.path.isdir("/dev") else 0


def check_device(trials: list[dict], args: argparse.Namespace, env=os.environ) -> None:
    """device=cuda needs a GPU in every trial: --gpus-per-trial 0 gives none, and a local Ray (no --address,
    no RAY_ADDRESS) on a machine without one has none to give (InputError). A cluster's nodes are not
    known before Ray starts: there, ray_session.start_ray's resources decide."""
    if not any(t.get("device") == "cuda" for t in trials):
        return
    if args.gpus_per_trial == 0:
        raise InputError("device=cuda needs a GPU in each trial, but --gpus-per-trial 0 gives none; drop "
                         "--gpus-per-trial 0, or --set device=auto (a GPU where there is one) or device=cpu")
    if not (args.address or env.get("RAY_ADDRESS")) and local_gpus(env) == 0:
        raise InputError("device=cuda, but this machine has no GPU for a local Ray (no /dev/nvidia*, or "
                         "CUDA_VISIBLE_DEVICES names none); --set device=auto or device=cpu, or join a cluster "
                         "with GPUs (--address)")


# what the top of a data folder may hold: the top entries of the data sets' file layouts
# (datafiles.dataset_layouts, which takes them from torchvision: written out so that the driver needs no torch)
DATA_ENTRIES = ("MNIST", "cifar-10-batches-py", "cifar-100-python", "mnist.pkl.gz", "test_32x32.mat",
                "train_32x32.mat")


def check_data_dir(trials: list[dict]) -> None:
    """digits read no files, so no other check looks at their data_dir; one that exists must still be a
    data folder (empty, or holding one of the data sets' files), not a folder named by mistake (InputError)."""
    for data_dir in sorted({t["data_dir"] for t in trials if t.get("dataset") == "digits"}):
        root = Path(data_dir)
        if is_uri(data_dir) or not root.is_dir():
            continue
        entries = {p.name for p in root.iterdir()}
        if entries and not entries & set(DATA_ENTRIES):
            raise InputError(f"data_dir {root} is not a data folder (it holds none of {', '.join(DATA_ENTRIES)}); "
                             f"digits need no data folder: leave --data-dir and data_dir out, or name the "
                             f"folder that holds the data sets")


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
