"""`Method`: one SSL method, declared once, in one file of this package, without importing torch.

A method's file declares its `Method` object: its flags (teacher, EMA order, views), its config keys
and their check, and its behaviour, the consistency term `loss` (and, where the method forwards its
views in one pass, `forward`). Both are functions of one `Step` (trainables/methods.py): the batch's
views, the networks and the shared passes (the mean network, the teacher's prediction, MUR's virtual
point), so a method's file does its arithmetic with tensor methods and needs no torch import: the
driver imports this package to validate and label configs, and never loads torch (tests/test_imports.py).
The config (validation, `applies`), the trainer, the loss terms (trainables/methods.py), the tables'
labels and order, the paper's values and the search spaces read a method from here instead of testing
its name.

    python -c "from trainables.registry import METHODS; print(*METHODS.values(), sep='\n')"
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

VIEWS = ("x0", "strong")  # Views fields beyond x, x2, y_l a method reads: the raw batch, the strong view A(x_u)
TERMS = ("xent", "cons", "kl", "mur", "entmin")  # every loss term a step may report, in loss_terms' order
FIELD_TYPES = (bool, int, float, str)


@dataclass(frozen=True)
class Method:
    name: str                      # TrainConfig.method
    label: str                     # its name in a table's row label ("MT")
    order: int                     # position among a table's rows (lowest first)
    paper_name: str | None = None  # the paper's name for it where the paper reports the authors' runs of it
                                   # ("Pi"); None: no row of the paper (sweeper/analysis/paper_results.py) is its
    loss: Callable[[Any], Any] | None = None  # the cons term, loss(step) -> () tensor (Step: trainables/methods.py);
                                   # None: no cons term, lambda1 unused
    forward: Callable[[Any], Any] | None = None  # the main pass, forward(step) -> (B, K) logits of step.v.x, where
                                   # the method runs more rows with them (FixMatch's one batch); None: student(x)
    teacher: bool = False          # an EMA copy of the student, the network it evaluates and reports
    ema_after_step: bool = False   # the EMA averages the student after the SGD step (FixMatch's code), not
                                   # before it (the authors' Mean Teacher runs it among the update's inputs)
    teacher_bn_own: bool = True    # whether teacher_bn="own" can give the teacher its own BN statistics;
                                   # False: the teacher always reads the student's (FixMatch's EMA model)
    views: tuple[str, ...] = ()    # the VIEWS its loss reads
    keys: tuple[str, ...] = ()     # the TrainConfig fields only it (of the methods) reads (config.applies),
                                   # its own fields among them
    fields: tuple[tuple[str, type, Any, str], ...] = ()  # TrainConfig fields it adds: (name, type, default, what
                                   # it means); trainables/config.py appends them after the shared ones
    mur_target: str = "x0"         # the MUR term's target: x0 = the student's detached prediction on x0 |
                                   # x2 = its prediction on the second view (MUT)
    mur_on_x0: bool = True         # MUR's point is searched around x0 with g0 from the main pass; False: the
                                   # method applies mur to a view of its own (FixMatch's strong view)
    unlabeled: bool = True         # needs unlabeled images (batch_unlabeled >= 1)
    published_unlabels_all: bool = False  # with fm_published: every training image outside validation is
                                   # unlabeled too, labeled ones included (FixMatch's code)
    network: bool = True           # trains a network; False: a classical baseline (scikit-learn)
    authors_bn_clean_pass: bool = False  # the authors' non-VD class of it runs the clean BN pass
                                   # (TrainConfig.bn_clean_pass; search_spaces/common.py)
    median_last: bool = False      # its own tooling reports the median test error of the last evaluations
                                   # (FixMatch's); the tables note it beside the final error
    check: Callable[[object], str | None] | None = None  # its own rule on a TrainConfig: the one-line error
                                   # (naming the fix) or None

    def __post_init__(self):
        unknown = sorted(set(self.views) - set(VIEWS))
        if unknown:
            raise ValueError(f"method {self.name!r}: unknown views {unknown}; choose from {list(VIEWS)}")
        if self.mur_target not in ("x0", "x2"):
            raise ValueError(f"method {self.name!r}: mur_target must be 'x0' or 'x2', got {self.mur_target!r}")
        for f in self.fields:
            if len(f) != 4 or f[1] not in FIELD_TYPES or type(f[2]) is not f[1] or f[0] not in self.keys:
                raise ValueError(f"method {self.name!r}: field {f!r} must be (name, type, default, doc) with type one "
                                 f"of bool, int, float, str, a default of that type, and its name in keys")

    @property
    def terms(self) -> tuple[str, ...]:
        """The loss terms it can report (kl with vd, mur with a MUR point on x0, entmin with entmin_coef)."""
        if not self.network:
            return ()
        return tuple(t for t in TERMS if t != "cons" or self.loss is not None)
