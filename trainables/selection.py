"""Selection on the validation split: which evaluation of a run is the one chosen on validation (the best_val
statistic), in one place for the trainer's running record (Trainer.best_val_error and test_error_at_best_val,
in every report) and the aggregator's bestval_* columns (sweeper/analysis/aggregate.py). No torch import: the
driver's side reads it too.

    python -c "from trainables.selection import chosen_on_val; print(chosen_on_val([3.0, 2.0, 2.0, float('nan')]))"
"""
from __future__ import annotations

import math
from typing import Iterable


def improves_on_val(val: float, best: float) -> bool:
    """Whether an evaluation of validation error `val` replaces the one chosen so far (of validation error
    `best`; inf before any): a finite, strictly lower one only, so the first evaluation with the lowest
    finite validation error is chosen."""
    return math.isfinite(val) and val < best


def chosen_on_val(vals: Iterable[float]) -> int | None:
    """The index of the evaluation chosen on validation among `vals` (validation errors, in order); None
    where none is finite (a run without a validation split)."""
    best, chosen = math.inf, None
    for i, v in enumerate(vals):
        if improves_on_val(v, best):
            best, chosen = v, i
    return chosen
