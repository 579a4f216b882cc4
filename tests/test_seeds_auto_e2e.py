"""`--seeds auto` end to end through a real local Ray: a sweep stopped in the middle of its second look's round
(SIGTERM, exit 3) and resumed ends with the same trials and verdicts as the same sweep run without a stop.

    pytest tests/test_seeds_auto_e2e.py -q -m slow
"""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
# 2 configs (MT + MUR at r = 0.25, with MT, the cell it is compared with), looks at 3 and 5 seeds: 6 trials, then
# 4 more where the cell is still open after its first look, as it is at 20 steps (the test asserts that the second
# look ran); one trial at a time, so each driver starts one trial process (Tune reuses it for the next trial)
CELLS = ["--cells", "mur=direct,mur_radius=0.25"]
FIRST_LOOK = 2 * 3
AUTO = ["ablation_radius", "--preset", "quick", "--seeds", "auto", "--max-seeds", "5", *CELLS, "--set", "steps=20",
        "--set", "eval_every=10", "--set", "lr_rampup=5", "--set", "lr_rampdown=5", "--set", "rampup=5",
        "--max-concurrent", "1", "--live-every", "0"]
pytestmark = pytest.mark.slow


def outcome(exp: Path) -> tuple[list, list]:
    """The finished (config, seed) trials and each cell's verdict."""
    df = pd.read_parquet(exp / "trials.parquet")
    trials = sorted((r.method, r.mur, int(r.seed)) for r in df.itertuples() if r.status == "finished")
    summary = pd.read_csv(exp / "summary.csv", dtype={"verdict": str}).fillna({"verdict": ""})  # "" for the baseline
    return trials, sorted((r.method, r.mur, r.verdict) for r in summary.itertuples())


def test_a_stopped_and_resumed_sweep_ends_with_the_same_seeds_and_verdicts(ray_head, tmp_path):
    run = [sys.executable, "-m", "sweeper.run"]
    head = ["--address", ray_head.address]
    whole = subprocess.run([*run, *AUTO, *head, "--storage", str(tmp_path / "whole")], cwd=ROOT, env=ray_head.env,
                           capture_output=True, text=True, timeout=900)
    assert whole.returncode == 0, whole.stderr[-3000:]
    cut_root = tmp_path / "cut"
    p = subprocess.Popen([*run, *AUTO, *head, "--storage", str(cut_root)], cwd=ROOT, env=ray_head.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        # the trial after the first look's belongs to the second look: the stop falls mid-round
        while len(list(cut_root.glob("*/trial_*"))) <= FIRST_LOOK and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert p.poll() is None, "the sweep ended before its second look started"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, err[-3000:]
    exp = next(cut_root.glob("ablation_radius-*"))
    resumed = subprocess.run([*run, "ablation_radius", "--resume", str(exp), *CELLS, "--max-concurrent", "1",
                              "--live-every", "0", *head], cwd=ROOT, env=ray_head.env, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    want = outcome(next((tmp_path / "whole").glob("ablation_radius-*")))
    assert outcome(exp) == want
    assert len(want[0]) > FIRST_LOOK and any(v.startswith(("differs", "capped")) for _, _, v in want[1] if v)
