"""FixMatch (and FM + VD / MUR, the paper's appendix): pseudo-labels from the weak view, the loss on the
strong one; an EMA model (after the SGD step, with the student's BN statistics) is what it reports.

FixMatch's unlabeled loss is a cross-entropy on the unlabeled rows, weighted by cons_coef (FixMatch's
lambda_u = 1). FM+VD takes its targets from the mean network; FM+MUR computes the same loss on A*(x_u),
the virtual point of the strong view, in place of A(x_u) (the paper's appendix: one term, one lambda),
so it has no separate "mur" term and mur_coef is unused.
"""
from trainables.registry.method import Method


def pseudo_labels(logits_weak, tau: float):
    """FixMatch's targets: y~ = argmax_k p_k and mask 1[max_k p_k >= tau] (their fixmatch.py's
    `pseudo_mask = tf.to_float(tf.reduce_max(pseudo_labels, axis=1) >= confidence)`).
    (U, K) -> (U,) int64, (U,) float."""
    conf, y_hat = logits_weak.detach().float().softmax(-1).max(-1)  # (U,), (U,)
    return y_hat, (conf >= tau).float()


def fixmatch_forward(s):
    """fm_published: the labeled, weak and strong rows through the student as ONE batch, as FixMatch's
    code (and USB) do (Step.forward_with_strong); FM+MUR puts A*(x_u), found first with its passes leaving
    BN alone, in the strong view's place. Off: the main pass alone, the strong view its own."""
    return s.forward_with_strong() if s.cfg.fm_published else s.student(s.v.x)  # (B, K)


def fixmatch_loss(s):
    """FixMatch's unlabeled loss mean_u 1[max p(x_u) >= tau] CE(p(A(x_u)), y~) (A*(x_u) with MUR).
    Only the strong (or x*) rows carry gradient."""
    y_hat, mask = pseudo_labels(s.weak_logits(), s.cfg.fm_threshold)  # (U,), (U,)
    return (mask * s.cross_entropy(s.strong_logits(), y_hat)).mean()   # (U,) -> ()


STRONG_KEYS = ("fm_ops", "fm_cutout", "fm_groups")  # the strong view's RandAugment (trainables/augment_strong.py)

FIXMATCH = Method("fixmatch", label="FM", order=6, paper_name="FM", loss=fixmatch_loss, forward=fixmatch_forward,
                  teacher=True, ema_after_step=True, teacher_bn_own=False, views=("strong",), mur_on_x0=False,
                  median_last=True, published_unlabels_all=True,
                  keys=("cons_coef", "ema_decay", "ema_decay_late", "ema_switch_step",
                        "fm_threshold", *STRONG_KEYS, "fm_published"))
