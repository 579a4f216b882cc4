"""The Π-model and MUT (Π + MUR without the Π term): targets from the student itself, no teacher."""
from trainables.registry.method import Method

PI = Method("pi", label="Π", order=2, paper_name="Pi", consistency="pi", keys=("cons_coef",))


def _mut_check(cfg) -> str | None:
    if cfg.mur == "none":
        return "method 'mut' is Pi + MUR without the Pi term: set mur to direct, pga, ga, random or vat"
    return None


# MUT's MUR target is the student's prediction on the second view, the Π target's place
MUT = Method("mut", label="MUT", order=5, paper_name="MUT", mur_target="x2", check=_mut_check)
