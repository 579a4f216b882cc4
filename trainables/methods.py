"""The loss terms of M+VBI+MUR, one small function per method, all with one signature.

    loss = xent(labeled) + lambda1(t) cons + lambda2(t) KL + lambda3(t) MUR + lambda_e entmin

`loss_terms(cfg, student, teacher, views, gen)` returns the unweighted terms; the trainer
weights them with the ramped coefficients. Every method shares:
- `views.x`  (B, C, H, W): the student's augmented input, labeled first (L rows), then unlabeled;
- `views.x2` (B, C, H, W): a second augmentation of the same images (teacher / Pi / MUT target);
- `views.y_l` (L,): the labels of the first L rows.
Consistency losses are squared errors of probability vectors summed over classes and averaged
over the whole batch, labeled rows included (IMPLEMENTATION_NOTES.md, "Methods").

    pytest tests/test_methods.py -q
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainables.config import TrainConfig
from trainables.mur import entropy, frozen_bn_stats, virtual_point
from trainables.variational import kl_divergence, mean_weights


@dataclass
class Views:
    x: Tensor    # (B, C, H, W) student view; rows [:L] labeled, [L:] unlabeled
    x2: Tensor   # (B, C, H, W) second view of the same images
    y_l: Tensor  # (L,) int64 labels


def softmax_mse(logits: Tensor, target: Tensor) -> Tensor:
    """sum_k (softmax(logits)_k - target_k)^2, averaged over the batch. (B,K),(B,K) -> ()"""
    return (logits.float().softmax(-1) - target).pow(2).sum(-1).mean()


# --- consistency terms: (cfg, student, teacher, views, logits, gen) -> scalar or None -----------

def cons_none(cfg, student, teacher, v, logits, gen):
    return None  # supervised and MUT (MUT = Pi + MUR with the Pi term off)


def cons_pi(cfg, student, teacher, v, logits, gen):
    with torch.no_grad():  # theta_sg: a second stochastic pass of the student itself
        target = student(v.x2).float().softmax(-1)  # (B, K)
    return softmax_mse(logits, target)


def cons_mt(cfg, student, teacher, v, logits, gen):
    with torch.no_grad(), mean_weights(teacher):  # deterministic (mean-weight) teacher under VD
        target = teacher(v.x2).float().softmax(-1)  # (B, K)
    return softmax_mse(logits, target)


def cons_ict(cfg, student, teacher, v, logits, gen):
    B = v.x.shape[0]
    lam = torch.distributions.Beta(cfg.ict_alpha, cfg.ict_alpha).sample((B,)).to(v.x.device)  # (B,)
    perm = torch.randperm(B, generator=gen, device=gen.device).to(v.x.device)               # (B,)
    x = v.x  # (B, C, H, W); gradients may flow to the input leaf, never to the teacher
    lam_x = lam.view(B, *([1] * (x.dim() - 1)))
    x_mix = lam_x * x + (1 - lam_x) * x[perm]                       # (B, C, H, W)
    with torch.no_grad(), mean_weights(teacher):
        p_t = teacher(x.detach()).float().softmax(-1)                        # (B, K)
    target = lam[:, None] * p_t + (1 - lam[:, None]) * p_t[perm]    # (B, K) the same mix
    return softmax_mse(student(x_mix), target)


CONSISTENCY = {"supervised": cons_none, "pi": cons_pi, "mt": cons_mt, "ict": cons_ict, "mut": cons_none}


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
    if cfg.mur in ("direct", "pga", "ga"):
        g0 = torch.autograd.grad(entropy(logits).sum(), x0, retain_graph=True)[0]  # (B, C, H, W)
        g0_norm = g0.flatten(1).norm(dim=1)                                        # (B,)
    else:
        g0, g0_norm = None, torch.full((B,), float("nan"), device=x0.device)
    x_star = virtual_point(student, x0.detach(), cfg.mur_radius, method=cfg.mur,
                           step_size=cfg.mur_step_size, steps=cfg.mur_steps, g0=g0, generator=gen)
    if cfg.method == "mut":
        with torch.no_grad():
            target = student(v.x2).float().softmax(-1)  # (B, K) second augmented view
    else:
        target = logits.detach().float().softmax(-1)    # (B, K) stop-gradient on x0
    with frozen_bn_stats(student):
        loss = softmax_mse(student(x_star), target)
    return loss, g0_norm.detach()


# --- all terms -----------------------------------------------------------------------------------

def loss_terms(cfg: TrainConfig, student: nn.Module, teacher: nn.Module | None, v: Views,
               gen: torch.Generator) -> tuple[dict[str, Tensor], Tensor | None]:
    """Unweighted loss terms {xent, cons?, kl?, mur?, entmin?} and ||g0|| per sample (or None)."""
    L = v.y_l.shape[0]
    if cfg.mur != "none":
        v.x.requires_grad_(True)  # g0 = dH/dx0 from this very pass
    logits = student(v.x)  # (B, K)
    terms = {"xent": F.cross_entropy(logits[:L].float(), v.y_l)}
    cons = CONSISTENCY[cfg.method](cfg, student, teacher, v, logits, gen)
    if cons is not None:
        terms["cons"] = cons
    if cfg.vd:
        terms["kl"] = kl_divergence(student)
    if cfg.entmin_coef > 0 and logits.shape[0] > L:
        terms["entmin"] = entropy(logits[L:].float()).mean()
    g0_norm = None
    if cfg.mur != "none":
        terms["mur"], g0_norm = mur_term(cfg, student, v, logits, gen)
    return terms, g0_norm
