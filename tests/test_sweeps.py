"""Sweep modules, the sweeper.run command line (dry run, bad input) and sweeper.list; no Ray needed."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from search_spaces import PRESETS, SweepError, get_sweep, names, presets
from sweeper import list as sweep_list
from sweeper.run import main as run_main
from trainables.config import TrainConfig
from notorch import BLOCK_TORCH

EXPECTED = {"ablation_radius", "ablation_kl", "ablation_mur_steps", "ablation_mur_vs_rr", "mut_radius",
            "table_cifar", "table_svhn", "hpo", "hpo_base", "fixmatch", "mur_vs_vat", "quick_settings",
            "precision", "quick_dropout", "few_labels"}
MNIST_SWEEPS = {"table_cifar", "ablation_radius"}  # the sweeps with a --preset mnist
QUICK_ONLY = {"quick_settings", "quick_dropout", "few_labels"}  # quick-only questions


def test_every_expected_sweep_is_registered_by_file_name():
    assert EXPECTED <= set(names())


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_trial_config_validates(name, preset):
    if preset != "quick" and name in QUICK_ONLY:
        with pytest.raises(SweepError, match=f"^sweep {name} has no {preset} preset; use quick$"):
            get_sweep(name, preset)
        return
    if preset == "mnist" and name not in MNIST_SWEEPS:
        with pytest.raises(SweepError, match=f"^sweep {name} has no mnist preset; use paper or quick$"):
            get_sweep(name, preset)
        return
    sweep = get_sweep(name, preset)
    assert sweep.name == name and sweep.description and sweep.paper_ref
    trials = sweep.trials()
    assert trials, name
    for t in trials:
        TrainConfig.from_dict(t)
    if preset == "quick":
        assert {t["dataset"] for t in trials} == {"digits"}
    if preset == "mnist":
        assert {t["dataset"] for t in trials} == {"mnist"} and {t["num_labels"] for t in trials} == {100}
    module_doc = __import__(f"search_spaces.{name}", fromlist=["x"]).__doc__
    assert "python -m sweeper.run " + name in module_doc  # docstring states the command
    if sweep.search is not None:  # a search's axis is its samples: one seed, one ranked table of them
        assert (sweep.seeds, sweep.rows, sweep.cols) == (1, ("method",), ()), name
        # it starts at the preset's hand-set values, which lie inside the searched ranges
        assert sweep.search.get("start_at_base"), name
        for k, (kind, lo, hi) in sweep.search["space"].items():
            assert kind in ("loguniform", "uniform") and lo <= trials[0][k] <= hi, (name, k, trials[0][k])
    # searches select on a validation split; the paper preset's tables train on every image as the authors
    held = {TrainConfig.from_dict(t).n_val for t in trials if t["method"] != "labelspreading"}
    if sweep.search is not None or preset != "paper":
        assert 0 not in held, f"{name} --preset {preset}: every trial needs a validation split"
    else:
        assert held == {0}, f"{name} --preset paper: the authors' protocol trains on every image"
    # the labeled subset: paper presets fix it as the authors' train.py (--seed 1003 for every run), the
    # others draw a new one per seed
    subset_seeds = {TrainConfig.from_dict(t).label_seed for t in trials}
    assert subset_seeds == ({1003} if preset == "paper" else {-1}), (name, preset, subset_seeds)


def test_grid_counts_and_seeds_are_an_axis():
    s = get_sweep("ablation_radius", "paper")
    assert len(s.trials()) == (5 + 1) * 3  # five radii and the MT baseline
    mur = [t for t in s.trials() if t["mur"] == "direct"]
    assert sorted({t["mur_radius"] for t in mur}) == [4.0, 7.0, 10.0, 20.0, 40.0]
    assert len(s.trials(seeds=2)) == 12 and {t["seed"] for t in s.trials(seeds=2)} == {0, 1}
    t = get_sweep("table_cifar", "paper")
    assert len(t.trials()) == 8 * 4 * 3
    cifar100 = [x for x in t.trials() if x["dataset"] == "cifar100"]
    assert cifar100 and all(x["mur_radius"] == 20.0 and x["num_labels"] == 10000 for x in cifar100)
    q = get_sweep("ablation_radius", "quick")
    assert {t["mur_radius"] for t in q.trials() if t["mur"] == "direct"} == {0.25, 1.0, 4.0} and q.seeds == 8


def test_quick_tables_run_quick_seeds_but_the_costliest():
    """QUICK_SEEDS (5) seeds in every quick table, so that a paired t-interval can exclude 0 (3 seeds: t = 4.30);
    the quick start (ablation_radius) and the quick network's dropout choice (two cheap rows) run 8;
    searches run one seed per sample."""
    from search_spaces.common import QUICK_SEEDS

    costly = {"ablation_radius", "quick_dropout"}
    for name in sorted(EXPECTED):
        s = get_sweep(name, "quick")
        want = 1 if s.search else 8 if name in costly else QUICK_SEEDS
        assert s.seeds == want, (name, s.seeds)


def test_mnist_preset_sizes_and_rows():
    from trainables.models import build_model

    table, radius = get_sweep("table_cifar", "mnist"), get_sweep("ablation_radius", "mnist")
    for t in table.trials() + radius.trials():
        cfg = TrainConfig.from_dict(t)
        assert (cfg.arch, cfg.width, cfg.translate, cfg.flip) == ("convnet13", 0.5, 2, False)
        assert (cfg.batch_labeled, cfg.batch_unlabeled) == (25, 75)  # the paper's batch
        assert 8 <= cfg.steps // cfg.eval_every <= 12 and cfg.steps % cfg.eval_every == 0  # about 10 evaluations
        assert 0 < cfg.lr_rampup < cfg.steps - cfg.lr_rampdown and 0.2 <= cfg.lr_rampdown / cfg.steps <= 0.4
    model = build_model(TrainConfig.from_dict(table.trials()[0]))  # one channel: MNIST is grey
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 10)
    rows = {(t["method"], t["vd"], t["mur"]) for t in table.trials()}
    assert rows == {("mt", vd, mur) for vd in (False, True) for mur in ("none", "direct")} | {("supervised", False, "none")}
    assert len(table.trials()) == 5 * 3 and table.baseline == {"method": "mt", "vd": False, "mur": "none"}
    radii = sorted(t["mur_radius"] for t in radius.variants if t["mur"] == "direct")
    assert 10.0 in radii and min(radii) <= 4 * 0.5 and max(radii) >= 4 * 4.0  # 4x the digits radii 0.5-4
    assert {t["mur"] for t in radius.variants} == {"none", "direct"} and len(radius.trials()) == 6 * 3


@pytest.mark.slow
def test_mnist_preset_dry_run_checks_the_data_without_torch(tmp_path):
    """sweeper.run parses the MNIST file and plans the sweep in a process where torch cannot be imported."""
    import gzip
    import pickle

    import numpy as np

    split = (np.zeros((20, 784), np.float32), np.arange(20) % 10)
    (tmp_path / "mnist.pkl.gz").write_bytes(gzip.compress(pickle.dumps((split, split, split))))
    code = (BLOCK_TORCH +
            "from sweeper.run import main\n"
            f"sys.exit(main(['table_cifar', '--preset', 'mnist', '--dry-run', '--data-dir', {str(tmp_path)!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "15 trials" in p.stdout, p.stderr[-2000:]
    (tmp_path / "mnist.pkl.gz").write_bytes(b"garbage")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "mnist.pkl.gz" in p.stderr and "corrupt" in p.stderr, p.stderr[-2000:]


def test_unknown_sweep_and_preset_errors_name_the_closest_valid_names():
    with pytest.raises(SweepError, match=r"did you mean ablation_radius\b"):
        get_sweep("ablation_radiu")
    with pytest.raises(SweepError, match=r"^unknown sweep 'zz'; see the sweeps with python -m sweeper.list$"):
        get_sweep("zz")
    with pytest.raises(SweepError, match="valid presets: paper, quick"):
        get_sweep("ablation_radius", "fast")
    with pytest.raises(SweepError, match=r"did you mean paper\?$"):
        get_sweep("ablation_radius", "papr")


def test_closest_names_are_the_difflib_neighbours_and_never_the_whole_list():
    from trainables.files import closest
    valid = [f"key_{i}" for i in range(60)] + ["mur_radius"]
    assert closest("mur_radus", valid, "-") == "did you mean mur_radius?"
    assert closest("qqqqqq", valid, "see the list") == "see the list"
    assert closest("key_1", valid, "-").count(" or ") <= 2


def test_dry_run_counts_match_grid(capsys, tmp_path):
    # a quick sweep with no committed run prints the planning estimate (one with a run: its measured cost)
    runs = Path(__file__).resolve().parent.parent / "docs" / "runs"
    name = next(n for n in names() if "quick" in presets(n) and not get_sweep(n, "quick").search
                and not list(runs.glob(f"{n}-quick-s*")))
    rc = run_main([name, "--preset", "quick", "--dry-run", "--storage", str(tmp_path / "r")])
    out = capsys.readouterr().out
    n = len(get_sweep(name, "quick").trials())
    assert rc == 0 and f"{n} trials" in out and "cost: no committed run; estimate" in out
    assert not (tmp_path / "r").exists()  # a dry run writes nothing
    rc = run_main(["ablation_radius", "--preset", "quick", "--dry-run", "--seeds", "5"])
    n = len(get_sweep("ablation_radius", "quick").variants)
    assert rc == 0 and f"{n * 5} trials" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["no_such_sweep"], "unknown sweep 'no_such_sweep'; see the sweeps"),
    (["ablation_radius", "--preset", "fast"], "unknown preset 'fast'"),
    (["table_svhn", "--preset", "mnist"], "sweep table_svhn has no mnist preset; use paper or quick"),
    (["ablation_radius", "--preset", "quick", "--set", "mur_radius=-1"], "mur_radius must be > 0"),
    (["ablation_radius", "--preset", "quick", "--set", "num_labels=105"], "not divisible"),
    (["ablation_radius", "--preset", "quick", "--set", "radius=3"], "--set: unknown key(s)"),
    (["ablation_radius", "--preset", "quick", "--seeds", "0"], "--seeds must be >= 1"),
    (["ablation_radius", "--preset", "quick", "--address", "127.0.0.1:1"], "does not answer"),
])
def test_bad_input_is_one_line_exit_2(argv, words, capsys, tmp_path):
    rc = run_main(argv + ["--storage", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and words in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_missing_data_folder_is_reported_before_ray(tmp_path, capsys):
    rc = run_main(["ablation_radius", "--data-dir", str(tmp_path / "nothing"), "--storage", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "download" in err.lower() and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_process_exit_status_and_list():
    p = subprocess.run([sys.executable, "-m", "sweeper.run", "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("error: unknown sweep") and "Traceback" not in p.stderr
    rows = {r["name"]: r for r in sweep_list.rows()}
    assert rows["ablation_radius"]["paper_trials"] == 18 and rows["hpo"]["quick_trials"] >= 10
    p = subprocess.run([sys.executable, "-m", "sweeper.list"], capture_output=True, text=True)
    assert p.returncode == 0 and all(n in p.stdout for n in EXPECTED)


@pytest.mark.slow
def test_driver_checks_a_digits_sweep_without_torch():
    """sweeper.run validates and plans a digits sweep in a process where torch cannot be imported:
    the driver leaves torch (a slow import) to the trial processes."""
    code = (BLOCK_TORCH +
            "from sweeper.run import main\n"
            "sys.exit(main(['ablation_radius', '--preset', 'quick', '--dry-run']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    n = len(get_sweep("ablation_radius", "quick").trials())
    assert p.returncode == 0 and f"{n} trials" in p.stdout, p.stderr[-2000:]


# The authors' entropy-minimisation coefficient (cent_u_coeff_max) as their run files set it,
# transcribed independently of search_spaces/common.py from clarken92/ConsistencySSL
# working/semi_supervised/<dir>/run_<data>.py; None: no run file (our stated choice applies).
AUTHORS_RUN_FILES = {
    ("mt", False, False): {"cifar10": 0.1, "cifar100": 0.0, "svhn": 0.0},    # MeanTeacher
    ("mt", True, False): {"cifar10": 0.1, "cifar100": 0.0, "svhn": 0.0},     # MeanTeacher_VD
    ("mt", False, True): {"cifar10": 0.0, "cifar100": None, "svhn": None},   # MeanTeacher_MUR
    ("ict", False, False): {"cifar10": 0.1, "cifar100": 0.1, "svhn": 0.0},   # ICT
    ("ict", True, False): {"cifar10": 0.0, "cifar100": 0.0, "svhn": 0.0},    # ICT_VD
    ("ict", False, True): {"cifar10": 0.0, "cifar100": 0.0, "svhn": 0.0},    # ICT_MUR
    ("pi", False, False): {"cifar10": 0.0, "svhn": 0.0},                     # PiModel
}


@pytest.mark.parametrize("name", ["table_cifar", "table_svhn"])
def test_paper_tables_use_the_authors_entmin_per_data_set(name):
    checked = 0
    for t in get_sweep(name, "paper").trials(seeds=1):
        want = AUTHORS_RUN_FILES.get((t["method"], t["vd"], t["mur"] != "none"), {}).get(t["dataset"])
        if want is not None:
            assert t["entmin_coef"] == want, t
            checked += 1
    assert checked >= 6


# MUR's radius of the authors' runs behind Table 1 (working/semi_supervised/<dir>/run_<data>.py): MT + MUR on
# CIFAR-10 r 10 (MeanTeacher_MUR's DEFAULT_CONFIG), ICT + MUR r 20 (ICT_MUR/run_cifar10.py: only Rad20.0 series
# at 2000 and 4000 labels, 5/5a/5b at 1000), CIFAR-100 r 20 (the appendix; ICT_MUR/run_cifar100.py 1/1a/1b)
AUTHORS_RADIUS = {("mt", "cifar10"): 10.0, ("ict", "cifar10"): 20.0, ("mt", "cifar100"): 20.0, ("ict", "cifar100"): 20.0}


def test_table_cifar_mur_rows_run_the_authors_radius_and_their_labels_say_it():
    import pandas as pd
    from sweeper.analysis.layout import row_labels
    from sweeper.analysis.paper_results import paper_value, protocol_reason

    s = get_sweep("table_cifar", "paper")
    trials = s.trials(seeds=1)
    mur = [t for t in trials if t["mur"] != "none"]
    assert len(mur) == 16
    for t in mur:
        assert t["mur_radius"] == AUTHORS_RADIUS[t["method"], t["dataset"]], t
        cfg = TrainConfig.from_dict(t).to_dict()
        assert paper_value(t["method"], t["vd"], t["mur"], t["dataset"], t["num_labels"],
                           mur_radius=t["mur_radius"], kl_coef=cfg["kl_coef"]) is not None
        assert protocol_reason(cfg) is None                      # each is the paper's own cell, with a delta
        assert protocol_reason({**cfg, "mur_radius": 10.0 if t["mur_radius"] == 20 else 20.0}) is not None
    frame = pd.DataFrame([{k: v for k, v in t.items() if k != "seed"} for t in trials])
    labels = dict(zip(zip(frame["method"], frame["vd"], frame["mur"], frame["dataset"]), row_labels(frame, s.rows, s.cols)))
    assert "r 20" in labels["ict", False, "direct", "cifar10"] and "r 10" in labels["mt", False, "direct", "cifar10"]
    assert labels["ict", False, "direct", "cifar10"] == labels["ict", False, "direct", "cifar100"]  # one row
    assert " r " not in labels["ict", False, "none", "cifar10"] + labels["mt", True, "none", "cifar10"]
    assert "entmin 0.1" in labels["mt", True, "direct", "cifar10"]   # MT + VD + MUR: MeanTeacher_VD's run file


def test_quick_table_rows_change_one_knob_at_a_time_from_the_baseline():
    """MT and ICT each with base, +VD, +MUR, +VD+MUR, entropy minimisation 0 everywhere: every variant row
    differs from its method's base row in the knobs its label names only."""
    s = get_sweep("table_cifar", "quick")
    for method in ("mt", "ict"):
        rows = [v for v in s.variants if v["method"] == method]
        assert {(v["vd"], v["mur"]) for v in rows} == {(False, "none"), (True, "none"), (False, "direct"), (True, "direct")}
        assert all(v["entmin_coef"] == 0.0 for v in rows)
    assert {v["method"] for v in s.variants} == {"labelspreading", "mt", "ict"} and s.seeds >= 5


def test_quick_settings_compares_the_paper_values_with_the_quick_ones_on_fresh_seeds():
    """Two rows of plain MT that differ in exactly the five settings hpo_base tuned: the paper's (the
    baseline) and the quick preset's; seeds past the search's seed 0; chosen on validation error."""
    from search_spaces.common import CIFAR, QUICK

    s = get_sweep("quick_settings", "quick")
    tuned = ("lr", "cons_coef", "ema_decay", "input_noise", "weight_decay")
    assert set(get_sweep("hpo_base", "quick").search["space"]) == set(tuned)
    rows = {tuple(t[k] for k in tuned): t for t in s.trials()}
    assert set(rows) == {tuple(CIFAR[k] for k in tuned), tuple(QUICK[k] for k in tuned)}
    a, b = rows.values()
    assert {k for k in a if a[k] != b[k]} == set(tuned)  # (both seed 5) nothing else differs between the rows
    assert all(a[k] != b[k] for k in tuned)
    assert s.baseline == {k: CIFAR[k] for k in tuned} and s.metric == "val_error"
    assert sorted({t["seed"] for t in s.trials()}) == [1, 2, 3, 4, 5] and {t["method"] for t in s.trials()} == {"mt"}


def test_a_quick_only_sweep_runs_its_quick_preset_without_preset(capsys, tmp_path):
    """No --preset means paper where a sweep has it, else its only preset (also on --resume, whose early
    name check runs before the stored preset is read)."""
    from search_spaces import default_preset

    assert default_preset("quick_settings") == "quick" and default_preset("table_cifar") == "paper"
    with pytest.raises(SweepError, match="^unknown sweep 'nope'"):
        default_preset("nope")
    assert run_main(["quick_settings", "--dry-run", "--storage", str(tmp_path)]) == 0
    assert "sweep quick_settings (preset quick)" in capsys.readouterr().out


def test_rows_that_set_different_keys_keep_every_key_in_every_trial():
    """A LabelSpreading row sets no radius, the MUR rows do: every trial config handed to the Tuner must
    carry every key (the param space is built from one key set), the missing ones at their defaults."""
    from types import SimpleNamespace

    from sweeper.driver.preflight import trial_configs

    sweep = get_sweep("ablation_mur_steps", "quick")
    args = SimpleNamespace(seeds=1, seed_start=None, set=[], data_dir=None)
    trials = trial_configs(sweep, args)
    assert len({tuple(t) for t in trials}) == 1  # one key set
    by_row = {(t["method"], t["mur"], t["mur_steps"], t["mur_step_size"]) for t in trials}
    want = {(v.get("method", "mt"), v["mur"], v.get("mur_steps", 1), v.get("mur_step_size", sweep.base.get("mur_step_size", 1.0)))
            for v in sweep.variants}
    assert by_row == want


def test_asha_grace_period_follows_the_run_length():
    from sweeper.driver.tuner import grace_period

    assert grace_period({"grace_fraction": 0.5}, 1500, 250) == 750  # the quick searches: half the run
    assert grace_period({"grace_fraction": 0.5}, 60, 20) == 30      # --set steps=60 keeps it inside the run
    assert grace_period({"grace_fraction": 0.5}, 20, 20) == 20      # at least one evaluation
    assert grace_period({}, 1500, 250) == 250 and grace_period({"grace_period": 900}, 600, 100) == 600


def test_paper_presets_carry_the_authors_bn_statistics_pass_and_quick_ones_never():
    """The authors' MeanTeacher._forward (inherited by MT+MUR, MT+RR, ICT, ICT+MUR) runs a clean student
    pass; their VD models and Pi do not (transcribed here from models/semi_supervised/*.py)."""
    authors = {("mt", False): True, ("mt", True): False, ("ict", False): True, ("ict", True): False,
               ("pi", False): False, ("pi", True): False}
    for name in ("table_cifar", "table_svhn", "ablation_kl", "ablation_radius", "ablation_mur_steps",
                 "ablation_mur_vs_rr"):
        for t in get_sweep(name, "paper").trials():
            cfg = TrainConfig.from_dict(t)
            assert cfg.bn_clean_pass == authors[(cfg.method, cfg.vd)], (name, cfg.method, cfg.vd)
    for name in sorted(EXPECTED):
        for preset in ("quick", "mnist"):
            if preset == "mnist" and name not in MNIST_SWEEPS:
                continue
            assert not any(TrainConfig.from_dict(t).bn_clean_pass for t in get_sweep(name, preset).trials()), name


@pytest.mark.parametrize("preset", ["quick", "paper"])
def test_precision_rows_differ_in_bf16_only(preset):
    """One knob per row: the bf16 row is the fp32 row's config with bf16 on, seed for seed (paired)."""
    s = get_sweep("precision", preset)
    by_seed = {}
    for t in s.trials():
        by_seed.setdefault(t["seed"], {})[t["bf16"]] = t
    assert len(by_seed) == s.seeds >= (5 if preset == "quick" else 3)
    for rows in by_seed.values():
        c32, c16 = (TrainConfig.from_dict(rows[b]) for b in (False, True))
        fp32, bf16 = c32.to_dict(), c16.to_dict()
        assert {k for k in fp32 if fp32[k] != bf16[k]} == {"bf16"}
        assert c32.compile == c16.compile == ("none" if preset == "quick" else "graphs")
        assert c32.vd and c32.mur == "direct" and c32.method == "mt"
    assert s.baseline == {"bf16": False}


def test_seed_start_moves_every_rows_seeds_and_refuses_a_negative_start():
    """--seed-start 8 --seeds 8 runs seeds 8-15 in every row (a disjoint seed set); a negative start is refused."""
    from sweeper.driver.preflight import InputError, trial_configs
    from sweeper.run import parse_args

    sweep = get_sweep("ablation_radius", "quick")
    trials = trial_configs(sweep, parse_args(["ablation_radius", "--preset", "quick", "--seed-start", "8"]))
    rows = {(t["method"], t["mur"]) for t in trials}
    rows = {(t["method"], t["mur"], t["mur_radius"]) for t in trials}
    assert len(rows) == 5 and len(trials) == 5 * sweep.seeds
    for row in rows:
        assert sorted(t["seed"] for t in trials if (t["method"], t["mur"], t["mur_radius"]) == row) == \
            list(range(8, 8 + sweep.seeds))
    with pytest.raises(InputError, match="--seed-start must be >= 0"):
        trial_configs(sweep, parse_args(["ablation_radius", "--preset", "quick", "--seed-start", "-1"]))


# The entropy-minimisation coefficient (cent_u_coeff_max) of the run series each ablation figure came
# from, transcribed from clarken92/ConsistencySSL working/semi_supervised/<file> at HEAD, independently
# of search_spaces/: (sweep, the row's keys, entmin, file, runs). MeanTeacher_VD/run_cifar10.py's KL
# series overrides cent_u_coeff_max to 0.0 in each run; MeanTeacher_MUR/run_cifar10.py's DEFAULT_CONFIG
# has 0.0 and its runs 0-22 keep it. Rows with file None have no run file: the stated choice applies.
_MUR = "MeanTeacher_MUR/run_cifar10.py"
_MTVD = "MeanTeacher_VD/run_cifar10.py"
_GA_PGA = [  # (run, steps, step size, mode) of MeanTeacher_MUR/run_cifar10.py: "<run>_MT_MUR_L1000_Nesterov_Step<s>_Lr<a>_<LambdaGrad|PGA>"
    (0, 2, 1.0, "ga"), (1, 5, 1.0, "ga"), (2, 2, 1.0, "pga"), (3, 5, 1.0, "pga"), (4, 2, 0.1, "ga"),
    (5, 5, 0.1, "ga"), (6, 2, 10.0, "ga"), (7, 2, 0.1, "pga"), (8, 5, 0.1, "pga"), (9, 2, 10.0, "pga"),
    (10, 5, 10.0, "ga"), (11, 5, 10.0, "pga"), (12, 8, 1.0, "ga"), (13, 8, 1.0, "pga"), (14, 8, 0.1, "ga"),
    (15, 8, 10.0, "ga"), (16, 8, 0.1, "pga"), (17, 8, 10.0, "pga")]
_RADIUS_RUNS = {4.0: "18/18a/18b_MT_MUR_L1000_Nesterov_Step1_Rad4", 7.0: "19/19a/19b_MT_MUR_L1000_Nesterov_Step1_Rad7",
                10.0: "20/20a/20b/20c_MT_MUR_L1000_Nesterov_Step1_Rad10",
                20.0: "21/21a/21b_MT_MUR_L1000_Nesterov_Step1_Rad20", 40.0: "22/22a/22b_MT_MUR_L1000_Nesterov_Step1_Rad40"}
ABLATION_ENTMIN = [
    # Fig. 3(a), (b): the KL series, three seeds each
    ("ablation_kl", dict(method="mt", vd=True, kl_coef=0.005), 0.0, _MTVD,
     "15/15a/15b_MTVD_L1000_Nesterov_like12_CEnt0.0_KLD0.005 (its run_config sets 0.01)"),
    ("ablation_kl", dict(method="mt", vd=True, kl_coef=0.01), 0.0, _MTVD, "13/13a/13b_MTVD_L1000_Nesterov_like12_CEnt0.0_KLD0.01"),
    ("ablation_kl", dict(method="mt", vd=True, kl_coef=0.05), 0.0, _MTVD, "12/12a/12b_MTVD_L1000_Nesterov_like3_CEnt0.0"),
    ("ablation_kl", dict(method="mt", vd=True, kl_coef=0.1), 0.0, _MTVD, "14/14a/14b_MTVD_L1000_Nesterov_like12_CEnt0.0_KLD0.1"),
    ("ablation_kl", dict(method="mt", vd=True, kl_coef=0.5), 0.0, _MTVD, "16/16a/16b_MTVD_L1000_Nesterov_like12_CEnt0.0_KLD0.5"),
    # the MT rows: no MT run in these series (MeanTeacher/run_cifar10.py, Table 1's MT, has 0.1); 0 so
    # that each row differs from the figure's runs in the figure's knob only
    ("ablation_kl", dict(method="mt", vd=False), 0.0, None, "none: the KL series' value"),
    ("ablation_radius", dict(method="mt", mur="none"), 0.0, None, "none: the radius series' value"),
    # Fig. 3(c): the radius series
    *[("ablation_radius", dict(method="mt", mur="direct", mur_radius=r), 0.0, _MUR, run)
      for r, run in _RADIUS_RUNS.items()],
    # Fig. 4(a), (b) and the appendix: GA / PGA at r = 10, against direct (run 20)
    ("ablation_mur_steps", dict(method="mt", mur="direct"), 0.0, _MUR, _RADIUS_RUNS[10.0]),
    *[("ablation_mur_steps", dict(method="mt", mur=m, mur_steps=s, mur_step_size=a), 0.0, _MUR,
       f"{n}/{n}a/{n}b_MT_MUR_L1000_Nesterov_Step{s}_Lr{a}_{'LambdaGrad' if m == 'ga' else 'PGA'}")
      for n, s, a, m in _GA_PGA],
    # Fig. 4(c): MUR over r (the radius series); RR: MeanTeacher_RR (models/semi_supervised/mean_teacher.py)
    # has no run file, MUR's value
    *[("ablation_mur_vs_rr", dict(method="mt", mur="direct", mur_radius=r), 0.0, _MUR, run)
      for r, run in _RADIUS_RUNS.items()],
    ("ablation_mur_vs_rr", dict(method="mt", mur="random"), 0.0, None, "none: MeanTeacher_RR has no run file"),
    # Fig. MUT (SVHN 1000): the MUT class (models/semi_supervised/pi.py) has no run file; PiModel/run_svhn.py's 0.0
    ("mut_radius", dict(method="mut"), 0.0, "PiModel/run_svhn.py", "DEFAULT_CONFIG_500 (no MUT run)"),
    # MUR vs VAT: MT's points as the radius series; MUT as mut_radius; VAT + EntMin is Miyato et al.'s (1.0)
    ("mur_vs_vat", dict(method="mt"), 0.0, _MUR, "DEFAULT_CONFIG_1000 (no VAT-point run)"),
    ("mur_vs_vat", dict(method="mut"), 0.0, "PiModel/run_svhn.py", "DEFAULT_CONFIG_500 (no MUT run)"),
    ("mur_vs_vat", dict(method="vat"), 1.0, None, "none: VAT + EntMin (Miyato et al. 2018)"),
]


@pytest.mark.parametrize("name", sorted({r[0] for r in ABLATION_ENTMIN}))
def test_ablation_paper_presets_use_the_entmin_of_the_run_series_behind_their_figure(name):
    rows = [r for r in ABLATION_ENTMIN if r[0] == name]
    used = set()
    for t in get_sweep(name, "paper").trials(seeds=1):
        cfg = TrainConfig.from_dict(t)
        hits = [i for i, (_, keys, *_) in enumerate(rows) if all(getattr(cfg, k) == v for k, v in keys.items())]
        assert len(hits) == 1, (name, cfg.method, cfg.vd, cfg.mur, cfg.kl_coef, cfg.mur_radius, hits)
        _, _, want, file, run = rows[hits[0]]
        assert cfg.entmin_coef == want, (name, file, run, cfg.entmin_coef)
        used.add(hits[0])
    assert used == set(range(len(rows))), f"{name}: rows of the table no trial matched"


def prices(root):
    """The price table the study makes from the committed runs under `root` (what sweeper/run_prices.json is
    for the repository's own)."""
    from study import run_prices

    return run_prices.table(root)


def test_a_cost_is_its_committed_runs_wall_time_else_no_committed_run(tmp_path):
    from sweeper import costs

    folder = tmp_path / "docs" / "runs" / "ablation_kl-quick-s0-4"
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"name": "ablation_kl", "preset": "quick", "n_trials": 7}))
    (folder / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "cores": 3, "wall_min": 4.25}))
    lines = costs.cost_lines("ablation_kl", "quick", 35, 0.8, table=prices(tmp_path))
    assert lines == ["committed run of the preset: 4.2 min for 7 trials on Test CPU, 3 cores "
                     "(docs/runs/ablation_kl-quick-s0-4)"]
    assert costs.cost_lines("ablation_kl", "quick", 35, 0.8, changed=True, table=prices(tmp_path))[1] == (
        "this command changes its trials: estimate 35 trials x 0.8 min = 0.5 trial-hours on a 2-core CPU "
        "machine (Sweep.minutes_per_trial, a planning value)")  # no run records its trials' times
    (folder / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "cores": 3, "wall_min": 4.25,
                                                     "trial_min": 4.9}))
    other = tmp_path / "docs" / "runs" / "ablation_kl-quick-s5-9"
    other.mkdir()
    (other / "sweep.json").write_text(json.dumps({"name": "ablation_kl", "preset": "quick", "n_trials": 3}))
    (other / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "cores": 3, "wall_min": 1.0,
                                                    "trial_min": 1.1}))
    assert costs.cost_lines("ablation_kl", "quick", 40, 0.8, changed=True, table=prices(tmp_path))[2] == (
        "this command changes its trials: 40 trials x 0.60 trial-min (its committed runs' trial-min per "
        "trial) = 0.4 trial-hours")  # (4.9 + 1.1) / (7 + 3) = 0.6 a trial; 40 * 0.6 / 60 = 0.4
    # a --seeds auto run: sweep.json plans the first look's 7 trials, trials.csv holds the 9 it ran
    (folder / "trials.csv").write_text('trial_dir,note\n' + "".join(f't{i},"a\nb"\n' for i in range(9)))
    assert costs.cost_lines("ablation_kl", "quick", 35, 0.8, table=prices(tmp_path))[0].startswith(
        "committed run of the preset: 4.2 min for 9 trials on")
    (lines,) = [costs.cost_lines("ablation_kl", "paper", 18, 140, table=prices(tmp_path))]
    assert lines == ["no committed run; estimate 18 trials x 140 min = 42.0 trial-hours on one GPU per trial "
                     "(Sweep.minutes_per_trial, a planning value)"]  # 18 * 140 / 60 = 42


def test_a_changed_command_prices_each_trial_at_its_configurations_own_committed_time(tmp_path):
    """Direct MUR's finished timed trials took 3000 s and 9000 s (100 trial-min on average); PGA's only
    timed trial failed, so PGA falls back to the run's 200 trial-min over its 4 trials (50 a trial).
    Planned: direct, PGA, direct at new seeds = 100 + 50 + 100 = 250 trial-min = 4.2 trial-hours."""
    from sweeper import costs

    folder = tmp_path / "docs" / "runs" / "ablation_mur_steps-quick-s0-1"
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"name": "ablation_mur_steps", "preset": "quick", "n_trials": 4,
                                                   "base": {}, "variants": [{"mur": "direct"}, {"mur": "pga"}]}))
    (folder / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "cores": 2, "wall_min": 100.0,
                                                     "trial_min": 200.0}))
    (folder / "trials.csv").write_text("mur,seed,status,final_test_error,wall_time_s\n"
                                       "direct,0,finished,5.1,3000\ndirect,1,finished,4.9,9000\n"
                                       "pga,0,finished,5.0,\npga,1,failed,,600\n")
    planned = [{"mur": "direct", "seed": 7}, {"mur": "pga", "seed": 7}, {"mur": "direct", "seed": 8}]
    line = costs.cost_lines("ablation_mur_steps", "quick", 3, 0.8, changed=True, table=prices(tmp_path), planned=planned)[1]
    assert line == ("this command changes its trials: 3 trials = 4.2 trial-hours, 2 at their configuration's "
                    "committed trial-min (the mean of its trials' own times), 1 at the committed runs' 50.00 "
                    "trial-min per trial")
    # the seed is no part of a configuration; another radius is another configuration, priced at the rate
    assert costs.config_minutes("ablation_mur_steps", "quick", prices(tmp_path)) == {
        costs.planned_key({"mur": "direct", "seed": 99}): 100.0}
    other = [{"mur": "direct", "mur_radius": 3.0, "seed": 7}]
    assert costs.cost_lines("ablation_mur_steps", "quick", 1, 0.8, changed=True, table=prices(tmp_path),
                            planned=other)[1].startswith("this command changes its trials: 1 trials x 50.00 trial-min")


def _timed_run(root, name, sweep, machine_kernels, rows):
    folder = root / "docs" / "runs" / name
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"name": sweep, "preset": "quick", "n_trials": len(rows),
                                                   "base": {}, "variants": []}))
    (folder / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "cores": 2, "wall_min": 1.0,
                                                     "trial_min": 1.0, "cpu_kernels": machine_kernels}))
    (folder / "trials.csv").write_text("mur,mur_radius,seed,status,final_test_error,wall_time_s,cpu_kernels\n"
                                       + "".join(",".join(map(str, r)) + "\n" for r in rows))


def _runs_on_two_kinds(root):
    """The committed runs of the kernel-price tests (their docstrings give the times and the ratios)."""
    _timed_run(root, "ablation_mur_steps-quick-s0-1", "ablation_mur_steps", "AVX512",
               [("direct", 1.0, 0, "finished", 5, 60, ""), ("direct", 1.0, 1, "finished", 5, 120, ""),
                ("pga", 1.0, 0, "finished", 5, 240, "")])
    _timed_run(root, "ablation_mur_steps-quick-s2-2", "ablation_mur_steps", "AVX2",
               [("direct", 1.0, 2, "finished", 5, 180, "")])
    _timed_run(root, "ablation_radius-quick-s0-0", "ablation_radius", "AVX512",
               [("direct", 2.0, 0, "finished", 5, 60, "")])
    _timed_run(root, "ablation_radius-quick-s1-1", "ablation_radius", "mixed",
               [("direct", 2.0, 1, "finished", 5, 480, "AVX2"), ("direct", 2.0, 2, "finished", 5, 6000, "")])


def test_a_dry_run_prices_a_trial_on_this_machines_cpu_kernels(tmp_path):
    """Direct MUR took 60 s and 120 s on AVX512 (1.5 min) and 180 s on AVX2 (3 min): 2x. In another sweep
    ablation_radius's r = 2 took 60 s on AVX512 and 480 s on AVX2 (its own record in a run of mixed kinds;
    that run's other trial records none and is left out of the ratio): 8x. AVX2 against the others: the
    geometric mean sqrt(2 * 8) = 4 over 2 configurations. PGA ran only on AVX512 (240 s, 4 min), so on AVX2
    it is priced 4 x 4 = 16 min. Planned on AVX2: direct twice (3 min each) and PGA three times:
    6 + 48 = 54 trial-min = 0.9 trial-hours."""
    from sweeper import costs

    _runs_on_two_kinds(tmp_path)
    assert costs.kernel_ratio("quick", "AVX2", prices(tmp_path)) == pytest.approx((4.0, 2))
    assert costs.kernel_ratio("quick", "AVX512", prices(tmp_path)) == pytest.approx((0.25, 2))
    planned = [{"mur": "direct", "seed": s} for s in (7, 8)] + [{"mur": "pga", "seed": s} for s in (7, 8, 9)]
    line = costs.cost_lines("ablation_mur_steps", "quick", 5, 0.8, changed=True, table=prices(tmp_path), planned=planned,
                            kernels="AVX2")[-1]
    assert line == ("this command changes its trials: 5 trials = 0.9 trial-hours, 5 at their configuration's "
                    "committed trial-min (the mean of its trials' own times); on this machine's AVX2 kernels, 2 "
                    "priced on AVX2 and 3 at their configuration's trial-min on other kernels (x 4.00, AVX2 against "
                    "the others over the 2 configurations committed on both)")
    # on AVX512 every planned configuration has its own price there: direct 1.5 and PGA 4, 2 x 1.5 + 4 x 4 = 19 min
    line = costs.cost_lines("ablation_mur_steps", "quick", 6, 0.8, changed=True, table=prices(tmp_path),
                            planned=planned + [{"mur": "pga", "seed": 10}], kernels="AVX512")[-1]
    assert line == ("this command changes its trials: 6 trials = 0.3 trial-hours, 6 at their configuration's "
                    "committed trial-min (the mean of its trials' own times); each on this machine's AVX512 kernels")
    # a kind no configuration ran on: every kind's times, unscaled and said so: direct (60 + 120 + 180) / 3 s
    # = 2 min, PGA 4 min, 2 x 2 + 3 x 4 = 16 min
    line = costs.cost_lines("ablation_mur_steps", "quick", 5, 0.8, changed=True, table=prices(tmp_path), planned=planned,
                            kernels="NEON")[-1]
    assert "(unscaled: no configuration is committed on both NEON and another kind)" in line
    assert "5 trials = 0.3 trial-hours" in line and "0 priced on NEON and 5 at" in line


def test_a_dry_run_of_the_presets_own_trials_prices_them_on_this_machines_kernels(tmp_path):
    """The committed runs' wall times are their machines' (each line names its kernels); the command that
    changes nothing gets its trials priced on this machine's kernels too, the same prices as a changed one:
    the runs of test_a_dry_run_prices_a_trial_on_this_machines_cpu_kernels: its 5 planned trials, 54 trial-min
    on AVX2 (x 4 for PGA, committed on AVX512 only) and 2 x 1.5 + 3 x 4 = 15 on AVX512, where every
    configuration has its own mean and the line says so."""
    from sweeper import costs

    _runs_on_two_kinds(tmp_path)
    planned = [{"mur": "direct", "seed": s} for s in (7, 8)] + [{"mur": "pga", "seed": s} for s in (7, 8, 9)]
    lines = costs.cost_lines("ablation_mur_steps", "quick", 5, 0.8, table=prices(tmp_path), planned=planned, kernels="AVX2")
    assert lines[0] == ("committed run of the preset: 1.0 min for 3 trials on Test CPU, 2 cores, AVX512 kernels "
                        "(docs/runs/ablation_mur_steps-quick-s0-1)")
    assert lines[2] == ("its trials on this machine: 5 trials = 0.9 trial-hours, 5 at their configuration's "
                        "committed trial-min (the mean of its trials' own times); on this machine's AVX2 kernels, 2 "
                        "priced on AVX2 and 3 at their configuration's trial-min on other kernels (x 4.00, AVX2 "
                        "against the others over the 2 configurations committed on both)")
    line = costs.cost_lines("ablation_mur_steps", "quick", 5, 0.8, table=prices(tmp_path), planned=planned,
                            kernels="AVX512")[-1]  # 2 x 1.5 + 3 x 4 = 15 trial-min
    assert line == ("its trials on this machine: 5 trials = 0.2 trial-hours, 5 at their configuration's committed "
                    "trial-min (the mean of its trials' own times); each on this machine's AVX512 kernels")
    # without this machine's kernels (a paper preset, trained on a GPU) the committed runs alone
    assert len(costs.cost_lines("ablation_mur_steps", "quick", 5, 0.8, table=prices(tmp_path), planned=planned)) == 2


def test_list_and_dry_run_show_the_committed_runs_wall_time(capsys):
    root = Path(__file__).resolve().parent.parent
    walls = {p.parent.name: json.loads(p.read_text())["wall_min"]
             for p in (root / "docs" / "runs").glob("ablation_radius-quick-*/machine.json")}
    assert walls, "the quick start's run is committed"
    rows = {r["name"]: r for r in sweep_list.rows()}
    assert {r["name"]: r["wall_min"] for r in rows["ablation_radius"]["quick_runs"]} == walls
    assert run_main(["ablation_radius", "--preset", "quick", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for name, wall in walls.items():
        # the trials it ran: trials.csv's rows (a --seeds auto run's sweep.json counts only its first look)
        n = len((root / "docs" / "runs" / name / "trials.csv").read_text().strip().splitlines()) - 1
        assert f"cost: committed run of the preset: {wall:.1f} min for {n} trials" in out and name in out


def _cell_keys(sweep, keys):
    return sorted(tuple(TrainConfig.from_dict({**sweep.base, **v}).to_dict()[k] for k in keys) for v in sweep.variants)


def test_cells_keeps_the_matching_cells_and_the_cell_they_are_compared_with():
    from sweeper.driver.preflight import select_cells

    full = get_sweep("ablation_mur_steps", "quick")
    cut = select_cells(full, ["mur_step_size=0.1"])
    keys = ("method", "mur", "mur_steps", "mur_step_size")
    # GA at (0.1, 2) and (0.1, 5), PGA at (0.1, 2), and their baseline, direct MUR; not LabelSpreading
    assert _cell_keys(cut, keys) == [("mt", "direct", 1, 1.0), ("mt", "ga", 2, 0.1), ("mt", "ga", 5, 0.1),
                                     ("mt", "pga", 2, 0.1)]
    two = select_cells(full, ["mur_step_size=0.1", "mur_steps=2"])  # every KEY=VALUE must hold
    assert _cell_keys(two, keys) == [("mt", "direct", 1, 1.0), ("mt", "ga", 2, 0.1), ("mt", "pga", 2, 0.1)]
    # a grid sweep: its grid points become variants; the trials are the full sweep's own, cut
    radius = get_sweep("ablation_radius", "quick")
    cut = select_cells(radius, ["mur_radius=4"])
    assert cut.grid == {}
    kept = [t for t in radius.trials() if any(all(t.get(k) == v for k, v in c.items()) for c in cut.variants)]
    assert sorted(map(json.dumps, cut.trials())) == sorted(map(json.dumps, [
        {**t} for t in kept if TrainConfig.from_dict(t).mur == "none" or t["mur_radius"] == 4]))


def test_cells_alternatives_admit_two_cells_without_their_combination():
    """Pi + VD against Pi + MUR: "|" joins alternatives, "," the pairs of one; neither Pi + VD + MUR nor
    LabelSpreading is trained, the Pi baseline is. The same cells as two single-cell cuts, merged."""
    from sweeper.driver.preflight import select_cells

    full = get_sweep("table_svhn", "quick")
    keys = ("method", "vd", "mur")
    both = _cell_keys(select_cells(full, ["vd=true,mur=none|vd=false,mur=direct"]), keys)
    assert both == [("pi", False, "direct"), ("pi", False, "none"), ("pi", True, "none")]
    singles = {k for s in (["vd=true", "mur=none"], ["vd=false", "mur=direct"])
               for k in _cell_keys(select_cells(full, s), keys)}
    assert both == sorted(singles)
    # specs still AND together: the second keeps only the VD alternative's cell (and its baseline)
    assert _cell_keys(select_cells(full, ["vd=true,mur=none|vd=false,mur=direct", "vd=true"]), keys) == \
        [("pi", False, "none"), ("pi", True, "none")]


def test_cells_only_trains_the_named_cells_and_not_the_cell_they_are_compared_with(capsys):
    """Pi + VD against Pi + MUR on fixed seeds needs no Pi: --cells-only leaves the baseline out, the
    named cells' trials are the full cut's own (same configs and seeds), and the dry run counts them."""
    from sweeper.driver.preflight import select_cells

    full = get_sweep("table_svhn", "quick")
    spec = ["vd=true,mur=none|vd=false,mur=direct"]
    only, cut = select_cells(full, spec, compared=False), select_cells(full, spec)
    assert _cell_keys(only, ("method", "vd", "mur")) == [("pi", False, "direct"), ("pi", True, "none")]
    named = [t for t in cut.trials()
             if (TrainConfig.from_dict(t).vd, TrainConfig.from_dict(t).mur) in {(True, "none"), (False, "direct")}]
    assert sorted(map(json.dumps, only.trials())) == sorted(map(json.dumps, named)) and named
    assert run_main(["table_svhn", "--preset", "quick", "--dry-run", "--cells", spec[0], "--cells-only",
                     "--seeds", "3", "--seed-start", "146"]) == 0
    out = capsys.readouterr().out
    assert "6 trials = 2 configs x 3 seeds" in out


@pytest.mark.parametrize("extra, msg", [([], "add --cells"),
                                        (["--cells", "vd=true", "--seeds", "auto"], "--seeds auto")])
def test_cells_only_refuses_what_it_cannot_serve_in_one_line(extra, msg, capsys):
    assert run_main(["table_svhn", "--preset", "quick", "--dry-run", "--cells-only", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err


def test_cells_keeps_the_row_baseline_for_names_for_a_cell_of_another_method():
    """VAT alone is compared with MUT (Sweep.baseline_for), a row of another method than its own: --cells
    method=vat trains both, the pair the tables grade."""
    from sweeper.driver.preflight import select_cells

    cut = select_cells(get_sweep("mur_vs_vat", "quick"), ["method=vat"])
    assert _cell_keys(cut, ("method", "mur")) == [("mut", "direct"), ("vat", "none")]


@pytest.mark.parametrize("specs, msg", [(["foo=1"], "--cells: unknown key(s) ['foo']"), (["mur_step_size=7"], "no cell"),
                                        (["mur_step_size"], "give KEY=VALUE"),
                                        (["mur_steps=2|mur_step_size"], "give KEY=VALUE"),
                                        (["mur_steps=2,=1"], "give KEY=VALUE")])
def test_cells_refuses_what_selects_nothing_in_one_line(specs, msg, capsys):
    assert run_main(["ablation_mur_steps", "--preset", "quick", "--dry-run", *sum((["--cells", s] for s in specs), [])]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err


def _needs_files(name: str, preset: str) -> bool:
    return any(t["dataset"] != "digits" for t in get_sweep(name, preset).trials())


@pytest.mark.parametrize("name, preset", [(n, p) for n in names() for p in presets(n) if _needs_files(n, p)])
def test_a_dry_run_plans_every_sweep_and_preset_before_the_data_exists(name, preset, tmp_path, capsys, monkeypatch):
    """No data on disk: the grid and its cost, then one line per data set the sweep needs, exit 0; with
    download=true nothing is fetched (the folder stays empty). (The presets on digits read no files.)"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    argv = [name, "--preset", preset, "--dry-run", "--set", "download=true"] if preset == "paper" else \
        [name, "--preset", preset, "--dry-run"]
    assert run_main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    needed = {t["dataset"] for t in get_sweep(name, preset).trials()} - {"digits"}
    lines = [ln for ln in out.splitlines() if ln.startswith("data: ")]
    assert " trials = " in out and "cost: " in out and sorted(ln.split(":")[1].strip() for ln in lines) == sorted(needed)
    if preset == "paper" and not get_sweep(name, preset).search:  # a GPU preset: priced on a kind, on N GPUs
        assert "resources per trial: 1 CPU, 1 GPU" in out and "GPU-hours on " in out and "longest first" in out
    assert all("the run downloads it" in ln for ln in lines) if preset == "paper" else \
        all("create it" in ln or "missing in" in ln for ln in lines)
    assert list((tmp_path / "data").iterdir()) == [] and not (tmp_path / "results").exists()
