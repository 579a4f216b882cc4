"""What `pip install` gives a user runs on its own: the service, installed (not editable) into a folder of
its own, opens no file under docs/ or benchmarks/results/ while it lists the sweeps, plans a dry run, runs a
quick sweep and reports it; the study is not installed.

Every Python process of the run (the driver and Ray's trial workers) gets an audit hook
(`sys.addaudithook`, from a sitecustomize.py beside the installed packages) that records each path it
opens or lists (the audit events open, os.scandir, os.listdir: a glob lists); the test reads the records
of all of them.

    pytest tests/test_installed.py -q
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOK = """
import os, sys
_log = os.environ.get("OPEN_AUDIT_LOG")
def _hook(event, args):
    if event in ("open", "os.scandir", "os.listdir") and _log and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if ("/docs/" in path or "benchmarks/results" in path) and not path.startswith(_log):
            with open(_log + "." + str(os.getpid()), "a") as f:
                f.write(path + "\\n")
sys.addaudithook(_hook)
"""


@pytest.mark.slow
def test_the_installed_service_opens_nothing_of_the_record(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(ROOT)], check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) == \
        ["search_spaces", "sweeper", "trainables"]  # no study/
    (target / "sitecustomize.py").write_text(HOOK)
    for rel in ("docs/runs", "benchmarks/results"):  # the record where code that looks beside its package finds it
        shutil.copytree(ROOT / rel, target / rel)
    work = tmp_path / "work"  # not the repository: nothing of it on the path
    work.mkdir()
    log = tmp_path / "opened"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    ray_tmp = Path(tempfile.mkdtemp(prefix="inst", dir="/tmp"))  # Ray's socket paths are limited to 107 bytes
    env.update(PYTHONPATH=str(target), OPEN_AUDIT_LOG=str(log), RAY_TMPDIR=str(ray_tmp))
    quick = ["ablation_kl", "--preset", "quick", "--seeds", "1", "--cells", "vd=false", "--set", "steps=20",
             "--set", "eval_every=10", "--set", "lr_rampdown=10", "--set", "sensitivity_samples=4",
             "--live-every", "0", "--storage", str(work / "results")]
    try:
        for argv in (["sweeper.list"], ["sweeper.run", *quick, "--dry-run"], ["sweeper.run", *quick]):
            p = subprocess.run([sys.executable, "-m", *argv], cwd=work, env=env, capture_output=True, text=True,
                               timeout=600)
            assert p.returncode == 0, (argv, p.stderr[-3000:])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    where = subprocess.run([sys.executable, "-c", "import sweeper, trainables; print(sweeper.__file__, "
                            "trainables.__file__)"], cwd=work, env=env, capture_output=True, text=True).stdout
    assert where.split() == [str(target / "sweeper" / "__init__.py"), str(target / "trainables" / "__init__.py")]
    (exp,) = (work / "results").iterdir()
    p = subprocess.run([sys.executable, "-m", "sweeper.report", str(exp)], cwd=work, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (exp / "report.html").is_file() and json.loads((exp / "sweep.json").read_text())["name"] == "ablation_kl"
    opened = sorted({line for f in tmp_path.glob("opened.*") for line in f.read_text().splitlines()})
    assert opened == [], opened
    # the hook records what it should: a planted open and a planted glob of such paths are seen
    planted = target / "docs" / "runs"
    subprocess.run([sys.executable, "-c", f"import pathlib; list(pathlib.Path({str(planted)!r}).glob('*'));"
                    f"open({str(planted / 'x.json')!r}, 'w')"], cwd=work, env=env, capture_output=True)
    seen = "".join(f.read_text() for f in tmp_path.glob("opened.*")).splitlines()
    assert str(planted / "x.json") in seen and str(planted) in seen
