"""Mean Teacher and ICT: an EMA teacher gives the consistency target; the EMA runs before the SGD step."""
from trainables.registry.method import Method

TEACHER_KEYS = ("ema_decay", "teacher_bn", "ema_decay_late", "ema_switch_step")

MT = Method("mt", label="MT", order=3, paper_name="MT", consistency="mean_teacher", teacher=True,
            keys=("cons_coef", *TEACHER_KEYS), authors_bn_clean_pass=True)
# ICT mixes the raw batch x0 before augmenting it (methods.cons_ict)
ICT = Method("ict", label="ICT", order=4, paper_name="ICT", consistency="interpolation", teacher=True,
             views=("x0",), keys=("cons_coef", "ict_alpha", *TEACHER_KEYS), authors_bn_clean_pass=True)
