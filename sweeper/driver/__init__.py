"""The driver around Ray Tune: the checks before Ray starts, Ray itself, the Tuner, its callbacks and
searchers, and the graceful stop."""
