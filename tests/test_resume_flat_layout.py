"""`--resume` of an experiment stored while sweeper/ was one flat folder: Tune's tuner.pkl names
sweeper.tuner.trial_dirname, sweeper.stopping.StopAfterSaves and the live report's functions of
sweeper.live, which now live in sweeper/driver/; sweeper.driver.old_names lets those names load.

The fixture is a finished two-trial quick_settings run (20 steps, seed 1) made by the flat layout,
without its checkpoints and report (a finished trial needs neither to be resumed).

    pytest tests/test_resume_flat_layout.py -q                # the stored state unpickles (~5 s)
    pytest tests/test_resume_flat_layout.py -q -m slow        # the real --resume (~40 s, starts Ray)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/fixtures/flat_layout_experiment/quick_settings-20261127-193748-f9ae8e"

UNPICKLE = f"""
from ray import cloudpickle
from sweeper.analysis import html
from sweeper.driver import live, old_names, stopping, tuner

old_names.install()
with open({str(FIXTURE / "tuner.pkl")!r}, "rb") as f:
    state = cloudpickle.load(f)
callbacks = state["_run_config"].callbacks
report = next(c for c in callbacks if type(c).__name__ == "LiveReport")
print(sum(type(c) is stopping.StopAfterSaves for c in callbacks),
      state["_tune_config"].trial_dirname_creator is tuner.trial_dirname,
      report.setup.__globals__["stored_loads"] is html.stored_loads,
      report.on_experiment_end.__globals__["end_rebuild"] is live.end_rebuild)
"""


def test_the_fixture_is_stored_under_the_flat_module_names():
    raw = (FIXTURE / "tuner.pkl").read_bytes()
    assert b"sweeper.stopping" in raw and b"sweeper.tuner" in raw and b"sweeper.live" in raw
    assert b"sweeper.driver" not in raw


def test_its_tune_state_loads_as_todays_modules():
    """With the old names installed, each name tuner.pkl holds is today's object: StopAfterSaves of
    sweeper.driver.stopping, tuner.trial_dirname, and the live report's functions, including the one that
    moved to sweeper.analysis.html (live.json's reader)."""
    out = subprocess.run([sys.executable, "-c", UNPICKLE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1", "True", "True", "True"], out.stdout


@pytest.mark.slow
def test_resume_of_a_flat_layout_experiment_ends_with_its_report(tmp_path):
    """`python -m sweeper.run quick_settings --resume COPY` restores the stored Tuner, finds both trials
    finished, runs nothing again and writes the report of both (exit status 0)."""
    exp = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, exp)
    temp = Path(tempfile.mkdtemp(prefix="rflat", dir="/tmp"))  # Ray's socket paths are limited to 107 bytes
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_TMPDIR": str(temp),
           "PYTHONPATH": str(ROOT)}
    try:
        out = subprocess.run([sys.executable, "-m", "sweeper.run", "quick_settings", "--resume", str(exp),
                              "--live-every", "0"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert f"resuming {exp}" in log
    rows = (exp / "summary.csv").read_text().splitlines()
    assert len(rows) == 3 and (exp / "report.html").is_file()  # a header and the two configs
    for trial in FIXTURE.glob("trial_*"):  # not run again: the same reports, the last one done
        assert (exp / trial.name / "result.json").read_text() == (trial / "result.json").read_text()
        assert json.loads((trial / "result.json").read_text().splitlines()[-1])["done"]
