"""The Π-model and MUT (Π + MUR without the Π term): targets from the student itself, no teacher."""
from trainables.registry.method import Method


def pi_loss(s):
    """Π's consistency: the squared error between the student's main pass and its prediction on the
    second view. theta_sg, the mean weight of q(w): under VD the target is the student's deterministic
    mean-weight pass on the second view, as the authors' PiModel_VD with cons_against_mean=True (its
    default; models/semi_supervised/pi.py, `ya_dist_det`), unmasked: its default mask_weights=True zeroes
    the weights with log alpha >= 3, but no script of theirs builds PiModel_VD, and every VD run they made
    sets mask_weights=False (docs/DECISIONS.md). Batch statistics, and the pass updates the BN running
    statistics like every train-mode Pi pass (their update ops are all the model's). Without VD the mean
    weights change nothing: a second pass of the student itself."""
    return s.softmax_mse(s.logits, s.student_mean_probs(s.v.x2))  # (B, K), (B, K) -> ()


PI = Method("pi", label="Π", order=2, paper_name="Pi", loss=pi_loss, keys=("cons_coef",))


def _mut_check(cfg) -> str | None:
    if cfg.mur == "none":
        return "method 'mut' is Pi + MUR without the Pi term: set mur to direct, pga, ga, random or vat"
    return None


# MUT's MUR target is the student's prediction on the second view, the Π target's place
MUT = Method("mut", label="MUT", order=5, paper_name="MUT", mur_target="x2", check=_mut_check)
