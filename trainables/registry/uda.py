"""UDA (Xie et al. 2019, "Unsupervised Data Augmentation for Consistency Training"), its image recipe:
a soft target from the weak view, sharpened at temperature T = uda_temperature (0.4) and kept only where
the weak prediction's top probability reaches uda_threshold (0.8; the paper masks out the examples whose
highest probability is less than the threshold), then KL(target || p(strong view)) averaged over the
unlabeled rows, weighted by cons_coef (the paper's lambda = 1: search_spaces/quick_uda.py sets it). The
strong view is this package's RandAugment + Cutout (fm_ops, fm_cutout, fm_groups), as FixMatch's.

With VD the target comes from the mean network, as FixMatch + VD's pseudo-labels (Step.weak_logits); with
MUR the KL is taken at A*(x_u), the virtual point of the strong view, as FixMatch + MUR (Step.strong_logits):
one term, one lambda, no separate "mur" term.
"""
from trainables.registry.method import Method


def uda_loss(s):
    """mean_u 1[max_k p_k(x_u) >= beta] KL(q || p(A(x_u))), q = softmax(logits(x_u) / T), no gradient through q."""
    weak = s.weak_logits().float()                                       # (U, K) no gradient
    log_q = (weak / s.cfg.uda_temperature).log_softmax(-1)               # (U, K) sharpened target, log
    mask = (weak.softmax(-1).amax(-1) >= s.cfg.uda_threshold).float()    # (U,) on the unsharpened prediction
    log_p = s.strong_logits().float().log_softmax(-1)                    # (U, K) with gradient
    kl = (log_q.exp() * (log_q - log_p)).sum(-1)                         # (U,)
    return (mask * kl).mean()


def _check(cfg) -> str | None:
    if not 0 < cfg.uda_temperature:
        return f"uda_temperature must be > 0 (UDA: 0.4), got {cfg.uda_temperature}"
    if not 0 <= cfg.uda_threshold <= 1:
        return f"uda_threshold must lie in [0, 1] (UDA: 0.8), got {cfg.uda_threshold}"
    if cfg.fm_published:
        return ("fm_published runs FixMatch's code's setup; method 'uda' draws its strong view its own way: "
                "set fm_published=false")
    return None


UDA = Method("uda", label="UDA", order=8, loss=uda_loss, views=("strong",), mur_on_x0=False, check=_check,
             keys=("cons_coef", "uda_temperature", "uda_threshold", "fm_ops", "fm_cutout", "fm_groups"),
             fields=(("uda_temperature", float, 0.4, "UDA: softmax temperature of the weak-view target (sharpening)"),
                     ("uda_threshold", float, 0.8, "UDA: the target's top probability a row needs to count")))
