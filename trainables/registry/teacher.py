"""Mean Teacher and ICT: an EMA teacher gives the consistency target; the EMA runs before the SGD step."""
from trainables.registry.method import Method

TEACHER_KEYS = ("ema_decay", "teacher_bn", "ema_decay_late", "ema_switch_step")


def mt_loss(s):
    """Mean Teacher's consistency: the squared error to the teacher's prediction on the second view
    (its deterministic mean-weight pass under VD)."""
    return s.softmax_mse(s.logits, s.teacher_probs(s.v.x2))  # (B, K), (B, K) -> ()


def ict_loss(s):
    """ICT as the authors' graph (models/semi_supervised/ict.py, ICT._consistency_loss): the RAW batch x0
    is mixed with a shuffled copy, x_mix = lam x0 + (1 - lam) x0[perm], and augmented after mixing (their
    graph_replace swaps x_ph under the input perturber); the target mixes the teacher's predictions on
    its own views, lam p_t(x2) + (1 - lam) p_t(A(x0[perm])), A a fresh augmentation (graph_replace of
    y_dist_tea). The student's mixed pass uses the mixed batch's statistics but leaves the BN running
    statistics alone: a graph_replace copy carries no BN update op, so only the student's main pass
    (and the clean pass, bn_clean_pass) update them there."""
    x0 = s.v.x0  # (B, C, H, W) the batch before augmentation
    if x0 is None:
        raise ValueError("method 'ict' mixes the batch before augmentation: pass Views.x0 (B, C, H, W), "
                         "as Trainer._views does")
    B = x0.shape[0]
    lam = s.beta(s.cfg.ict_alpha, B)                                 # (B,)
    perm = s.randperm(B)                                             # (B,)
    lam_x = lam.view(B, *([1] * (x0.dim() - 1)))
    x_rand = x0[perm]                                                # (B, C, H, W)
    x_mix = lam_x * x0 + (1 - lam_x) * x_rand                        # (B, C, H, W) mixed, then augmented
    p_t = s.teacher_probs(s.v.x2)                                    # (B, K) the teacher's view of x0
    p_t_rand = s.teacher_probs(s.augment(x_rand))                    # (B, K) its own view of x0[perm]
    target = lam[:, None] * p_t + (1 - lam[:, None]) * p_t_rand      # (B, K)
    with s.frozen_bn():
        return s.softmax_mse(s.student(s.augment(x_mix)), target)


MT = Method("mt", label="MT", order=3, paper_name="MT", loss=mt_loss, teacher=True,
            keys=("cons_coef", *TEACHER_KEYS), authors_bn_clean_pass=True)
# ICT mixes the raw batch x0 before augmenting it (ict_loss)
ICT = Method("ict", label="ICT", order=4, paper_name="ICT", loss=ict_loss, teacher=True,
             views=("x0",), keys=("cons_coef", "ict_alpha", *TEACHER_KEYS), authors_bn_clean_pass=True)
