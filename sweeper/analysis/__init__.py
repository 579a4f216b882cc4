"""A results folder's trials into tables, plots and report.html: pandas only, no Ray import
(tests/test_imports.py checks it)."""
