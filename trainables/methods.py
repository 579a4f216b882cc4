"""The loss terms of M+VBI+MUR, and the `Step` a method's own term is a function of.

    loss = xent(labeled) + lambda1(t) cons + lambda2(t) KL + lambda3(t) MUR + lambda_e entmin

`loss_terms(cfg, student, teacher, views, gen)` returns the unweighted terms; the trainer
weights them with the ramped coefficients. The cons term is the method's own (`cfg.spec.loss`,
in its file in trainables/registry/), computed from a `Step`: the batch's views, the networks and
the passes several methods share (the mean network's prediction, the teacher's, the strong view's
logits at MUR's point). Every method shares:
- `views.x`  (B, C, H, W): the student's augmented input, labeled first (L rows), then unlabeled;
- `views.x2` (B, C, H, W): a second augmentation of the same images (teacher / Pi / MUT target);
- `views.y_l` (L,): the labels of the first L rows;
- `views.xs` (U, C, H, W): methods with the "strong" view, the strong view A(x_u) of the unlabeled rows;
- `views.x0` (B, C, H, W): the batch before augmentation (bn_clean_pass, ICT).
The KL of VD, MUR's term on x0 and entropy minimisation are the same for every method: here.
mur="vat" is VAT's point inside the MUR squared-error loss: MUR vs VAT is one config switch.
A method whose MUR acts on its strong view (FixMatch, UDA: mur_on_x0=False) has no separate "mur"
term: its own loss reads the strong view at A*(x_u) (`Step.strong_logits`).

    pytest tests/test_methods.py -q
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainables.config import TrainConfig
from trainables.data import augment
from trainables.mur import entropy, entropy_grad, frozen_bn_stats, kl_logits, virtual_point
from trainables.variational import kl_divergence, mean_weights


@dataclass
class Views:
    x: Tensor    # (B, C, H, W) student view; rows [:L] labeled, [L:] unlabeled
    x2: Tensor   # (B, C, H, W) second view of the same images
    y_l: Tensor  # (L,) int64 labels
    xs: Tensor | None = None  # (U, C, H, W) the strong view A(x_u) of the unlabeled rows ("strong" methods)
    x0: Tensor | None = None  # (B, C, H, W) the batch before augmentation (bn_clean_pass and ICT)


def softmax_mse(logits: Tensor, target: Tensor) -> Tensor:
    """sum_k (softmax(logits)_k - target_k)^2, averaged over the batch. (B,K),(B,K) -> ()"""
    return (logits.float().softmax(-1) - target).pow(2).sum(-1).mean()


class Step:
    """One training step as a method's loss (Method.loss, Method.forward) reads it.

    cfg, student, teacher, v (Views), gen: as loss_terms got them; logits (B, K): the student's main
    pass on v.x (set before Method.loss runs). The methods below are the passes several methods share;
    each leaves the BN running statistics as its docstring says.
    """

    def __init__(self, cfg: TrainConfig, student: nn.Module, teacher: nn.Module | None, v: Views,
                 gen: torch.Generator):
        self.cfg, self.student, self.teacher, self.v, self.gen = cfg, student, teacher, v, gen
        self.L = v.y_l.shape[0]                       # labeled rows of v.x
        self.logits: Tensor | None = None             # (B, K) the main pass
        self.g0_norm: Tensor | None = None            # (U,) ||g0|| of a strong-view MUR point, once found
        self._strong_input: Tensor | None = None      # (U, C, H, W) A(x_u) or A*(x_u), once built
        self._strong_logits: Tensor | None = None     # (U, K) from a joint pass (Step.forward_with_strong)

    softmax_mse = staticmethod(softmax_mse)

    @staticmethod
    def cross_entropy(logits: Tensor, y: Tensor) -> Tensor:
        """Per-row cross-entropy, float32: (N, K), (N,) int64 -> (N,)."""
        return F.cross_entropy(logits.float(), y, reduction="none")

    def frozen_bn(self):
        """Context: the student's passes inside it leave the BN running statistics alone."""
        return frozen_bn_stats(self.student)

    def augment(self, x: Tensor) -> Tensor:
        """A fresh weak augmentation (translate, flip) of x (N, C, H, W), from the run's generator."""
        return augment(x, self.cfg.translate, self.cfg.flip, self.gen, self.cfg.translate_pad)

    def randperm(self, n: int) -> Tensor:
        """A permutation of range(n) from the run's generator, on the batch's device: (n,) int64."""
        return torch.randperm(n, generator=self.gen, device=self.gen.device).to(self.v.x.device)

    def beta(self, alpha: float, n: int) -> Tensor:
        """n draws of Beta(alpha, alpha) from torch's global generator, on the batch's device: (n,)."""
        return torch.distributions.Beta(alpha, alpha).sample((n,)).to(self.v.x.device)

    def student_mean_probs(self, x: Tensor) -> Tensor:
        """softmax of the student's mean-weight pass on x (the student itself without VD), no gradient,
        batch statistics; the pass updates the BN running statistics like any train-mode pass. (N, K)"""
        with torch.no_grad(), mean_weights(self.student):
            return self.student(x).float().softmax(-1)

    def teacher_probs(self, x: Tensor) -> Tensor:
        """softmax of the teacher's (mean-weight under VD) pass on x, no gradient. (N, K)"""
        with torch.no_grad(), mean_weights(self.teacher):
            return self.teacher(x).float().softmax(-1)

    def virtual_point(self, x: Tensor, kind: str) -> Tensor:
        """x* of MUR kind `kind` (trainables/mur.py) around x (N, C, H, W) with the config's radius, steps
        and xi, g0 computed here where the kind starts from it; detached. (N, C, H, W)"""
        return virtual_point(self.student, x.detach(), self.cfg.mur_radius, method=kind, step_size=self.cfg.mur_step_size,
                             steps=self.cfg.mur_steps, generator=self.gen, xi=self.cfg.vat_xi)

    @staticmethod
    def kl(p_logits: Tensor, q_logits: Tensor) -> Tensor:
        """KL(softmax(p) || softmax(q)) per row: (N, K), (N, K) -> (N,)."""
        return kl_logits(p_logits, q_logits)

    def weak_logits(self) -> Tensor:
        """Logits (U, K) of the weak unlabeled view that a pseudo-label or a sharpened target comes from; no gradient.

        Without VD: the student's own main pass. With VD: the mean network f_theta (the paper's appendix: "in
        the indicator function, we use the mean network"), an extra pass over the whole weak batch (same BN
        batch statistics as the main pass) that leaves the running statistics alone.
        """
        if not self.cfg.vd:
            return self.logits[self.L:].detach()
        with torch.no_grad(), mean_weights(self.student), frozen_bn_stats(self.student):
            return self.student(self.v.x.detach())[self.L:]

    def strong_input(self) -> Tensor:
        """The strong rows' input: A(x_u), or with a MUR point A*(x_u) = argmax_x H(p(y|x)) s.t.
        ||x - A(x_u)|| <= r (the paper's appendix), detached; its ||g0|| (U,) goes to self.g0_norm
        (NaN for kinds that do not start from g0, which then needs its own pass here). (U, C, H, W)"""
        if self._strong_input is not None:
            return self._strong_input
        if self.v.xs is None:
            raise ValueError(f"method {self.cfg.method!r} needs the strong view Views.xs (U, C, H, W); "
                             f"build the views with Trainer._views or pass xs=strong_augment(...)")
        xs, kind = self.v.xs, self.cfg.mur_kind
        if kind is not None:
            xs = xs.detach()  # (U, C, H, W)
            if kind.from_g0:
                g0 = entropy_grad(self.student, xs)            # (U, C, H, W)
                self.g0_norm = g0.flatten(1).norm(dim=1)       # (U,)
            else:
                g0, self.g0_norm = None, torch.full((xs.shape[0],), float("nan"), device=xs.device)
            xs = virtual_point(self.student, xs, self.cfg.mur_radius, method=self.cfg.mur,
                               step_size=self.cfg.mur_step_size, steps=self.cfg.mur_steps, g0=g0, generator=self.gen,
                               xi=self.cfg.vat_xi)
        self._strong_input = xs
        return xs

    def forward_with_strong(self) -> Tensor:
        """The labeled, weak and strong rows through the student as ONE batch, as FixMatch's code (and USB)
        do, so BatchNorm normalises them together and its running statistics move once, on all of them; the
        strong rows' logits are kept for strong_logits. Returns the logits of v.x (B, K)."""
        strong = self.strong_input()                                 # (U, C, H, W), found first
        out = self.student(torch.cat([self.v.x, strong]))            # (B + U, K)
        B = self.v.x.shape[0]
        self._strong_logits = out[B:]
        return out[:B]

    def strong_logits(self) -> Tensor:
        """The student's logits (U, K) on the strong view, with gradient: from the joint pass where
        forward_with_strong ran; else A(x_u)'s own pass (moving the BN running statistics), or with a MUR
        point A*(x_u)'s (leaving them alone, like every x* pass)."""
        if self._strong_logits is not None:
            return self._strong_logits
        if self.cfg.mur_kind is None:
            return self.student(self.strong_input())
        x_star = self.strong_input()
        with frozen_bn_stats(self.student):
            return self.student(x_star)


# --- MUR / RR ------------------------------------------------------------------------------------

def mur_term(cfg: TrainConfig, student: nn.Module, v: Views, logits: Tensor, gen) -> tuple[Tensor, Tensor]:
    """MUR loss on the virtual point x* near x0 = v.x, and the per-sample ||g0|| (B,) (NaN for RR).

    g0 comes from the student's main pass on x0 (v.x must require grad), so MUR costs one extra
    backward to the input plus one forward/backward on x*. The target is the student's own
    detached prediction on x0 (MUT: on the second view). BN running statistics are not updated
    by the x* passes (mur.frozen_bn_stats), as in VAT's official code.
    """
    B = v.x.shape[0]
    x0 = v.x
    if cfg.mur_kind.from_g0:
        g0 = torch.autograd.grad(entropy(logits).sum(), x0, retain_graph=True)[0]  # (B, C, H, W)
        g0_norm = g0.flatten(1).norm(dim=1)                                        # (B,)
    else:
        g0, g0_norm = None, torch.full((B,), float("nan"), device=x0.device)
    x_star = virtual_point(student, x0.detach(), cfg.mur_radius, method=cfg.mur,
                           step_size=cfg.mur_step_size, steps=cfg.mur_steps, g0=g0, generator=gen,
                           xi=cfg.vat_xi)
    if cfg.spec.mur_target == "x2":  # MUT
        with torch.no_grad():
            target = student(v.x2).float().softmax(-1)  # (B, K) second augmented view
    else:
        target = logits.detach().float().softmax(-1)    # (B, K) stop-gradient on x0
    with frozen_bn_stats(student):
        loss = softmax_mse(student(x_star), target)
    return loss, g0_norm.detach()


# --- all terms -----------------------------------------------------------------------------------

def needs_input_grad(cfg: TrainConfig) -> bool:
    """MUR on x0 takes g0 = dH/dx0 from the student's main pass, so v.x must require grad."""
    return cfg.mur_kind is not None and cfg.spec.mur_on_x0  # FM+MUR acts on the strong view


def loss_terms(cfg: TrainConfig, student: nn.Module, teacher: nn.Module | None, v: Views,
               gen: torch.Generator) -> tuple[dict[str, Tensor], Tensor | None]:
    """Unweighted loss terms {xent, cons?, kl?, mur?, entmin?} and ||g0|| per sample (or None)."""
    L = v.y_l.shape[0]
    mur_on_x0 = needs_input_grad(cfg)
    if mur_on_x0 and not v.x.requires_grad:  # g0 = dH/dx0 from this very pass (a compiled step sets it
        v.x.requires_grad_(True)             # before its graph: dynamo breaks the graph at requires_grad_)
    spec, step = cfg.spec, Step(cfg, student, teacher, v, gen)
    logits = step.logits = spec.forward(step) if spec.forward is not None else student(v.x)  # (B, K)
    terms = {"xent": F.cross_entropy(logits[:L].float(), v.y_l)}
    if spec.loss is not None:
        terms["cons"] = spec.loss(step)
    g0_norm = step.g0_norm  # a strong-view MUR point's, where the method's loss found one
    if cfg.vd:
        terms["kl"] = kl_divergence(student)
    if cfg.entmin_coef > 0 and logits.shape[0] > L:
        terms["entmin"] = entropy(logits[L:].float()).mean()
    if mur_on_x0:
        terms["mur"], g0_norm = mur_term(cfg, student, v, logits, gen)
    return terms, g0_norm
