"""The repository's own docs (`python -m sweeper.docs`): the committed runs, the graded claims,
PERFORMANCE.md and the README's picture. The service never imports it (tests/test_imports.py checks it)."""
