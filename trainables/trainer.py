"""The M+VBI+MUR training loop (no Ray): data on the device, one step, EMA, evaluation, checkpoints.

    python -m trainables.trainer --method mt --vd --mur direct --steps 600   # digits, CPU

One `Trainer` owns the student, the teacher (MT, ICT), the optimizer, the step counter and every
random generator, so that `load(save())` continues bit-for-bit like an uninterrupted run on CPU.
TrainConfig.compile picks eager or torch.compile'd training steps (`compile_for_training`); the NaN check reads the loss values on the host every
nan_check_every steps (`Trainer.check_finite`).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import pickle
import re
import sys
import time
from pathlib import Path

import torch
from torch import nn

from trainables import schedules
from trainables.config import NOT_COMPARED, ConfigError, TrainConfig, applies
from trainables.data import (Batcher, Dataset, augment, labeled_split, load_dataset, unlabeled_with_labeled,
                              validation_indices)
from trainables.datafiles import DataError, check_available
from trainables.files import atomic_write, one_line
from trainables.methods import Views, loss_terms, needs_input_grad
from trainables.metrics import error_rate, histogram, sensitivity
from trainables.models import build_model
from trainables.registry.method import TERMS
from trainables.selection import improves_on_val
from trainables.sgd import Sgd
from trainables.variational import sparsity


class CheckpointMismatch(ValueError):
    """A checkpoint that this config cannot continue; the message names the field. Retrying cannot help."""


# what load_state_dict reads from a checkpoint (state_dict writes them all)
STATE_KEYS = frozenset({"config", "step", "best_test_error", "best_val_error", "test_error_at_best_val", "wall_time",
                        "student", "teacher", "opt", "batcher", "rng", "interval"})


class CheckpointUnreadable(ValueError):
    """A checkpoint file that does not load (empty, cut short, not a torch file, or holding objects other
    than tensors and plain values); the message names the file. Retrying cannot help either."""


def check_resumable(stored: dict, cfg: TrainConfig, step: int) -> None:
    """A checkpoint's stored config must be `cfg`. A field that did not exist when it was written takes its
    default, which is `cfg`'s value (the trial's stored config lacks it too): fine for a field that cannot
    change the numbers (config.NOT_COMPARED) or that this config does not read (config.applies: a method
    added since, with keys of its own), else CheckpointMismatch, as is any stored value that differs."""
    now = cfg.to_dict()
    missing = [k for k in now if k not in stored and k not in NOT_COMPARED and applies(k, now)]
    if missing:
        raise CheckpointMismatch(
            f"checkpoint at step {step} predates the config field {missing[0]!r}"
            + (f" (and {missing[1:]})" if missing[1:] else "")
            + f", which changes the numbers: its default {now[missing[0]]!r} may not be what the run used; "
            f"start the trial anew (a new sweep without --resume), or continue it with the code that wrote it")
    diff = [k for k in stored if stored[k] != now.get(k)]
    if diff:
        raise CheckpointMismatch(f"checkpoint at step {step} was written by another config (fields {diff}); "
                                 f"restore it with the config it was trained with")


class Diverged(RuntimeError):
    """A loss term became NaN or infinite; the run stops at once."""

    def __init__(self, step: int, term: str, value: float):
        super().__init__(f"diverged at step {step}: loss term {term!r} = {value}")
        self.step, self.term, self.value = step, term, value


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' but no CUDA GPU is visible; use device='auto' or 'cpu'")
    return torch.device(name)


def param_groups(model: nn.Module, weight_decay: float, scope: str = "all") -> list[dict]:
    """SGD parameter groups [decayed, not decayed]; log_sigma2 (VD) is never decayed.

    scope="all": every trainable parameter but log_sigma2, BN scale/offset and biases included:
    the authors' `_l2_reg_loss` (models/semi_supervised/mean_teacher.py) adds weight_decay *
    sum tf.nn.l2_loss(p) = weight_decay * sum p^2 / 2 over every trainable variable of the
    classifier whose name lacks "log_sigma2"; its gradient weight_decay * p is SGD's weight_decay.
    scope="weights": conv/linear weights (VD: theta) only.
    """
    if scope not in ("all", "weights"):
        raise ValueError(f"unknown weight decay scope {scope!r}; choose 'all' or 'weights'")
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if scope == "all":
            decayed = leaf != "log_sigma2"
        else:
            decayed = leaf in ("weight", "theta") and p.dim() > 1
        (decay if decayed else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def compile_for_training(mode: str, student: nn.Module, teacher: nn.Module | None):
    """(student_fn, teacher_fn, loss_fn) that Trainer.train_step calls, for TrainConfig.compile = mode.

    none:  the modules and methods.loss_terms themselves: eager.
    model: torch.compile of each module. The wrappers share the modules' parameters and buffers, so
           the Trainer keeps the plain modules (state_dict keys without torch.compile's "_orig_mod."
           prefix; evaluation stays eager). MUR's autograd.grad to the input, the BN-freezing and
           mean-weight context managers, the losses and the KL run eagerly between compiled passes.
    step:  torch.compile of methods.loss_terms: every pass, MUR's point search (autograd.grad to
           the input, traced with dynamo's trace_autograd_ops where this torch has it), VD's KL and
           the consistency terms in one forward graph, with AOTAutograd's backward of the loss terms.
           torch._dynamo.explain on digits (torch 2.14): MT, MT+VD, MT+MUR direct, MT+VD+MUR, Pi,
           MUT, FM, FM+VD: one graph, no break (frozen_bn_stats and mean_weights are traced).
           Breaks, each running its piece eagerly: PGA/GA with >= 2 steps (4 for PGA 5) and FM+MUR
           (3): entropy_grad's x.detach().requires_grad_() leaks out of a graph; ops that take an
           explicit generator (RR's randn, ICT's randperm and augmentation; they keep the run's generator stream);
           VAT's fork_rng (12). Without trace_autograd_ops every autograd.grad breaks the graph
           (MT+VD+MUR: 3 graphs).
    graphs: step with mode="reduce-overhead": on CUDA inductor records the forward and the backward
           graph as CUDA graphs and replays them, one host launch each instead of hundreds (the
           H200's MT step is bound by the host's launches). The batch is copied into the graphs'
           static inputs; parameters and buffers are read and updated in place. The losses and
           gradients it returns live in the graphs' memory pool until the next step's replay, so
           train_step drops the last step's gradients (zero_grad) before the forward and never
           keeps a returned tensor across steps (it keeps copies: the NaN check's stack, the sums).
           Eager between graphs: batch gathering and augmentation, the coefficient sum, SGD's and
           the EMA's multi-tensor updates. On the CPU there is nothing to record: it is step, compiled
           with step's options (reduce-overhead would only add inductor's CUDA-graph flag, which the
           CPU ignores, and a second entry in its compile caches for the same kernels).
    Random numbers: compiled code draws Gaussian noise, VD's local-reparameterisation noise and
    dropout masks with inductor's own generator, seeded from torch's global generator: the same
    distributions as eager, other draws; a compiled CPU run is still reproducible and its checkpoint
    (which holds the global RNG state) resumes bit-for-bit. Inductor's fallback_random=True with
    layout_optimization=False gives eager's draws (tests/test_compile.py).
    Dynamo's caches are reset first: a Tune actor runs trials one after another in one process, and
    every config adds graphs to the same functions' caches, which past torch's recompile limit would
    silently fall back to eager. So one compiled Trainer trains at a time per process.
    """
    if mode == "none":
        return student, teacher, loss_terms
    import torch._dynamo

    torch._dynamo.reset()
    if mode == "model":
        return (torch.compile(student, dynamic=False),
                torch.compile(teacher, dynamic=False) if teacher is not None else None, loss_terms)
    if mode not in ("step", "graphs"):
        raise ValueError(f"unknown compile mode {mode!r}; choose none, model, step or graphs")
    on_cuda = any(p.is_cuda for p in student.parameters())
    compiled = torch.compile(loss_terms, dynamic=False, mode="reduce-overhead" if mode == "graphs" and on_cuda else None)
    trace_grad = {"trace_autograd_ops": True} if hasattr(torch._dynamo.config, "trace_autograd_ops") else {}

    def compiled_loss_terms(cfg, student_fn, teacher_fn, v, gen):
        if needs_input_grad(cfg):
            v.x.requires_grad_(True)  # outside the graph: inside, dynamo would break it here
        if mode == "graphs":  # a new step: the last step's graph outputs (losses, gradients) are dead now
            torch.compiler.cudagraph_mark_step_begin()
        with torch._dynamo.config.patch(**trace_grad):
            return compiled(cfg, student_fn, teacher_fn, v, gen)

    return student, teacher, compiled_loss_terms


def splits(cfg: TrainConfig, y_train: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(idx_l, idx_u, idx_val) into the training set: the labeled subset (drawn by cfg.label_pick with
    cfg.subset_seed: the run's seed, or label_seed where fixed), the unlabeled rest (FixMatch as published:
    every image outside validation) and the validation split (fixed per data set, validation_indices)."""
    idx_val = validation_indices(cfg.dataset, len(y_train), cfg.n_val)
    idx_l, idx_u = labeled_split(y_train.cpu(), cfg.num_labels, cfg.num_classes, cfg.subset_seed,
                                 val_idx=idx_val, rule=cfg.label_rule, pick=cfg.label_pick)
    if cfg.fm_published and cfg.spec.published_unlabels_all:  # FixMatch's unlabeled set: every image
        idx_u = unlabeled_with_labeled(idx_l, idx_u)
    return idx_l, idx_u, idx_val


class Trainer:
    def __init__(self, cfg: TrainConfig, data: Dataset | None = None):
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        torch.manual_seed(cfg.seed)
        if data is None:
            data = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, device=self.device,  # ZCA on the device
                                svhn_norm=cfg.svhn_norm, n_val=cfg.n_val, cifar_norm=cfg.cifar_norm)
        self.data = data.to(self.device)
        self.cuda = self.device.type == "cuda"
        if cfg.channels_last:  # CPU too: ATen's NCHW BatchNorm and max-pool are far slower than channels_last's
            self.data.x_train = self.data.x_train.contiguous(memory_format=torch.channels_last)
        self.student = build_model(cfg).to(self.device)
        if cfg.channels_last:
            self.student = self.student.to(memory_format=torch.channels_last)
        self.teacher = None
        if cfg.uses_teacher:
            self.teacher = copy.deepcopy(self.student)
            for p in self.teacher.parameters():
                p.requires_grad_(False)
            # the EMA's (teacher, student) tensor lists, walked once here, not every step (four module walks
            # of host time per step); load_state_dict copies into these same tensors
            self._ema_params = (list(self.teacher.parameters()), list(self.student.parameters()))
            self._ema_buffers = (list(self.teacher.buffers()), list(self.student.buffers()))
        # torch.optim.SGD's update and state dict, without importing torch._dynamo into every trial (sgd.py)
        self.opt = Sgd(param_groups(self.student, cfg.weight_decay, cfg.weight_decay_scope), lr=cfg.lr,
                       momentum=cfg.momentum, nesterov=cfg.momentum > 0)
        # what train_step calls: the plain modules and loss_terms, or their compiled versions
        self.compile_mode = cfg.compile  # none | model | step | graphs
        self._student_fn, self._teacher_fn, self._loss_terms = compile_for_training(self.compile_mode, self.student,
                                                                                    self.teacher)
        self.compile_s = 0.0 if self.compile_mode == "none" else math.nan  # first step's extra seconds (trace, codegen)
        self._first_steps_s: list[float] = []  # wall time of the first compiled steps
        # graphs: step 0 compiles (and runs the graphs' warm-up), step 1 records them, step 2 replays
        self._timed_steps = 3 if self.compile_mode == "graphs" else 2
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, (T+1,) loss values) not yet NaN-checked
        self._pending_keys: tuple[str, ...] = ()  # the T terms, then "total"
        idx_l, idx_u, self.idx_val = splits(cfg, self.data.y_train)  # idx_val (V,): never trained on
        self._idx_val_dev = self.idx_val.to(self.device)  # (V,) for evaluate()
        self.idx_l, self.idx_u = idx_l, idx_u
        self.batcher = Batcher(idx_l, idx_u, cfg.batch_labeled, cfg.batch_unlabeled,
                               torch.Generator().manual_seed(cfg.seed))
        self.gen = torch.Generator(self.device).manual_seed(cfg.seed + 1)  # augmentation, ICT, RR
        self.step = 0
        self.best_test_error = math.inf
        self.best_val_error = math.inf  # and the test error at that evaluation (selected on validation)
        self.test_error_at_best_val = math.nan
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
        idx = torch.cat([idx_l, idx_u])                      # (B,) labeled first
        if self.cuda:  # pinned + non_blocking: a pageable host-to-device copy waits for the GPU queue to drain
            idx = idx.pin_memory()
        idx = idx.to(self.device, non_blocking=self.cuda)
        x = d.x_train[idx]                                   # (B, C, H, W)
        v = Views(x=augment(x, cfg.translate, cfg.flip, self.gen, cfg.translate_pad),
                  x2=augment(x, cfg.translate, cfg.flip, self.gen, cfg.translate_pad),
                  y_l=d.y_train[idx[: len(idx_l)]], x0=x if cfg.bn_clean_pass or "x0" in cfg.spec.views else None)
        if "strong" in cfg.spec.views:  # the strong view A(x_u), drawn after the weak views: they never see it
            # imported here: only FixMatch and UDA need torchvision, whose import every other trial's start would pay
            from trainables.augment_strong import strong_augment

            x_u = augment(x[len(idx_l):], cfg.translate, cfg.flip, self.gen, cfg.translate_pad)  # (U, C, H, W)
            v.xs = strong_augment(x_u, self.gen, cfg.fm_ops, cfg.fm_cutout, cfg.fm_groups, per_image=cfg.fm_published,
                                  pixels=d.pixels)
        return v

    def coefficients(self, step: int) -> dict[str, float]:
        cfg = self.cfg
        return {"xent": 1.0,
                "cons": schedules.coef_at(step, cfg.cons_coef, cfg.rampup),
                "kl": schedules.coef_at(step, cfg.kl_coef, cfg.rampup),
                "mur": schedules.coef_at(step, cfg.mur_coef, cfg.rampup),
                "entmin": schedules.coef_at(step, cfg.entmin_coef, cfg.rampup)}

    def train_step(self) -> dict[str, torch.Tensor]:
        """One optimizer step (and EMA update); returns the step's loss terms. Under compile="graphs" they
        live in the CUDA graphs' memory pool and are overwritten by the next step: copy what you keep."""
        cfg = self.cfg
        timed = self.compile_mode != "none" and len(self._first_steps_s) < self._timed_steps
        t0 = time.perf_counter() if timed else 0.0
        self.student.train()
        if self.teacher is not None:
            self.teacher.train()
        lr = schedules.lr_at(self.step, cfg)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)  # before the forward: compile="graphs" replays over last step's grads
        v = self._views()
        # teacher_bn="student": the teacher's train-mode passes (batch statistics) move its running stats,
        # which _ema_update then overwrites with the student's (no save-and-restore: ~60 launches a step).
        # A step that raises (Diverged, an error) leaves them moved: such a Trainer is abandoned, never
        # evaluated or saved (train() and tune.py stop on it).
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):  # CPU too: the precision sweep
            terms, g0_norm = self._loss_terms(cfg, self._student_fn, self._teacher_fn, v, self.gen)
            if cfg.bn_clean_pass:  # BN running stats also see the un-augmented batch (noise
                with torch.no_grad():  # and dropout still act inside the network, as in the authors' pass)
                    self._student_fn(v.x0)
        coef = self.coefficients(self.step)
        total = sum(coef[k] * t.float() for k, t in terms.items())
        self._queue_finite_check(terms, total)  # raises Diverged, every nan_check_every steps
        total.backward()
        # The authors' Mean Teacher runs the EMA among the update ops that the SGD step depends on, i.e. it
        # averages the student BEFORE this step's update; FixMatch's code runs its EMA after the update.
        ema_first = self.teacher is not None and not cfg.spec.ema_after_step
        if ema_first:
            self._ema_update(schedules.ema_decay_at(self.step, cfg))
        self.opt.step()
        if self.teacher is not None and not ema_first:
            self._ema_update(schedules.ema_decay_at(self.step, cfg))
        self.step += 1
        self._sums["total"] += total.detach()
        for k, t in terms.items():
            self._sums[k] += t.detach().float()
        if g0_norm is not None:
            self._g0_sum += g0_norm.mean()
        self._n += 1
        if timed:
            if self.cuda:
                torch.cuda.synchronize()
            self._first_steps_s.append(time.perf_counter() - t0)
            *first, last = self._first_steps_s  # compile_s = the first steps' time beyond a compiled step's
            self.compile_s = sum(first) - len(first) * last if first else last
        return terms

    def _queue_finite_check(self, terms: dict[str, torch.Tensor], total: torch.Tensor):
        """Keep this step's loss values on the device; check them on the host every nan_check_every steps.

        A per-step `bool(isfinite(total))` waits for the device's queue to drain every step; this
        syncs once per check. The check finds the FIRST step and term that went non-finite since
        the previous check and raises Diverged(step, term, value) exactly as a per-step check would
        (terms in loss_terms' order, then "total"). With nan_check_every = N > 1 the optimizer has
        already taken up to N - 1 updates after the bad step (from non-finite gradients); they do
        not matter: the run stops, it is marked diverged at the exact step and term, and no
        checkpoint ever holds them (run_interval and state_dict check first, and tune.py saves only
        after a run_interval that returned). N = 1 checks before the step's own update, which is
        then never taken (the behaviour before nan_check_every). Default 10: a sync empties the GPU's
        queue, which then idles while the host launches the next step's first kernels; once per 10
        steps amortises that stall tenfold, and a diverged run wastes at most 9 steps before it
        stops (runs are hundreds of thousands of steps; evaluations come every eval_every steps).
        """
        self._pending_keys = (*terms, "total")
        self._pending.append((self.step, torch.stack([*(t.detach().float() for t in terms.values()),
                                                      total.detach().float()])))  # (T+1,)
        if len(self._pending) >= self.cfg.nan_check_every:
            self.check_finite()

    def check_finite(self):
        """Raise Diverged for the first non-finite loss value since the last check (one host sync)."""
        if not self._pending:
            return
        steps, rows = zip(*self._pending)
        self._pending = []
        vals = torch.stack(rows)      # (n, T+1): per step since the last check, the terms then the total
        bad = ~torch.isfinite(vals)   # (n, T+1)
        if not bool(bad.any()):       # the host sync
            return
        i, j = (int(k) for k in bad.nonzero()[0])  # row-major: the first bad step, then its first bad term
        raise Diverged(steps[i], self._pending_keys[j], float(vals[i, j]))

    @property
    def _teacher_reads_student_bn(self) -> bool:
        """Whether the teacher's BN running statistics are the student's (copied), not its own.

        teacher_bn="student" reproduces the authors' Mean Teacher (models/semi_supervised/mean_teacher.py):
        - the EMA covers the trainable variables only: `teacher_ema.apply` over the classifier's
          TRAINABLE_VARIABLES (lines 96-100; ICT and the VD classes alike, e.g. lines 714-735);
        - the teacher is the same template with a custom getter that returns the EMA average for
          those variables and falls through to the ordinary getter, i.e. the STUDENT's own variables,
          for everything else (lines 104-109), so BN's non-trainable moving_mean / moving_variance are
          shared: at test time (is_train=False, train.py feeds it in evaluation) the teacher reads the
          student's moving statistics;
        - the teacher's forward is built with is_train=self.is_train (lines 111-113), fed True in every
          training step (working/semi_supervised/MeanTeacher/train.py line 388), so the consistency
          target uses the teacher's own BATCH statistics, as a PyTorch module in train mode does here;
        - only the student's BN update ops run (get_all_update_ops with update_ops_4_stu_only=True,
          lines 306-314): the teacher's passes never move the moving statistics. (The non-VD
          MeanTeacher also runs the student on the un-augmented batch in the student scope, line 90,
          so its statistics get a second update per step there: TrainConfig.bn_clean_pass, which the
          paper presets set where the authors' class has that pass.)
        Here: the teacher runs in train mode (batch statistics), and its buffers are overwritten with
        the student's after every step (whatever its own passes wrote into them is never read).
        FixMatch's EMA model (evaluation only) always takes the student's statistics. teacher_bn="own":
        the teacher's train-mode passes update its own running statistics, which it uses at test time.
        """
        return self.teacher is not None and (self.cfg.teacher_bn == "student" or not self.cfg.spec.teacher_bn_own)

    @torch.no_grad()
    def _ema_update(self, decay: float):
        """teacher <- decay * teacher + (1 - decay) * student, every parameter (incl. log_sigma2); with
        the student's BN statistics, the teacher's buffers <- the student's (_teacher_reads_student_bn)."""
        # one multi-tensor kernel each on CUDA instead of one launch per tensor (~55 for ConvNet-13);
        # the same lerp per element, bit-for-bit as a loop of lerp_ (tests/test_loss_values.py)
        torch._foreach_lerp_(*self._ema_params, 1.0 - decay)
        if self._teacher_reads_student_bn:
            torch._foreach_copy_(*self._ema_buffers)

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
        val_s = val_t = math.nan
        if len(self.idx_val):  # the held-out validation images: what every choice is selected on
            x_val, y_val = d.x_train[self._idx_val_dev], d.y_train[self._idx_val_dev]  # (V, C, H, W), (V,)
            val_s = error_rate(self.student, x_val, y_val, cfg.eval_batch)
            val_t = error_rate(self.teacher, x_val, y_val, cfg.eval_batch) if self.teacher else math.nan
        val = val_t if self.teacher is not None else val_s
        self.best_test_error = min(self.best_test_error, err)
        if improves_on_val(val, self.best_val_error):  # the first evaluation with the lowest validation error
            self.best_val_error, self.test_error_at_best_val = val, err
        n = max(self._n, 1)
        out = {"step": self.step,
               "epoch_fraction": self.step * (cfg.batch_labeled + cfg.batch_unlabeled) / len(d.y_train),
               "test_error": err, "test_error_student": err_s, "test_error_teacher": err_t,
               "val_error": val, "val_error_student": val_s, "val_error_teacher": val_t,
               "best_val_error": self.best_val_error if len(self.idx_val) else math.nan,
               "test_error_at_best_val": self.test_error_at_best_val,
               "best_test_error": self.best_test_error,
               "lr": schedules.lr_at(max(self.step - 1, 0), cfg),
               "sparsity": sparsity(self.student) if cfg.vd else math.nan,
               "g0_norm": float(self._g0_sum) / n if cfg.mur_kind and cfg.mur_kind.from_g0 else math.nan}
        for k in ("total", *TERMS):
            out[f"loss_{k}"] = float(self._sums[k]) / n if self._n else math.nan
        if cfg.sensitivity_samples > 0:
            s = sensitivity(self.evaluated, d.x_test[: cfg.sensitivity_samples]).float().cpu()
            out["sensitivity_mean"], out["sensitivity_std"] = float(s.mean()), float(s.std())
            out["sensitivity_hist"] = json.dumps(histogram(s, bins=20))
        out.update(diverged=0, diverged_step=-1, diverged_term="", wall_time=self.wall_time,
                   done=self.done, compile_s=self.compile_s, compile_mode=self.compile_mode)
        self._reset_interval()
        return out

    def run_interval(self) -> dict:
        """Train up to the next evaluation point, then evaluate. Raises Diverged."""
        t0 = time.perf_counter()
        target = min(self.cfg.steps, (self.step // self.cfg.eval_every + 1) * self.cfg.eval_every)
        n0 = self.step
        while self.step < target:
            self.train_step()
        self.check_finite()  # every step of the interval, before its evaluation is reported or saved
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        self.wall_time += dt
        out = self.evaluate()
        out["steps_per_s"] = (self.step - n0) / dt if dt > 0 else math.nan
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        self.check_finite()  # never save the weights of steps not checked for NaN (raises Diverged)
        rng = {"torch": torch.get_rng_state(), "gen": self.gen.get_state()}
        if self.cuda:
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {"config": self.cfg.to_dict(), "step": self.step, "best_test_error": self.best_test_error,
                "best_val_error": self.best_val_error, "test_error_at_best_val": self.test_error_at_best_val,
                "wall_time": self.wall_time, "student": self.student.state_dict(),
                "teacher": self.teacher.state_dict() if self.teacher is not None else None,
                "opt": self.opt.state_dict(), "batcher": self.batcher.state_dict(), "rng": rng,
                "interval": {"sums": {k: float(v) for k, v in self._sums.items()},
                             "g0_sum": float(self._g0_sum), "n": self._n}}

    def load_state_dict(self, s: dict):
        check_resumable(s["config"], self.cfg, s["step"])
        self.step, self.best_test_error, self.wall_time = s["step"], s["best_test_error"], s["wall_time"]
        self.best_val_error, self.test_error_at_best_val = s["best_val_error"], s["test_error_at_best_val"]
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
        self._pending = []  # steps queued for the NaN check belong to the replaced history

    def save(self, path: str | os.PathLike):
        """Atomic: write a temporary file in the same folder, then rename over `path`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        def write(tmp):
            with open(tmp, "wb") as f:
                torch.save(self.state_dict(), f)
                f.flush()
                os.fsync(f.fileno())

        atomic_write(path, write)

    def load(self, path: str | os.PathLike):
        """Restore a checkpoint that save() wrote. weights_only: a checkpoint comes from shared storage,
        and unpickling arbitrary objects would run whatever code a file in the bucket names; state_dict()
        holds only tensors, dicts, lists, tuples, numbers, strings and None, which load this way."""
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
        except pickle.UnpicklingError as e:
            named = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
            if named or "weights only" in str(e).lower().replace("_", " "):
                raise CheckpointUnreadable(
                    f"{path} holds objects other than tensors and plain values "
                    f"({named.group(1) if named else type(e).__name__}), which loading could run as code; "
                    f"Trainer.save did not write it: remove it or restore from another checkpoint") from None
            raise CheckpointUnreadable(f"{path} cannot be read ({one_line(e)}): cut short or not a checkpoint") from None
        except (EOFError, OSError, RuntimeError) as e:  # empty, cut short, not a torch file, gone
            raise CheckpointUnreadable(f"{path} cannot be read ({one_line(e)}): cut short or not a checkpoint") from None
        if not isinstance(state, dict) or not STATE_KEYS <= set(state):
            raise CheckpointUnreadable(f"{path} is a torch file but not a Trainer checkpoint (it lacks "
                                       f"{sorted(STATE_KEYS - set(state)) if isinstance(state, dict) else 'a dict'})")
        try:
            self.load_state_dict(state)
        except CheckpointMismatch:
            raise
        except (KeyError, TypeError, ValueError, RuntimeError) as e:  # e.g. weights of another shape
            err = CheckpointUnreadable(f"{path} does not fit this trainer ({one_line(e)})")
            err.partial = True  # some state was loaded before the error: the trainer must be built anew
            raise err from None


def train(cfg: TrainConfig, data: Dataset | None = None, log=print) -> dict:
    """Run a whole training; return the last evaluation (marked diverged=1 if it diverged).

    method="labelspreading" trains nothing: scikit-learn's LabelSpreading on the same labeled subset,
    unlabeled images and validation split (trainables/classical.py), reported once like an evaluation.
    """
    if not cfg.spec.network:
        from trainables.classical import run_label_spreading
        from trainables.config import TRAIN_SIZE, check_size

        check_size(TRAIN_SIZE[cfg.dataset] - cfg.n_val)  # refuse before loading anything
        if data is None:  # scikit-learn runs on the CPU
            data = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, device="cpu", svhn_norm=cfg.svhn_norm,
                                n_val=cfg.n_val, cifar_norm=cfg.cifar_norm)
        idx_l, idx_u, idx_val = splits(cfg, data.y_train)
        return run_label_spreading(cfg, idx_l, idx_u, idx_val, data, log=log)
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
            log(f"[trainer] step {out['step']:>6}  val_error {out['val_error']:6.2f}  test_error {out['test_error']:6.2f}  "
                f"loss {out['loss_total']:.4f}  {out['steps_per_s']:.1f} steps/s")
    return out


def fail(msg: str):
    """One line on stderr and exit status 2 (argparse's convention, without its long usage text)."""
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in TrainConfig.__dataclass_fields__.values():
        t = f.type if isinstance(f.type, str) else f.type.__name__
        if t == "bool":
            p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, action=argparse.BooleanOptionalAction)
        else:
            p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type={"int": int, "float": float}.get(t, str))
    args = {k: v for k, v in vars(p.parse_args(argv)).items() if v is not None}
    try:  # bad values or missing data files: one line naming the fix, exit 2, before any work
        cfg = TrainConfig.from_dict(args)
        check_available(cfg.dataset, cfg.data_dir, cfg.download)
    except (ConfigError, DataError) as e:
        fail(str(e))
    print(json.dumps(train(cfg), indent=1, default=str))


if __name__ == "__main__":
    main()
