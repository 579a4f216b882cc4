"""The supervised baseline: cross-entropy on the labeled images only (plus VD / MUR where asked)."""
from trainables.registry.method import Method

SUPERVISED = Method("supervised", label="Supervised", order=0, unlabeled=False)
