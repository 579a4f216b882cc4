"""Every SSL method TrainConfig accepts, one `Method` object each (trainables/registry/method.py says what
one declares), from one small module per family. A new method is a module here (its Method, and its
loss in trainables/methods.py where no CONSISTENCY_KINDS entry fits) added to FAMILIES, plus its tests.

    python -c "from trainables.registry import METHODS; print(list(METHODS))"
"""
from __future__ import annotations

from trainables.registry import classical, fixmatch, pi, supervised, teacher, vat
from trainables.registry.method import Method

FAMILIES = (supervised, classical, pi, teacher, fixmatch, vat)

METHODS: dict[str, Method] = {m.name: m for m in sorted(
    (v for fam in FAMILIES for v in vars(fam).values() if isinstance(v, Method)), key=lambda m: m.order)}


def get(name: str) -> Method:
    """The Method called `name`; ValueError naming the known ones otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {list(METHODS)}") from None
