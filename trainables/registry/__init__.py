"""Every SSL method TrainConfig accepts, one `Method` object each (trainables/registry/method.py says what
one declares), from the modules of this package, found by file name as search_spaces/ are. A new method is
a module here (its Method, its loss, its config keys and their check) plus its tests.

    python -c "from trainables.registry import METHODS; print(list(METHODS))"
"""
from __future__ import annotations

import importlib
import pkgutil

from trainables.registry.method import Method

MODULES = tuple(importlib.import_module(f"{__name__}.{m.name}")
                for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name) if m.name != "method")


def _declared() -> dict[str, Method]:
    """{name: Method} over MODULES in the methods' order; ValueError where two files declare one name."""
    found: dict[str, Method] = {}
    for mod in MODULES:
        for m in (v for v in vars(mod).values() if isinstance(v, Method)):
            if m.name in found and found[m.name] is not m:
                raise ValueError(f"method {m.name!r} is declared twice ({mod.__name__}); rename one of them")
            found[m.name] = m
    return dict(sorted(found.items(), key=lambda kv: kv[1].order))


METHODS: dict[str, Method] = _declared()
# the TrainConfig fields methods add, in the methods' order (trainables/config.py appends them)
FIELDS = tuple(f for m in METHODS.values() for f in m.fields)


def get(name: str) -> Method:
    """The Method called `name`; ValueError naming the known ones otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {list(METHODS)}") from None
