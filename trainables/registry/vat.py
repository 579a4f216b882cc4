"""VAT alone (Miyato et al. 2018): KL(p(x) || p(x*)) at VAT's point, epsilon = mur_radius."""
from trainables.registry.method import Method


def vat_loss(s):
    """VAT's own loss: KL(p(x) || p(x*)) averaged over the batch, p(x) the main pass (detached),
    x* = x + eps d_adv with eps = mur_radius, mur_steps power iterations, xi = vat_xi; the
    coefficient is cons_coef (VAT's alpha = 1). The x* pass leaves BN running statistics alone."""
    x_star = s.virtual_point(s.v.x, "vat")  # (B, C, H, W) detached
    with s.frozen_bn():
        return s.kl(s.logits.detach(), s.student(x_star)).mean()


VAT = Method("vat", label="VAT", order=7, loss=vat_loss, keys=("cons_coef", "mur_radius", "mur_steps", "vat_xi"))
