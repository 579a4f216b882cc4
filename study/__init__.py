"""The repository's record of itself, apart from the service: the committed runs (docs/runs/), the claims
graded against them, the generated docs (RESULTS.md, PERFORMANCE.md, the README's blocks and picture) and
the price tables the service reads (sweeper/gpu_prices.json, sweeper/run_prices.json). Not installed by
`pip install`, never imported by sweeper/, trainables/ or search_spaces/ (tests/test_imports.py); run from
the repository root: `python -m study.docs [--check]`."""
