"""The loss terms of M+VBI+MUR, one small function per consistency term, all with one signature.

    loss = xent(labeled) + lambda1(t) cons + lambda2(t) KL + lambda3(t) MUR + lambda_e entmin

`loss_terms(cfg, student, teacher, views, gen)` returns the unweighted terms; the trainer
weights them with the ramped coefficients. Which terms a method has, and which views it reads, its
declaration says (`cfg.spec`, trainables/registry/). Every method shares:
- `views.x`  (B, C, H, W): the student's augmented input, labeled first (L rows), then unlabeled;
- `views.x2` (B, C, H, W): a second augmentation of the same images (teacher / Pi / MUT target);
- `views.y_l` (L,): the labels of the first L rows;
- `views.xs` (U, C, H, W): FixMatch only, the strong view A(x_u) of the unlabeled rows.
Consistency losses are squared errors of probability vectors summed over classes and averaged
over the whole batch, labeled rows included (docs/DECISIONS.md, "Methods"). Two are not:
- fixmatch: FixMatch's pseudo-label cross-entropy on the unlabeled rows (`fixmatch_term`),
  weighted by cons_coef (FixMatch's lambda_u = 1). FM+VD takes its targets from the mean
  network; FM+MUR computes the same loss on A*(x_u), the virtual point of the strong view, in
  place of A(x_u) (the paper's appendix: one term, one lambda), so it has no separate "mur"
  term and mur_coef is unused.
- vat: VAT alone (Miyato et al. 2018), KL(p(x) || p(x*)) at VAT's point (`cons_vat`).
mur="vat" is VAT's point inside the MUR squared-error loss: MUR vs VAT is one config switch.

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
    xs: Tensor | None = None  # (U, C, H, W) FixMatch: strong view A(x_u) of the unlabeled rows
    x0: Tensor | None = None  # (B, C, H, W) the batch before augmentation (bn_clean_pass and ICT)


def softmax_mse(logits: Tensor, target: Tensor) -> Tensor:
    """sum_k (softmax(logits)_k - target_k)^2, averaged over the batch. (B,K),(B,K) -> ()"""
    return (logits.float().softmax(-1) - target).pow(2).sum(-1).mean()


# --- consistency terms: (cfg, student, teacher, views, logits, gen) -> scalar or None -----------

def cons_pi(cfg, student, teacher, v, logits, gen):
    # theta_sg, the mean weight of q(w): under VD the target is the student's deterministic mean-weight
    # pass on the second view, as the authors' PiModel_VD with cons_against_mean=True (its default;
    # models/semi_supervised/pi.py, `ya_dist_det`), unmasked: its default mask_weights=True zeroes the
    # weights with log alpha >= 3, but no script of theirs builds PiModel_VD, and every VD run they made
    # sets mask_weights=False (docs/DECISIONS.md). Batch statistics, and
    # the pass updates the BN running statistics like every train-mode Pi pass (their update ops are
    # all the model's). Without VD mean_weights changes nothing: a second pass of the student itself.
    with torch.no_grad(), mean_weights(student):
        target = student(v.x2).float().softmax(-1)  # (B, K)
    return softmax_mse(logits, target)


def cons_mt(cfg, student, teacher, v, logits, gen):
    with torch.no_grad(), mean_weights(teacher):  # deterministic (mean-weight) teacher under VD
        target = teacher(v.x2).float().softmax(-1)  # (B, K)
    return softmax_mse(logits, target)


def cons_ict(cfg, student, teacher, v, logits, gen):
    """ICT as the authors' graph (models/semi_supervised/ict.py, ICT._consistency_loss): the RAW batch x0
    is mixed with a shuffled copy, x_mix = lam x0 + (1 - lam) x0[perm], and augmented after mixing (their
    graph_replace swaps x_ph under the input perturber); the target mixes the teacher's predictions on
    its own views, lam p_t(x2) + (1 - lam) p_t(A(x0[perm])), A a fresh augmentation (graph_replace of
    y_dist_tea). The student's mixed pass uses the mixed batch's statistics but leaves the BN running
    statistics alone: a graph_replace copy carries no BN update op, so only the student's main pass
    (and the clean pass, bn_clean_pass) update them there."""
    if v.x0 is None:
        raise ValueError("method 'ict' mixes the batch before augmentation: pass Views.x0 (B, C, H, W), "
                         "as Trainer._views does")
    x0 = v.x0  # (B, C, H, W) the batch before augmentation
    B = x0.shape[0]
    lam = torch.distributions.Beta(cfg.ict_alpha, cfg.ict_alpha).sample((B,)).to(x0.device)  # (B,)
    perm = torch.randperm(B, generator=gen, device=gen.device).to(x0.device)               # (B,)
    lam_x = lam.view(B, *([1] * (x0.dim() - 1)))
    x_rand = x0[perm]                                                # (B, C, H, W)
    x_mix = lam_x * x0 + (1 - lam_x) * x_rand                        # (B, C, H, W) mixed, then augmented
    aug = lambda x: augment(x, cfg.translate, cfg.flip, gen, cfg.translate_pad)
    with torch.no_grad(), mean_weights(teacher):
        p_t = teacher(v.x2).float().softmax(-1)                      # (B, K) the teacher's view of x0
        p_t_rand = teacher(aug(x_rand)).float().softmax(-1)          # (B, K) its own view of x0[perm]
    target = lam[:, None] * p_t + (1 - lam[:, None]) * p_t_rand      # (B, K)
    with frozen_bn_stats(student):
        return softmax_mse(student(aug(x_mix)), target)


def cons_vat(cfg, student, teacher, v, logits, gen):
    """VAT's own loss: KL(p(x) || p(x*)) averaged over the batch, p(x) the main pass (detached),
    x* = x + eps d_adv with eps = mur_radius, mur_steps power iterations, xi = vat_xi; the
    coefficient is cons_coef (VAT's alpha = 1). The x* pass leaves BN running statistics alone."""
    x_star = virtual_point(student, v.x.detach(), cfg.mur_radius, method="vat", steps=cfg.mur_steps,
                           generator=gen, xi=cfg.vat_xi)  # (B, C, H, W) detached
    with frozen_bn_stats(student):
        return kl_logits(logits.detach(), student(x_star)).mean()


# Method.consistency -> its term; pseudo_label has its own (fixmatch_term): its loss is not a function
# of (v, logits) alone. A method without one (supervised, MUT) declares None.
CONSISTENCY = {"pi": cons_pi, "mean_teacher": cons_mt, "interpolation": cons_ict, "vat": cons_vat}


# --- FixMatch (paper appendix "Combining VBI and MUR with FixMatch") -----------------------------

def pseudo_labels(logits_weak: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    """FixMatch's targets: y~ = argmax_k p_k and mask 1[max_k p_k >= tau] (their fixmatch.py's
    `pseudo_mask = tf.to_float(tf.reduce_max(pseudo_labels, axis=1) >= confidence)`).
    (U, K) -> (U,) int64, (U,) float."""
    conf, y_hat = logits_weak.detach().float().softmax(-1).max(-1)  # (U,), (U,)
    return y_hat, (conf >= tau).float()


def weak_logits(cfg: TrainConfig, student: nn.Module, v: Views, logits: Tensor) -> Tensor:
    """Logits (U, K) of the weak unlabeled view that y~ and the mask come from; no gradient.

    FM: the student's own main pass (as FixMatch). FM+VD: the mean network f_theta (appendix:
    "in the indicator function, we use the mean network"), an extra pass over the whole weak
    batch (same BN batch statistics as the main pass) that leaves the running statistics alone.
    """
    L = v.y_l.shape[0]
    if not cfg.vd:
        return logits[L:].detach()
    with torch.no_grad(), mean_weights(student), frozen_bn_stats(student):
        return student(v.x.detach())[L:]


def strong_virtual_point(cfg: TrainConfig, student: nn.Module, xs: Tensor, gen) -> tuple[Tensor, Tensor]:
    """FM+MUR: A*(x_u) = argmax_x H(p(y|x)) s.t. ||x - A(x_u)|| <= r (appendix), detached, and ||g0|| (U,).

    The point-finder is cfg.mur (direct | pga | ga | random | vat) around x0 = the strong view;
    g0 needs its own pass here (NaN for random and vat, which do not use it).
    """
    xs = xs.detach()  # (U, C, H, W)
    if cfg.mur in ("direct", "pga", "ga"):
        g0 = entropy_grad(student, xs)             # (U, C, H, W)
        g0_norm = g0.flatten(1).norm(dim=1)        # (U,)
    else:
        g0, g0_norm = None, torch.full((xs.shape[0],), float("nan"), device=xs.device)
    x_star = virtual_point(student, xs, cfg.mur_radius, method=cfg.mur, step_size=cfg.mur_step_size,
                           steps=cfg.mur_steps, g0=g0, generator=gen, xi=cfg.vat_xi)
    return x_star, g0_norm


def fixmatch_forward(cfg: TrainConfig, student: nn.Module, v: Views, gen) -> tuple[Tensor, Tensor, Tensor | None]:
    """fm_published: the labeled, weak and strong rows through the student as ONE batch, as FixMatch's code
    (and USB) do, so BatchNorm normalises them together and its running statistics move once, on all of
    them. FM+MUR puts A*(x_u) (found first, its passes leaving BN alone) in the strong view's place.
    Returns the logits of v.x (B, K), of the strong rows (U, K), and ||g0|| (U,) or None."""
    if v.xs is None:
        raise ValueError("method 'fixmatch' needs the strong view Views.xs (U, C, H, W); "
                         "build the views with Trainer._views or pass xs=strong_augment(...)")
    g0_norm, strong = None, v.xs
    if cfg.mur != "none":
        strong, g0_norm = strong_virtual_point(cfg, student, v.xs, gen)
    out = student(torch.cat([v.x, strong]))                     # (B + U, K)
    B = v.x.shape[0]
    return out[:B], out[B:], g0_norm


def fixmatch_term(cfg: TrainConfig, student: nn.Module, v: Views, logits: Tensor,
                  gen, strong_logits: Tensor | None = None,
                  g0_norm: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """FixMatch's unlabeled loss mean_u 1[max p(x_u) >= tau] CE(p(A(x_u)), y~) and ||g0|| (FM+MUR) or None.

    strong_logits: the strong rows' logits from fixmatch_forward's joint pass (fm_published); without
    them the strong view gets its own pass. FM+MUR evaluates the cross-entropy at A*(x_u) instead of
    A(x_u) (in its own pass that pass leaves the BN running statistics alone, like every x* pass). Only
    the strong (or x*) rows carry gradient.
    """
    if v.xs is None:
        raise ValueError("method 'fixmatch' needs the strong view Views.xs (U, C, H, W); "
                         "build the views with Trainer._views or pass xs=strong_augment(...)")
    y_hat, mask = pseudo_labels(weak_logits(cfg, student, v, logits), cfg.fm_threshold)  # (U,), (U,)
    if strong_logits is not None:
        out = strong_logits                                     # (U, K)
    elif cfg.mur == "none":
        out, g0_norm = student(v.xs), None                      # (U, K)
    else:
        x_star, g0_norm = strong_virtual_point(cfg, student, v.xs, gen)
        with frozen_bn_stats(student):
            out = student(x_star)                               # (U, K)
    ce = F.cross_entropy(out.float(), y_hat, reduction="none")  # (U,)
    return (mask * ce).mean(), g0_norm


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
    return cfg.mur != "none" and cfg.spec.mur_on_x0  # FM+MUR acts on the strong view


def loss_terms(cfg: TrainConfig, student: nn.Module, teacher: nn.Module | None, v: Views,
               gen: torch.Generator) -> tuple[dict[str, Tensor], Tensor | None]:
    """Unweighted loss terms {xent, cons?, kl?, mur?, entmin?} and ||g0|| per sample (or None)."""
    L = v.y_l.shape[0]
    mur_on_x0 = needs_input_grad(cfg)
    if mur_on_x0 and not v.x.requires_grad:  # g0 = dH/dx0 from this very pass (a compiled step sets it
        v.x.requires_grad_(True)             # before its graph: dynamo breaks the graph at requires_grad_)
    strong_logits = g0_norm = None
    if cfg.spec.consistency == "pseudo_label" and cfg.fm_published:
        logits, strong_logits, g0_norm = fixmatch_forward(cfg, student, v, gen)  # (B, K), (U, K)
    else:
        logits = student(v.x)  # (B, K)
    terms = {"xent": F.cross_entropy(logits[:L].float(), v.y_l)}
    kind = cfg.spec.consistency
    if kind == "pseudo_label":
        terms["cons"], g0_norm = fixmatch_term(cfg, student, v, logits, gen, strong_logits, g0_norm)
    elif kind is not None:
        terms["cons"] = CONSISTENCY[kind](cfg, student, teacher, v, logits, gen)
    if cfg.vd:
        terms["kl"] = kl_divergence(student)
    if cfg.entmin_coef > 0 and logits.shape[0] > L:
        terms["entmin"] = entropy(logits[L:].float()).mean()
    if mur_on_x0:
        terms["mur"], g0_norm = mur_term(cfg, student, v, logits, gen)
    return terms, g0_norm
