"""benchmarks/trainer_throughput.py runs and writes what benchmarks/gpu_benchmarks.sh needs (timings
themselves are not asserted: they belong to the benchmark's JSON, not to a test)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
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


def test_packed_cells_groups_the_quick_start_by_cell_and_refuses_a_bad_before(tmp_path, capsys):
    pc = _load("packed_cells")
    cells = pc.cells(8, None)
    assert [pc.cell_name(c) for c in cells] == ["LabelSpreading", "MT", "MT+MUR r=0.25", "MT+MUR r=1", "MT+MUR r=4"]
    assert all([t["seed"] for t in c] == list(range(8)) for c in cells)
    short = pc.cells(2, 40)[1][0]  # shortened: the schedules shrink with the run, 1000 -> 40 steps
    assert (short["steps"], short["lr_rampdown"], short["rampup"]) == (40, 10, 8)
    with pytest.raises(SystemExit) as e:
        pc.main(["--before", str(tmp_path)])
    assert e.value.code == 2 and "holds no trainables/trainer.py" in capsys.readouterr().err


def test_packed_gpu_refuses_bad_packs_and_modes_before_any_work(capsys):
    pg = _load("packed_gpu")
    for argv in (["--packs", "0,2"], ["--packs", "x"], ["--compile", "graphs"]):
        with pytest.raises(SystemExit) as e:
            pg.main(argv)
        assert e.value.code == 2
    assert "--compile takes none, model, step" in capsys.readouterr().err


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
    from sweeper.docgen import committed_runs
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


def test_dense_conv_is_conv2d_on_small_maps_forward_and_backward():
    """cpu_levers' dense matmul against F.conv2d (the independent implementation): outputs, the input's
    and the kernel's gradients, on the quick network's 2x2 maps and on other small shapes."""
    import torch
    import torch.nn.functional as F

    cl = _load("cpu_levers")
    g = torch.Generator().manual_seed(0)
    for b, c, o, h, w, k in ((5, 64, 64, 2, 2, 3), (3, 4, 6, 3, 2, 3), (2, 3, 5, 1, 1, 3), (4, 8, 2, 2, 2, 1)):
        x = torch.randn(b, c, h, w, generator=g, dtype=torch.float64, requires_grad=True)
        wt = torch.randn(o, c, k, k, generator=g, dtype=torch.float64, requires_grad=True)
        gy = torch.randn(b, o, h, w, generator=g, dtype=torch.float64)
        ref = F.conv2d(x, wt, padding=k // 2)
        got = cl.dense_conv(x, wt, cl.tap_matrix(h, w, k, k // 2).double())
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
        gx_ref, gw_ref = torch.autograd.grad(ref, (x, wt), gy)
        gx, gw = torch.autograd.grad(got, (x, wt), gy)
        torch.testing.assert_close(gx, gx_ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gw, gw_ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="keeps the map's size"):
        cl.tap_matrix(4, 4, 3, 0)


def test_densify_turns_only_the_quick_networks_2x2_conv_and_keeps_its_function_and_state():
    import torch

    from trainables.models import ConvNetSmall

    cl = _load("cpu_levers")
    torch.manual_seed(0)
    net = ConvNetSmall(num_classes=10, in_channels=1).double().eval()
    x = torch.randn(6, 1, 8, 8, dtype=torch.float64)
    ref, keys = net(x), list(net.state_dict())
    assert cl.densify(net, x) == 1
    dense = [m for m in net.modules() if isinstance(m, cl.DenseSmallConv)]
    assert len(dense) == 1 and dense[0].kernel_size == (3, 3) and dense[0].in_channels == dense[0].out_channels == 64
    assert list(net.state_dict()) == keys
    torch.testing.assert_close(net(x), ref, rtol=1e-10, atol=1e-10)


def test_cpu_levers_projects_the_quick_start_from_each_kinds_fastest_lever_and_refuses_bad_levers(capsys):
    cl = _load("cpu_levers")
    rows = [{"kind": "MT", "lever": "eager", "ms_per_step": 10.0}, {"kind": "MT", "lever": "model", "ms_per_step": 8.0},
            {"kind": "MT+MUR r=1", "lever": "eager", "ms_per_step": 20.0},
            {"kind": "MT+MUR r=1", "lever": "dense", "ms_per_step": 16.0}]
    q = cl.quick_start_projection(rows, {"MT": 8, "MT+MUR r=1": 24}, 1000)
    # 8 MT trials x 1000 steps x 10 ms + 24 MUR trials x 1000 x 20 ms, against 8 x 8 + 24 x 16
    assert q["training_s_today"] == pytest.approx(80 + 480) and q["training_s_best"] == pytest.approx(64 + 384)
    assert q["speedup"] == pytest.approx(560 / 448) and q["best_lever"] == {"MT": "model", "MT+MUR r=1": "dense"}
    for argv in (["--levers", "dense,model"], ["--levers", "eager,fast"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as e:
            cl.main(argv)
        assert e.value.code == 2
    assert "eager included" in capsys.readouterr().err


def test_cpu_levers_prices_the_quick_starts_trials_from_the_sweep():
    """The README's quick start: 8 seeds of LabelSpreading (no step), MT, and MT+MUR at r = 0.25, 1, 4;
    every MUR cell is priced at r = 1's step."""
    configs, trials = _load("cpu_levers").quick_start()
    assert trials == {"MT": 8, "MT+MUR r=1": 24}
    mt, mur = configs["MT"], configs["MT+MUR r=1"]
    assert (mt["method"], mt["mur"], mt["seed"], mt["steps"]) == ("mt", "none", 0, 1000)
    assert (mur["method"], mur["mur"], mur["mur_radius"], mur["seed"]) == ("mt", "direct", 1.0, 0)
    assert {k: v for k, v in mur.items() if k not in ("mur", "mur_radius")} == \
        {k: v for k, v in mt.items() if k not in ("mur", "mur_radius")}  # the two kinds differ in MUR alone
