"""benchmarks/trainer_throughput.py runs and writes what benchmarks/gpu_benchmarks.sh needs (timings
themselves are not asserted: they belong to the benchmark's JSON, not to a test)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("trainer_throughput", ROOT / "benchmarks" / "trainer_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_throughput_json_has_every_requested_row_and_the_compile_share(tmp_path):
    bench = load_bench()
    out = tmp_path / "tt.json"
    bench.main(["--variants", "MT,MT+VD", "--compile", "none", "--steps", "2", "--warmup", "1", "--repeats", "1",
                "--out", str(out)])
    d = json.loads(out.read_text())
    assert d["complete"] is True and d["paper_steps"] == 280_000 and d["family"] == "mt"
    assert [(r["variant"], r["compile"]) for r in d["rows"]] == [("MT", "none"), ("MT+VD", "none")]
    for r in d["rows"]:
        assert r["speedup_vs_eager"] == 1.0 and r["compile_s"] == 0.0 and r["compile_pct_paper_run"] == 0.0
        assert r["images_per_s"] == pytest.approx(100 * r["steps_per_s"])
    assert d["rows"][1]["slowdown_vs_base"] == pytest.approx(d["rows"][0]["steps_per_s"] / d["rows"][1]["steps_per_s"])
    assert not out.with_suffix(".json.tmp").exists()


def test_an_unknown_variant_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit) as e:
        load_bench().main(["--variants", "MT,MT+XYZ"])
    assert e.value.code == 2
    assert "unknown --variants ['MT+XYZ'] for --family mt; choose from MT, MT+VD" in capsys.readouterr().err


def test_ratios_and_compile_share_by_hand():
    """Speed-up against the same variant eager, time per step against the first variant in the same
    mode, and compile time as a share of a paper-length run, on numbers worked out by hand."""
    bench = load_bench()
    rows = [{"variant": "MT", "compile": "none", "steps_per_s": 100.0},
            {"variant": "MT", "compile": "model", "steps_per_s": 125.0},
            {"variant": "MT+VD", "compile": "none", "steps_per_s": 40.0},
            {"variant": "MT+VD", "compile": "model", "steps_per_s": 100.0}]
    bench.ratios(rows)
    assert [r["speedup_vs_eager"] for r in rows] == [1.0, 1.25, 1.0, 2.5]
    assert [r["slowdown_vs_base"] for r in rows] == [1.0, 1.0, 2.5, 1.25]
    # 280k steps at 50 steps/s = 5600 s; 56 s of compiling is 56 / 5656 of the run, just under 1 %
    assert bench.compile_share(56.0, 50.0, 280_000) == pytest.approx(0.990099, rel=1e-6)


def load_cpu_step():
    spec = importlib.util.spec_from_file_location("cpu_step", ROOT / "benchmarks" / "cpu_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_cpu_step_against_the_same_tree_gives_the_same_losses_and_every_row(tmp_path):
    """This tree against itself: two processes from one seed take bit-identical steps (same_losses), and
    the JSON holds every variant's before/after rounds and their ratio."""
    out = tmp_path / "cs.json"
    load_cpu_step().main(["--before", str(ROOT), "--steps", "2", "--rounds", "1", "--warmup", "2", "--out", str(out)])
    d = json.loads(out.read_text())
    assert [r["variant"] for r in d["rows"]] == ["MT", "MT+MUR", "MT+VD+MUR"] and d["threads"] == 1
    for r in d["rows"]:
        assert r["same_losses"] is True and len(r["rounds_before"]) == len(r["rounds_after"]) == 1
        assert r["speedup"] == pytest.approx(r["steps_per_s_after"] / r["steps_per_s_before"])


def test_cpu_step_refuses_a_before_that_is_no_checkout(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        load_cpu_step().main(["--before", str(tmp_path)])
    assert e.value.code == 2 and "holds no trainables/trainer.py" in capsys.readouterr().err


def test_fixmatch_family_benchmarks_the_sweeps_own_network(monkeypatch):
    """bench_setup's GPU settings name ConvNet-13 (the MT family's network); the fixmatch family runs the
    paper preset's WRN-28-2 at 64 + 448 images per step there, and the quick preset's network on the CPU."""
    from search_spaces import get_sweep
    from trainables.config import TrainConfig

    bench = load_bench()
    monkeypatch.setattr(bench, "synthetic_cifar", lambda device: None)  # the settings without a GPU's data
    for device, preset in (("cuda", "paper"), ("cpu", "quick")):
        setup, _ = bench.bench_setup(device)
        want = get_sweep("fixmatch", preset).base
        for variant in bench.FIXMATCH_VARIANTS.values():
            cfg = TrainConfig.from_dict({**bench.fixmatch_base(setup, device == "cuda"), **variant})
            assert (cfg.arch, cfg.batch_labeled, cfg.batch_unlabeled, cfg.device) == \
                (want["arch"], want["batch_labeled"], want["batch_unlabeled"], device), (device, variant)
        assert setup["arch"] == ("convnet13" if device == "cuda" else "convnet_small")
    assert get_sweep("fixmatch", "paper").base["arch"] == "wrn28_2"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_benchmark_names_each_checkout_by_its_own_commit_and_bench_commit_only_this_one(tmp_path, monkeypatch):
    """BENCH_COMMIT names this checkout (a copy on another machine may carry a stale .git); a --before
    checkout keeps the commit git gives it, and a folder outside git gives None rather than a guess."""
    from benchmarks.provenance import ROOT, commit

    other = tmp_path / "other"
    other.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(other), *a], check=True, capture_output=True, text=True)
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    head = git("rev-parse", "HEAD").stdout.strip()
    monkeypatch.setenv("BENCH_COMMIT", "f" * 40)
    assert commit(ROOT) == "f" * 40
    assert commit(other) == head != "f" * 40
    monkeypatch.delenv("BENCH_COMMIT")
    assert commit(tmp_path / "nowhere") is None


def test_benchmarks_and_committed_runs_name_the_cpu_by_one_rule(monkeypatch):
    """The name is /proc/cpuinfo's first "model name" (read here with a regex), so a benchmark's machine and
    a committed run's machine.json say the same for one machine; without /proc, what platform knows."""
    import builtins
    import platform
    import re

    from benchmarks import provenance as bench
    from study import committed_runs
    from sweeper.driver import provenance

    assert bench.cpu_name is provenance.cpu_name and committed_runs.cpu_name is provenance.cpu_name
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        text = ""
    m = re.search(r"^model name\s*:\s*(.*?)\s*$", text, re.M)
    if m:
        assert provenance.cpu_name() == m.group(1)
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (_ for _ in ()).throw(OSError("no /proc"))
                        if str(p) == "/proc/cpuinfo" else real_open(p, *a, **k))
    assert provenance.cpu_name() == (platform.processor() or platform.machine())




@pytest.mark.parametrize("cmd, kind, program", [
    ("/v/bin/python -m sweeper.run ablation_radius --storage /tmp/pytest-of-root/pytest-8/popen-gw1/t0/results",
     "driver", "sweeper.run"),
    ("/v/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest", "python -c"),
    ("/v/bin/python /v/lib/python3.11/site-packages/ray/_private/workers/setup_worker.py /v/lib/python3.11/"
     "site-packages/ray/_private/workers/default_worker.py --raylet-name=/tmp/r/sockets/raylet", "trial", "setup_worker.py"),
    ("ray::ImplicitFunc.train", "trial", "ray::ImplicitFunc.train"),
    ("ray::DashboardAgent", "ray server", "ray::DashboardAgent"),
    ("/v/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/r/raylet "
     "--python_worker_command=/v/bin/python /v/lib/python3.11/site-packages/ray/_private/workers/setup_worker.py "
     "/v/lib/python3.11/site-packages/ray/_private/workers/default_worker.py --raylet-name=/tmp/r/sockets/raylet",
     "ray server", "raylet"),  # the raylet names the worker command it starts
    ("/v/bin/python -u /v/lib/python3.11/site-packages/ray/_private/log_monitor.py --session-dir=/tmp/r", "ray server",
     "log_monitor.py"),
    ("/v/bin/python /v/bin/ray job submit --address http://127.0.0.1:1 -- echo hi", "ray cli", "ray"),
    ("/usr/lib/chromium/chromium --type=renderer", "chromium", "chromium"),
    ("/usr/bin/python3 -c print(1)", "other", "python3 -c"),
])
def test_suite_cpu_names_each_process_by_its_kind(cmd, kind, program):
    """benchmarks/suite_cpu.py's kinds, on command lines as /proc shows them: a trial process names the raylet's
    socket and a driver pytest's tmp folder, and neither may be counted as a server or as pytest."""
    from benchmarks import suite_cpu  # imported once for every case

    assert (suite_cpu.kind(cmd), suite_cpu.program(cmd)) == (kind, program)


def test_suite_cpu_reads_a_process_cpu_as_the_process_itself_counts_it():
    """read_stat's CPU seconds of a busy child equal what the child's own clock (time.process_time) says,
    to /proc's clock tick; once the child has ended and been reaped it is None."""
    from benchmarks import suite_cpu

    code = ("import sys, time\nt = time.process_time() + 0.3\nwhile time.process_time() < t: pass\n"
            "print(time.process_time(), flush=True)\ntime.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        own = float(child.stdout.readline())
        (key, cpu) = suite_cpu.read_stat(str(child.pid))
        assert key[0] == child.pid and cpu == pytest.approx(own, abs=0.05)
        assert suite_cpu.processes()[key] == cpu
    finally:
        child.kill()
        child.wait()
    assert suite_cpu.read_stat(str(child.pid)) is None


def test_suite_cpu_reads_each_line_of_pytests_durations_report():
    """Lines as pytest 9 prints them after `-q --durations=0`: the header and the summary are not tests."""
    from benchmarks import suite_cpu

    text = ("============================= slowest durations ==============================\n"
            "149.97s call     tests/test_reliability.py::test_killed_driver_resumes_without_rerunning_finished_trials\n"
            "94.68s setup    tests/test_s3.py::test_sweep_on_s3_stops_resumes_and_reports_from_the_bucket_alone\n"
            "0.01s teardown tests/test_compile.py::test_compiled_step_matches_eager[step-cpu]\n"
            "\n(2170 durations < 0.005s hidden.  Use -vv to show these durations.)\n"
            "1502 passed, 12 skipped, 1 warning in 1379.06s (0:22:59)\n")
    assert suite_cpu.durations(text) == [
        (149.97, "call", "tests/test_reliability.py::test_killed_driver_resumes_without_rerunning_finished_trials"),
        (94.68, "setup", "tests/test_s3.py::test_sweep_on_s3_stops_resumes_and_reports_from_the_bucket_alone"),
        (0.01, "teardown", "tests/test_compile.py::test_compiled_step_matches_eager[step-cpu]")]
