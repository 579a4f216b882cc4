"""The Tune trainable's checkpoint spacing, run in this process against a stand-in for ray.tune.

Every evaluation is reported; a report carries a checkpoint once `checkpoint_every_s` seconds passed
since the trial's last checkpoint (or its start), and the last one always does. The clock is a fake
that each training interval advances by a fixed time, so the expected reports follow by arithmetic.
"""
import contextlib
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

import trainables.tune as trainable
from trainables.config import NOT_COMPARED, TrainConfig
from trainables.trainer import CheckpointMismatch, Trainer, check_resumable, train

STEPS, EVERY, DT = 60, 10, 4.0  # 6 intervals of 4 fake seconds each
EXACT = ("step", "test_error", "val_error", "best_test_error", "loss_total", "loss_cons", "sensitivity_mean")


def config(**kw) -> TrainConfig:
    return TrainConfig(dataset="digits", num_labels=100, arch="convnet_small", method="mt",
                       steps=STEPS, eval_every=EVERY, lr_rampdown=EVERY, sensitivity_samples=4, **kw)


class FakeTune:
    """report / get_checkpoint / Checkpoint.from_directory, recording each report and its files."""

    def __init__(self):
        self.reports = []
        self.Checkpoint = SimpleNamespace(from_directory=lambda d: sorted(p.name for p in Path(d).iterdir()))

    def report(self, metrics, checkpoint=None):
        self.reports.append((metrics["step"], checkpoint))
        self.last = metrics

    def get_checkpoint(self):
        return None


@pytest.mark.slow
@pytest.mark.parametrize("every_s, checkpointed", [
    (0.0, [10, 20, 30, 40, 50, 60]),  # 0: every evaluation
    (10.0, [30, 60]),                 # 4 s an interval: 12 s at step 30, then 12 s more at step 60
    (7.0, [20, 40, 60]),              # 8 s at step 20, 8 s more at step 40, and the last
    (1e9, [60]),                      # never on time: the last evaluation only
])
def test_reports_carry_a_checkpoint_once_checkpoint_every_s_passed(every_s, checkpointed, monkeypatch):
    now = [0.0]
    run_interval = Trainer.run_interval

    def timed_interval(self):  # each interval takes DT seconds on the fake clock
        now[0] += DT
        return run_interval(self)

    fake = FakeTune()
    monkeypatch.setattr(Trainer, "run_interval", timed_interval)
    monkeypatch.setattr(trainable, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(trainable, "tune", fake)
    trainable.train_tune(config(checkpoint_every_s=every_s).__dict__)
    assert [s for s, _ in fake.reports] == list(range(EVERY, STEPS + 1, EVERY))  # every evaluation reported
    assert [s for s, c in fake.reports if c is not None] == checkpointed
    assert all(c == [trainable.CKPT] for _, c in fake.reports if c is not None)


# A child process trains with torch's kernels forced to one instruction set and prints the kernels its
# last report names; the trainable runs against a stand-in for ray.tune as in this file's tests.
_FORCED_KERNELS = """
import json, sys
from types import SimpleNamespace
import trainables.tune as trainable
from trainables.config import TrainConfig
last = {}
trainable.tune = SimpleNamespace(report=lambda m, checkpoint=None: last.update(m), get_checkpoint=lambda: None,
                                 Checkpoint=SimpleNamespace(from_directory=lambda d: d))
trainable.train_tune(TrainConfig(**json.loads(sys.argv[1])).__dict__)
print(last["cpu_kernels"])
"""


@pytest.mark.slow
def test_each_report_names_the_cpu_kernels_the_trial_ran_on():
    """ATEN_CPU_CAPABILITY=default makes torch use its plain kernels on any CPU (a trajectory of its own:
    study/evidence.py tells trajectories apart by this key), so the report must say DEFAULT, whatever
    this machine's own vector instruction set is."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    cfg = dict(dataset="digits", num_labels=100, arch="convnet_small", method="mt", steps=2, eval_every=2,
               lr_rampdown=2, sensitivity_samples=1)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": str(root)}
    p = subprocess.run([sys.executable, "-c", _FORCED_KERNELS, json.dumps(cfg)], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "DEFAULT"


def test_checkpoint_every_s_below_zero_is_a_config_error():
    with pytest.raises(ValueError, match="checkpoint_every_s must be >= 0"):
        TrainConfig(checkpoint_every_s=-1)


@pytest.mark.slow
def test_checkpoints_do_not_change_the_numbers(monkeypatch):
    """The trainable's last report, checkpointing at every evaluation, equals an uninterrupted
    trainer.train run that never saves (so checkpoint_every_s may differ from the paper's row)."""
    fake = FakeTune()
    monkeypatch.setattr(trainable, "tune", fake)
    trainable.train_tune(config(checkpoint_every_s=0).__dict__)
    assert sum(c is not None for _, c in fake.reports) == STEPS // EVERY
    ref = train(config(), log=None)
    assert {k: fake.last[k] for k in EXACT} == {k: ref[k] for k in EXACT}


class Planted:
    """An object whose unpickling would run code (here: create a file): what a checkpoint planted in a
    shared bucket could hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


@pytest.mark.slow
def test_a_checkpoint_loads_as_weights_only_and_continues_the_run(tmp_path):
    """Everything Trainer.state_dict holds loads with torch.load(weights_only=True), and the restored
    trainer continues exactly like one that never stopped."""
    import torch

    cfg = config(vd=True)
    a, b = Trainer(cfg), Trainer(cfg)
    a.run_interval()
    a.save(tmp_path / trainable.CKPT)
    torch.load(tmp_path / trainable.CKPT, weights_only=True)  # raises on anything but tensors and plain values
    after = a.run_interval()
    b.load(tmp_path / trainable.CKPT)  # also the global RNG state as it was at the save
    assert (b.run_interval()["loss_total"], b.step) == (after["loss_total"], a.step)


def test_a_checkpoint_holding_other_objects_is_refused_without_running_them(tmp_path):
    import torch

    trainer = Trainer(config())
    state = trainer.state_dict()
    state["interval"]["planted"] = Planted(tmp_path / "ran")
    torch.save(state, tmp_path / trainable.CKPT)
    with pytest.raises(ValueError, match=r"holds objects other than tensors and plain values \(\w+\), which "
                                         r"loading could run as code"):
        trainer.load(tmp_path / trainable.CKPT)
    assert not (tmp_path / "ran").exists()
# ---------------------------------------------------------------- resuming a checkpoint of older code

class ResumingTune(FakeTune):
    """A restarted trial: get_checkpoint() hands it the folder `ckpt_dir`; reports kept whole."""

    def __init__(self, ckpt_dir: Path):
        super().__init__()
        self.ckpt_dir, self.metrics = ckpt_dir, []

    def get_checkpoint(self):
        return SimpleNamespace(as_directory=lambda: contextlib.nullcontext(self.ckpt_dir))

    def report(self, metrics, checkpoint=None):
        self.metrics.append(metrics)


def checkpoint_without(field: str, cfg: TrainConfig, folder: Path, intervals: int = 2) -> int:
    """A trainer's checkpoint after `intervals` evaluations, its stored config lacking `field` (as one
    written before the field was added to TrainConfig); returns its step."""
    import torch

    tr = Trainer(cfg)
    for _ in range(intervals):
        tr.run_interval()
    tr.save(folder / trainable.CKPT)
    state = torch.load(folder / trainable.CKPT, weights_only=False)
    del state["config"][field]
    torch.save(state, folder / trainable.CKPT)
    return tr.step


@pytest.mark.slow
@pytest.mark.parametrize("field", ["checkpoint_every_s", "channels_last"])
def test_checkpoint_older_than_a_field_that_cannot_change_numbers_resumes_with_its_default(field, monkeypatch,
                                                                                          tmp_path):
    cfg = config(checkpoint_every_s=0)
    step = checkpoint_without(field, cfg, tmp_path)
    fake = ResumingTune(tmp_path)
    monkeypatch.setattr(trainable, "tune", fake)
    trainable.train_tune(cfg.__dict__)
    assert [m["step"] for m in fake.metrics] == list(range(step + EVERY, STEPS + 1, EVERY))  # continued
    ref = train(cfg, log=None)  # the uninterrupted run
    assert {k: fake.metrics[-1][k] for k in EXACT} == {k: ref[k] for k in EXACT}


def test_every_field_that_cannot_change_numbers_may_be_missing_from_a_checkpoint():
    cfg = config()
    stored = {k: v for k, v in cfg.to_dict().items() if k not in NOT_COMPARED}
    check_resumable(stored, cfg, 10)  # no error
    assert set(NOT_COMPARED) <= set(cfg.to_dict())  # each names a field


@pytest.mark.parametrize("field", ["translate_pad", "bn_clean_pass", "label_seed"])
def test_checkpoint_older_than_a_field_that_changes_numbers_ends_the_trial_with_one_line(field, monkeypatch,
                                                                                        tmp_path):
    """No exception (Ray would retry, loading the same checkpoint each time): one report that names the field
    and ends the trial, which the results table then counts as failed."""
    from sweeper.analysis.aggregate import trial_status

    cfg = config(checkpoint_every_s=0)
    step = checkpoint_without(field, cfg, tmp_path, intervals=1)
    fake = ResumingTune(tmp_path)
    monkeypatch.setattr(trainable, "tune", fake)
    trainable.train_tune(cfg.__dict__)
    assert len(fake.metrics) == 1 and fake.metrics[0]["done"] is True
    msg = fake.metrics[0][trainable.RESUME_ERROR]
    assert "\n" not in msg and f"field {field!r}" in msg and f"step {step}" in msg and "without --resume" in msg
    history = [{"step": s, "done": False} for s in range(EVERY, step + 1, EVERY)]
    assert trial_status(history + fake.metrics, has_error=False, ray_status="TERMINATED", steps=STEPS) == "failed"
    assert trial_status(history, has_error=False, ray_status="TERMINATED", steps=STEPS) == "stopped"  # without it


def test_a_stored_value_that_differs_names_the_field():
    cfg = config()
    with pytest.raises(CheckpointMismatch, match=r"another config \(fields \['lr'\]\)"):
        check_resumable({**cfg.to_dict(), "lr": cfg.lr * 2}, cfg, 10)


@pytest.mark.parametrize("bad, words", [
    ({"device": "cuda"}, "device='cuda' but no CUDA GPU is visible; use device='auto' or 'cpu'"),
    ({"width": math.inf}, "width must be a finite number, got inf"),
])
def test_a_config_the_trial_cannot_run_ends_it_once_with_its_message(bad, words, monkeypatch):
    """A ConfigError raised in the trial (its config, or the trainer's set-up: no GPU for device=cuda) would
    fail the same way on every retry: one report naming it, no exception for Ray to retry, and the
    results table counts the trial as failed."""
    import torch

    from sweeper.analysis.aggregate import trial_status

    if bad.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU, so device=cuda is no error here")
    fake = ResumingTune(Path("."))
    fake.get_checkpoint = lambda: None
    monkeypatch.setattr(trainable, "tune", fake)
    trainable.train_tune({**config().__dict__, **bad})
    assert fake.metrics == [{trainable.CONFIG_ERROR: words, "done": True}]
    assert trial_status(fake.metrics, has_error=False, ray_status="TERMINATED", steps=STEPS) == "failed"


@pytest.mark.slow
def test_cpu_kernels_answers_the_same_with_torch_imported_and_from_a_child():
    """The dry run asks cpu_kernels() after torch is imported (its answer then comes from this process),
    the docs code before (a child Python answers). Both must name the kernels in use: under
    ATEN_CPU_CAPABILITY=default that is DEFAULT on any CPU, which neither path could guess."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    script = ("import sys; from sweeper.driver.provenance import cpu_kernels; before = cpu_kernels(); "
              "assert 'torch' not in sys.modules; import torch; print(before, cpu_kernels())")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": str(root)}
    p = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["DEFAULT", "DEFAULT"]


# ---------------------------------------------------------------- a checkpoint that does not load

def two_checkpoints(cfg: TrainConfig, trial: Path) -> tuple[int, int]:
    """Tune's layout of a trial that checkpointed twice: trial/checkpoint_000000 and checkpoint_000001, each
    with trainer.pt after one and two evaluations; returns their steps."""
    tr = Trainer(cfg)
    steps = []
    for i in range(2):
        tr.run_interval()
        tr.save(trial / f"checkpoint_{i:06d}" / trainable.CKPT)
        steps.append(tr.step)
    return steps[0], steps[1]


class RestartingTune(ResumingTune):
    """A restarted trial whose latest checkpoint is a real ray.tune.Checkpoint (path and file system)."""

    def __init__(self, ckpt):
        super().__init__(Path("."))
        self.ckpt = ckpt

    def get_checkpoint(self):
        return self.ckpt


@pytest.mark.parametrize("damage", ["empty", pytest.param("cut short", marks=pytest.mark.slow),
                                    pytest.param("not a checkpoint", marks=pytest.mark.slow)])
def test_an_unreadable_latest_checkpoint_is_named_and_the_older_one_continues(damage, monkeypatch, tmp_path, capsys):
    """The latest checkpoint damaged (an empty trainer.pt, one cut short, another torch file): one line names
    it, the trial goes on from the older checkpoint Tune keeps beside it, and never raises (Tune would retry
    the same file)."""
    import torch
    from ray.tune import Checkpoint

    cfg = config(checkpoint_every_s=0)
    first, _ = two_checkpoints(cfg, tmp_path / "trial")
    latest = tmp_path / "trial" / "checkpoint_000001"
    data = (latest / trainable.CKPT).read_bytes()
    if damage == "not a checkpoint":
        torch.save({"weights": torch.zeros(3)}, latest / trainable.CKPT)
    else:
        (latest / trainable.CKPT).write_bytes(b"" if damage == "empty" else data[: len(data) // 2])
    fake = RestartingTune(Checkpoint(str(latest)))
    monkeypatch.setattr(trainable, "tune", fake)
    trainable.train_tune(cfg.__dict__)
    err = capsys.readouterr().err
    assert [m["step"] for m in fake.metrics] == list(range(first + EVERY, STEPS + 1, EVERY))
    assert f"checkpoint unreadable: {latest / trainable.CKPT} " in err
    assert f"trial goes on from the older checkpoint {tmp_path / 'trial' / 'checkpoint_000000'} (step {first})" in err


@pytest.mark.slow
def test_a_trial_whose_checkpoints_all_fail_starts_again_and_ends_as_an_uninterrupted_run(monkeypatch, tmp_path,
                                                                                          capsys):
    from ray.tune import Checkpoint

    cfg = config(checkpoint_every_s=0)
    two_checkpoints(cfg, tmp_path / "trial")
    for i in range(2):
        (tmp_path / "trial" / f"checkpoint_{i:06d}" / trainable.CKPT).write_bytes(b"")
    fake = RestartingTune(Checkpoint(str(tmp_path / "trial" / "checkpoint_000001")))
    monkeypatch.setattr(trainable, "tune", fake)
    trainable.train_tune(cfg.__dict__)
    err = capsys.readouterr().err
    assert err.count("checkpoint unreadable: ") == 2 and "no checkpoint of this trial reads (2 tried): the trial " \
                                                         "starts again from step 0" in err
    assert [m["step"] for m in fake.metrics] == list(range(EVERY, STEPS + 1, EVERY))
    ref = train(cfg, log=None)
    assert {k: fake.metrics[-1][k] for k in EXACT} == {k: ref[k] for k in EXACT}
