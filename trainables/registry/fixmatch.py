"""FixMatch (and FM + VD / MUR, the paper's appendix): pseudo-labels from the weak view, the loss on the
strong one; an EMA model (after the SGD step, with the student's BN statistics) is what it reports."""
from trainables.registry.method import Method

FIXMATCH = Method("fixmatch", label="FM", order=6, paper_name="FM", consistency="pseudo_label", teacher=True,
                  ema_after_step=True, teacher_bn_own=False, views=("strong",), mur_on_x0=False, median_last=True,
                  keys=("cons_coef", "ema_decay", "ema_decay_late", "ema_switch_step",
                        "fm_threshold", "fm_ops", "fm_cutout", "fm_groups", "fm_published"))
