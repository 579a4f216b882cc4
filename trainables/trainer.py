"""The M+VBI+MUR training loop (no Ray): data on the device, one step, EMA, evaluation, checkpoints.

    python -m trainables.trainer --method mt --vd --mur direct --steps 600   # digits, CPU, ~1 min

One `Trainer` owns the student, the teacher (MT, ICT), the optimizer, the step counter and every
random generator, so that `load(save())` continues bit-for-bit like an uninterrupted run on CPU.
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import math
import os
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from trainables import schedules
from trainables.augment_strong import strong_augment
from trainables.config import TrainConfig
from trainables.data import Batcher, Dataset, augment, labeled_split, load_dataset
from trainables.methods import Views, loss_terms
from trainables.metrics import error_rate, histogram, sensitivity
from trainables.models import build_model
from trainables.variational import sparsity

TERMS = ("xent", "cons", "kl", "mur", "entmin")


class Diverged(RuntimeError):
    """A loss term became NaN or infinite; the run stops at once."""

    def __init__(self, step: int, term: str, value: float):
        super().__init__(f"diverged at step {step}: loss term {term!r} = {value}")
        self.step, self.term, self.value = step, term, value


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but no CUDA GPU is visible; use device='auto' or 'cpu'")
    return torch.device(name)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on conv/linear weights (VD: theta) only; never on log_sigma2, biases, BN."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        (decay if leaf in ("weight", "theta") and p.dim() > 1 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Trainer:
    def __init__(self, cfg: TrainConfig, data: Dataset | None = None):
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        torch.manual_seed(cfg.seed)
        if data is None:
            data = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, device=self.device)  # ZCA on the device
        self.data = data.to(self.device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and cfg.channels_last:
            self.data.x_train = self.data.x_train.contiguous(memory_format=torch.channels_last)
        self.student = build_model(cfg).to(self.device)
        if self.cuda and cfg.channels_last:
            self.student = self.student.to(memory_format=torch.channels_last)
        self.teacher = None
        if cfg.uses_teacher:
            self.teacher = copy.deepcopy(self.student)
            for p in self.teacher.parameters():
                p.requires_grad_(False)
        self.opt = torch.optim.SGD(param_groups(self.student, cfg.weight_decay), lr=cfg.lr,
                                   momentum=cfg.momentum, nesterov=cfg.momentum > 0)
        idx_l, idx_u = labeled_split(self.data.y_train.cpu(), cfg.num_labels, cfg.num_classes, cfg.seed)
        self.batcher = Batcher(idx_l, idx_u, cfg.batch_labeled, cfg.batch_unlabeled,
                               torch.Generator().manual_seed(cfg.seed))
        self.gen = torch.Generator(self.device).manual_seed(cfg.seed + 1)  # augmentation, ICT, RR
        self.step = 0
        self.best_test_error = math.inf
        self.wall_time = 0.0
        self._reset_interval()

    # ------------------------------------------------------------------ training
    @property
    def done(self) -> bool:
        return self.step >= self.cfg.steps

    def _reset_interval(self):
        self._sums = {t: 0.0 for t in ("total", *TERMS)}
        self._g0_sum, self._n = 0.0, 0

    def _views(self) -> Views:
        cfg, d = self.cfg, self.data
        idx_l, idx_u = self.batcher.next()
        idx = torch.cat([idx_l, idx_u]).to(self.device)      # (B,) labeled first
        x = d.x_train[idx]                                   # (B, C, H, W)
        v = Views(x=augment(x, cfg.translate, cfg.flip, self.gen),
                  x2=augment(x, cfg.translate, cfg.flip, self.gen),
                  y_l=d.y_train[idx[: len(idx_l)]])
        if cfg.method == "fixmatch":  # strong view A(x_u), drawn after the weak views: they never see it
            x_u = augment(x[len(idx_l):], cfg.translate, cfg.flip, self.gen)  # (U, C, H, W)
            v.xs = strong_augment(x_u, self.gen, cfg.fm_ops, cfg.fm_cutout, cfg.fm_groups)
        return v

    def coefficients(self, step: int) -> dict[str, float]:
        cfg = self.cfg
        return {"xent": 1.0,
                "cons": schedules.coef_at(step, cfg.cons_coef, cfg.rampup),
                "kl": schedules.coef_at(step, cfg.kl_coef, cfg.rampup),
                "mur": schedules.coef_at(step, cfg.mur_coef, cfg.rampup),
                "entmin": schedules.coef_at(step, cfg.entmin_coef, cfg.rampup)}

    def train_step(self) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        self.student.train()
        if self.teacher is not None:
            self.teacher.train()
        lr = schedules.lr_at(self.step, cfg)
        for g in self.opt.param_groups:
            g["lr"] = lr
        v = self._views()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda and cfg.bf16):
            terms, g0_norm = loss_terms(cfg, self.student, self.teacher, v, self.gen)
        coef = self.coefficients(self.step)
        total = sum(coef[k] * t.float() for k, t in terms.items())
        if not bool(torch.isfinite(total)):  # one host sync per step: divergence stops at once
            bad = next((k for k, t in terms.items() if not torch.isfinite(t)), "total")
            raise Diverged(self.step, bad, float(terms.get(bad, total).detach()))
        self.opt.zero_grad(set_to_none=True)
        total.backward()
        self.opt.step()
        if self.teacher is not None:
            self._ema_update(schedules.ema_decay_at(self.step, cfg))
        self.step += 1
        self._sums["total"] += total.detach()
        for k, t in terms.items():
            self._sums[k] += t.detach().float()
        if g0_norm is not None:
            self._g0_sum += g0_norm.mean()
        self._n += 1
        return terms

    @torch.no_grad()
    def _ema_update(self, decay: float):
        """teacher <- decay * teacher + (1 - decay) * student, every parameter (incl. log_sigma2)."""
        for pt, ps in zip(self.teacher.parameters(), self.student.parameters()):
            pt.lerp_(ps, 1.0 - decay)
        if self.cfg.method == "fixmatch":
            # FixMatch's EMA model only evaluates, never runs in train mode: it takes the student's BN stats
            for bt, bs in zip(self.teacher.buffers(), self.student.buffers()):
                bt.copy_(bs)

    # ------------------------------------------------------------------ evaluation
    @property
    def evaluated(self) -> nn.Module:
        """The network a method reports: the teacher where there is one, else the student."""
        return self.teacher if self.teacher is not None else self.student

    def evaluate(self) -> dict:
        cfg, d = self.cfg, self.data
        err_s = error_rate(self.student, d.x_test, d.y_test, cfg.eval_batch)
        err_t = error_rate(self.teacher, d.x_test, d.y_test, cfg.eval_batch) if self.teacher else math.nan
        err = err_t if self.teacher is not None else err_s
        self.best_test_error = min(self.best_test_error, err)
        n = max(self._n, 1)
        out = {"step": self.step,
               "epoch_fraction": self.step * (cfg.batch_labeled + cfg.batch_unlabeled) / len(d.y_train),
               "test_error": err, "test_error_student": err_s, "test_error_teacher": err_t,
               "best_test_error": self.best_test_error,
               "lr": schedules.lr_at(max(self.step - 1, 0), cfg),
               "sparsity": sparsity(self.student) if cfg.vd else math.nan,
               "g0_norm": float(self._g0_sum) / n if cfg.mur in ("direct", "pga", "ga") else math.nan}
        for k in ("total", *TERMS):
            out[f"loss_{k}"] = float(self._sums[k]) / n if self._n else math.nan
        if cfg.sensitivity_samples > 0:
            s = sensitivity(self.evaluated, d.x_test[: cfg.sensitivity_samples]).float().cpu()
            out["sensitivity_mean"], out["sensitivity_std"] = float(s.mean()), float(s.std())
            out["sensitivity_hist"] = json.dumps(histogram(s, bins=20))
        out.update(diverged=0, diverged_step=-1, diverged_term="", wall_time=self.wall_time,
                   done=self.done)
        self._reset_interval()
        return out

    def run_interval(self) -> dict:
        """Train up to the next evaluation point, then evaluate. Raises Diverged."""
        t0 = time.perf_counter()
        target = min(self.cfg.steps, (self.step // self.cfg.eval_every + 1) * self.cfg.eval_every)
        n0 = self.step
        while self.step < target:
            self.train_step()
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        self.wall_time += dt
        out = self.evaluate()
        out["steps_per_s"] = (self.step - n0) / dt if dt > 0 else math.nan
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        rng = {"torch": torch.get_rng_state(), "gen": self.gen.get_state()}
        if self.cuda:
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {"config": self.cfg.to_dict(), "step": self.step, "best_test_error": self.best_test_error,
                "wall_time": self.wall_time, "student": self.student.state_dict(),
                "teacher": self.teacher.state_dict() if self.teacher is not None else None,
                "opt": self.opt.state_dict(), "batcher": self.batcher.state_dict(), "rng": rng,
                "interval": {"sums": {k: float(v) for k, v in self._sums.items()},
                             "g0_sum": float(self._g0_sum), "n": self._n}}

    def load_state_dict(self, s: dict):
        if s["config"] != self.cfg.to_dict():
            diff = sorted(k for k in s["config"] if s["config"][k] != self.cfg.to_dict().get(k))
            raise ValueError(f"checkpoint was written by a different config (keys {diff}); "
                             f"restore it with the config it was trained with")
        self.step, self.best_test_error, self.wall_time = s["step"], s["best_test_error"], s["wall_time"]
        self.student.load_state_dict(s["student"])
        if self.teacher is not None:
            self.teacher.load_state_dict(s["teacher"])
        self.opt.load_state_dict(s["opt"])
        self.batcher.load_state_dict(s["batcher"])
        torch.set_rng_state(s["rng"]["torch"])
        self.gen.set_state(s["rng"]["gen"])
        if self.cuda and "cuda" in s["rng"]:
            torch.cuda.set_rng_state(s["rng"]["cuda"], self.device)
        iv = s["interval"]
        self._sums, self._g0_sum, self._n = dict(iv["sums"]), iv["g0_sum"], iv["n"]

    def save(self, path: str | os.PathLike):
        """Atomic: write a temporary file in the same folder, then rename over `path`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save(self.state_dict(), buf)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(buf.getvalue())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self, path: str | os.PathLike):
        self.load_state_dict(torch.load(path, map_location=self.device, weights_only=False))


def train(cfg: TrainConfig, data: Dataset | None = None, log=print) -> dict:
    """Run a whole training; return the last evaluation (marked diverged=1 if it diverged)."""
    trainer = Trainer(cfg, data)
    out = {}
    while not trainer.done:
        try:
            out = trainer.run_interval()
        except Diverged as e:
            out = {**out, "step": e.step, "diverged": 1, "diverged_step": e.step,
                   "diverged_term": e.term, "test_error": math.nan, "done": True}
            if log:
                log(f"[trainer] {e}")
            return out
        if log:
            log(f"[trainer] step {out['step']:>6}  test_error {out['test_error']:6.2f}  "
                f"loss {out['loss_total']:.4f}  {out['steps_per_s']:.1f} steps/s")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in TrainConfig.__dataclass_fields__.values():
        t = f.type if isinstance(f.type, str) else f.type.__name__
        if t == "bool":
            p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, action=argparse.BooleanOptionalAction)
        else:
            p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type={"int": int, "float": float}.get(t, str))
    args = {k: v for k, v in vars(p.parse_args(argv)).items() if v is not None}
    cfg = TrainConfig.from_dict(args)
    print(json.dumps(train(cfg), indent=1, default=str))


if __name__ == "__main__":
    main()
