"""VAT alone (Miyato et al. 2018): KL(p(x) || p(x*)) at VAT's point, epsilon = mur_radius."""
from trainables.registry.method import Method

VAT = Method("vat", label="VAT", order=7, consistency="vat",
             keys=("cons_coef", "mur_radius", "mur_steps", "vat_xi"))
