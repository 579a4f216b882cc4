"""The thin Ray Tune trainable around `trainables.trainer.Trainer` (the only Ray import in trainables/).

Config dict -> TrainConfig -> Trainer; every evaluation is reported, with a checkpoint once
`checkpoint_every_s` seconds passed since the last one, and always at the end; after a failure Ray
Tune restarts the trial and it resumes from `tune.get_checkpoint()`, or, where that one does not load (empty,
cut short), from the older checkpoint Tune keeps beside it, else from step 0, saying so (`restore`).
A checkpoint that the trial's config
cannot continue (trainer.check_resumable) ends the trial at once with one report naming the field
(`resume_error`): Ray's retries would load the same checkpoint again. So does a config the trial
cannot run (`ConfigError` from the config or the trainer's set-up, e.g. device=cuda on a node without a
GPU): one report `config_error` with its message, no retry.

Why the spacing: Tune (sweeper/driver/tuner.py keeps 2 checkpoints per trial) saves its whole experiment
state, which grows with the number of trials, whenever a trial has checkpointed twice since the
last save. Checkpoints at most every 10 s keep that to Tune's own period (>= 10 s), so the driver's
work grows linearly with the trials (benchmarks/driver_scale.py); checkpointing every evaluation of
short trials made it grow with the square. A diverged run
reports `diverged=1` with the step and loss term, and ends normally so the sweep goes on. The
last checkpoint of a MUR run also holds `virtual_points.npz` (x* of 8 test images at r/2..4r),
which the report plots without torch.

torch and the trainer are imported inside `train_tune`, in the trial's process: the driver
(`sweeper.run`) pickles this function by reference and never imports torch, whose import would take the trials' CPU.

    python -m sweeper.run ablation_radius --preset quick     # uses this trainable
"""
from __future__ import annotations

import math
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray
from ray import tune

from trainables.config import BOOKKEEPING, SWEEP_KEYS, ConfigError, TrainConfig
from trainables.files import CKPT, CONFIG_ERROR, KERNELS_KEY, RESUME_ERROR, VIRTUAL_POINTS, one_line, unresolved

N_VIRTUAL_POINT_IMAGES = 8


def train_tune(config: dict) -> None:
    import torch

    from trainables.mur import virtual_point_examples
    from trainables.trainer import CheckpointMismatch, Diverged, Trainer

    # plain str: a TorchVersion in a reported result makes the driver import torch to unpickle it
    # cpu_kernels: the vector instruction set torch's CPU kernels use here (AVX2, AVX512, ...); it sets the
    # rounding of every sum, so two machines' trials of one seed are two trajectories (study/evidence.py)
    versions = {"python_version": platform.python_version(), "torch_version": str(torch.__version__),
                "ray_version": ray.__version__, KERNELS_KEY: torch.backends.cpu.get_cpu_capability()}
    try:  # a config error fails the same way on every retry: end the trial once, with its message
        if missing := [k for k in SWEEP_KEYS if k not in config]:  # e.g. a trial Tune made up from a torn state
            raise ConfigError(f"trial config {sorted(config)} lacks {', '.join(missing)}: it is no trial of a sweep, "
                              f"so it is not run; start the sweep again with sweeper.run")
        if blank := unresolved(config):  # restored without the grid it came from: Tune could not fill it in
            keys = ", ".join(blank[:3]) + (f" and {len(blank) - 3} more" if len(blank) > 3 else "")
            raise ConfigError(f"trial config has Tune's placeholders for {keys} instead of values (an "
                              f"experiment resumed without its trials.json): it is not run; run its seed anew")
        cfg = TrainConfig.from_dict({k: v for k, v in config.items() if k not in BOOKKEEPING})
        if not cfg.spec.network:  # the classical baseline (LabelSpreading): seconds, deterministic, one report
            from trainables.trainer import train

            tune.report({**train(cfg, log=None), **versions})
            return
        trainer = Trainer(cfg)
    except ConfigError as e:
        tune.report({CONFIG_ERROR: str(e), "done": True})
        return
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        try:
            trainer = restore(trainer, ckpt, lambda: Trainer(cfg))
        except CheckpointMismatch as e:  # every retry would fail the same way: end the trial, saying why
            tune.report({RESUME_ERROR: str(e), "done": True})
            return
    last: dict = {}
    saved = time.monotonic()  # the last checkpoint (or the start)
    while not trainer.done:
        try:
            last = {**trainer.run_interval(), **versions}
        except Diverged as e:
            tune.report({**_nan_metrics(last), "step": e.step, "diverged": 1, "diverged_step": e.step,
                         "diverged_term": e.term, "test_error": math.nan, "done": True})
            return
        if not trainer.done and time.monotonic() - saved < cfg.checkpoint_every_s:
            tune.report(last)
            continue
        saved = time.monotonic()
        with tempfile.TemporaryDirectory() as d:
            trainer.save(Path(d) / CKPT)
            if trainer.done and cfg.mur != "none":
                x = trainer.data.x_test[:N_VIRTUAL_POINT_IMAGES]  # (8, C, H, W)
                np.savez(Path(d) / VIRTUAL_POINTS, **virtual_point_examples(trainer.student, x, cfg.mur_radius))
            tune.report(last, checkpoint=tune.Checkpoint.from_directory(d))


CHECKPOINT_DIR = re.compile(r"checkpoint_(\d+)")  # Tune's name of a trial's checkpoint folder


def older_checkpoints(ckpt) -> list:
    """The trial's other checkpoints older than `ckpt`, newest first: the checkpoint_NNNNNN folders beside
    it (Tune keeps the newest two, sweeper/driver/tuner.py), listed on its own file system, a local
    folder or a bucket alike; [] where they cannot be listed."""
    import pyarrow.fs as pafs

    parent, _, name = ckpt.path.rstrip("/").rpartition("/")
    own = CHECKPOINT_DIR.fullmatch(name)
    try:
        infos = ckpt.filesystem.get_file_info(pafs.FileSelector(parent, allow_not_found=True))
    except OSError:
        return []
    found = [(int(m.group(1)), i.path) for i in infos
             if i.type == pafs.FileType.Directory and (m := CHECKPOINT_DIR.fullmatch(i.base_name))]
    return [type(ckpt)(path, filesystem=ckpt.filesystem)
            for n, path in sorted(found, reverse=True) if own is None or n < int(own.group(1))]


def restore(trainer, ckpt, fresh):
    """`trainer` loaded from the newest checkpoint of its trial that reads: Tune's latest (`ckpt`), else
    the older ones beside it, newest first, else none (`fresh()`: a new trainer, from step 0). Each
    checkpoint that does not load is named in one line on stderr (Ray shows it in the driver's output),
    and so is where the trial goes on from; the error never reaches Tune, whose retries would load the
    same file again. CheckpointMismatch (a config that cannot continue it) propagates."""
    from trainables.trainer import CheckpointUnreadable

    def candidates():
        yield ckpt
        yield from older_checkpoints(ckpt)  # listed only once the latest has failed

    skipped = 0
    for c in candidates():
        try:
            with c.as_directory() as d:
                trainer.load(Path(d) / CKPT)
        except (CheckpointUnreadable, OSError) as e:  # OSError: the folder itself cannot be fetched
            skipped += 1
            print(f"checkpoint unreadable: {one_line(str(e) if isinstance(e, CheckpointUnreadable) else e)}",
                  file=sys.stderr)
            if getattr(e, "partial", False):  # a load that failed part-way changed the trainer
                trainer = fresh()
            continue
        if skipped:
            print(f"trial goes on from the older checkpoint {c.path} (step {trainer.step})", file=sys.stderr)
        return trainer
    print(f"no checkpoint of this trial reads ({skipped} tried): the trial starts again from step 0",
          file=sys.stderr)
    return trainer


def _nan_metrics(last: dict) -> dict:
    """Keep the last good evaluation's numbers for the record, flagged by diverged=1."""
    return {k: v for k, v in last.items() if k not in ("test_error",)}
