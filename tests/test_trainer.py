"""The training loop: exact restore, divergence, and a short digits run that learns."""
import math

import pytest
import torch

from search_spaces.common import QUICK
from trainables.config import TrainConfig
from trainables.data import load_dataset
from trainables.trainer import Diverged, Trainer, train


def digits():
    return load_dataset("digits")


def _cfg(**kw):
    base = dict(QUICK, steps=24, eval_every=8, lr_rampup=4, lr_rampdown=8, rampup=8,
                sensitivity_samples=16, batch_labeled=10, batch_unlabeled=30)
    return TrainConfig(**{**base, **kw})


def _params(tr):
    nets = [tr.student] + ([tr.teacher] if tr.teacher is not None else [])
    return torch.cat([t.flatten().float() for n in nets for t in n.state_dict().values()])


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(method="mt", vd=True, mur="direct", entmin_coef=0.1),
                                dict(method="ict", mur="random"),
                                dict(method="pi", mur="pga", mur_steps=2)],
                         ids=["mt-vd-mur", "ict-rr", "pi-pga"])
def test_restore_then_continue_equals_uninterrupted(tmp_path, digits, kw):
    cfg = _cfg(**kw)
    a = Trainer(cfg, digits)
    outs_a = [a.run_interval() for _ in range(3)]

    b = Trainer(cfg, digits)
    b.run_interval()
    b.save(tmp_path / "ckpt.pt")
    torch.manual_seed(1234)  # a restarted process has other RNG state: the checkpoint must restore it
    c = Trainer(cfg, digits)
    c.load(tmp_path / "ckpt.pt")
    outs_c = [c.run_interval() for _ in range(2)]
    assert c.done and c.step == a.step == cfg.steps
    assert torch.equal(_params(a), _params(c))
    for k in ("test_error", "test_error_student", "loss_total", "loss_mur", "sensitivity_mean"):
        va, vc = outs_a[-1][k], outs_c[-1][k]
        assert (math.isnan(va) and math.isnan(vc)) or va == vc, k
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # atomic write left no temp file


def test_checkpoint_of_another_config_is_refused(tmp_path, digits):
    a = Trainer(_cfg(), digits)
    a.save(tmp_path / "c.pt")
    b = Trainer(_cfg(mur_radius=2.0), digits)
    with pytest.raises(ValueError, match="mur_radius"):
        b.load(tmp_path / "c.pt")


def test_divergence_stops_at_once_with_step_and_term(digits):
    cfg = _cfg(lr=1e12, lr_rampup=0, method="supervised", nan_check_every=1)  # checked before each update
    tr = Trainer(cfg, digits)
    with pytest.raises(Diverged) as e:
        for _ in range(cfg.steps):
            tr.train_step()
    assert e.value.term in ("xent", "total") and e.value.step == tr.step < cfg.steps
    out = train(cfg, digits, log=None)
    assert out["diverged"] == 1 and out["diverged_step"] == e.value.step and math.isnan(out["test_error"])


def test_supervised_without_unlabeled_data(digits):
    out = train(_cfg(method="supervised", batch_unlabeled=0, steps=8), digits, log=None)
    assert out["step"] == 8 and math.isnan(out["test_error_teacher"]) and 0 <= out["test_error"] <= 100


@pytest.mark.slow
def test_digits_mt_vd_mur_learns(digits):
    """A short MT+VD+MUR run on the real digits: error far below chance (90%). A fifth of the quick preset's
    1000 steps, its schedules scaled with them: one evaluation, at the end."""
    torch.set_num_threads(1)
    short = dict(steps=200, lr_rampup=20, lr_rampdown=50, rampup=40, eval_every=200, sensitivity_samples=20)
    out = train(TrainConfig(**{**QUICK, "method": "mt", "vd": True, "mur": "direct", "entmin_coef": 0.1, **short}),
                digits, log=None)
    assert out["test_error"] < 30, out
    assert out["loss_mur"] > 0 and out["loss_kl"] > 0 and 0 <= out["sparsity"] <= 1


def test_best_val_selection_agrees_with_the_aggregator_across_a_restore(tmp_path, digits):
    """The trainer's running test_error_at_best_val (kept in its checkpoint) and sweeper.analysis.aggregate's
    bestval_test_error (recomputed from the reports) are two implementations of one rule: they agree."""
    from sweeper.analysis.aggregate import bestval_metrics
    cfg = _cfg(steps=48, eval_every=8)
    a = Trainer(cfg, digits)
    outs = [a.run_interval() for _ in range(3)]
    a.save(tmp_path / "ckpt.pt")
    b = Trainer(cfg, digits)
    b.load(tmp_path / "ckpt.pt")
    outs += [b.run_interval() for _ in range(3)]
    assert b.done and len({o["val_error"] for o in outs}) > 1  # the selection has something to choose
    best = bestval_metrics(outs)
    assert outs[-1]["best_val_error"] == min(o["val_error"] for o in outs)
    assert outs[-1]["test_error_at_best_val"] == best["bestval_test_error"]


def test_bn_clean_pass_updates_bn_statistics_once_more_on_the_unaugmented_batch_only(digits):
    """bn_clean_pass (the authors' non-VD MT): one more student pass per step, on the batch before
    augmentation, whose only effect is a second momentum update of every BN running statistic; the
    parameters after the step are those of a run without it."""
    cfg = _cfg(method="mt", translate=2, bn_momentum=0.1)
    runs = {}
    for on in (False, True):
        torch.manual_seed(0)
        tr = Trainer(cfg.replace(bn_clean_pass=on), digits)
        bn = next(m for m in tr.student.modules() if isinstance(m, torch.nn.BatchNorm2d))
        seen = {"inputs": [], "bn_means": []}
        h1 = tr.student.register_forward_pre_hook(lambda m, a: seen["inputs"].append(a[0].detach().clone()))
        h2 = bn.register_forward_pre_hook(lambda m, a: seen["bn_means"].append(a[0].detach().mean((0, 2, 3))))
        before = bn.running_mean.clone()
        tr.train_step()
        h1.remove(), h2.remove()
        expected = before
        for mu in seen["bn_means"]:  # PyTorch's running update, once per train-mode pass
            expected = (1 - 0.1) * expected + 0.1 * mu
        assert torch.allclose(bn.running_mean, expected, atol=1e-6)
        runs[on] = (tr, seen)
    off, on = runs[False][1], runs[True][1]
    assert len(off["inputs"]) == 1 and len(on["inputs"]) == 2
    x_train = digits.x_train.flatten(1)                                    # (N, 64)
    clean, augmented = on["inputs"][1].flatten(1), on["inputs"][0].flatten(1)
    is_train_row = lambda x: (x[:, None] == x_train[None]).all(-1).any(1)  # (B,) an exact training image
    assert is_train_row(clean).all() and not is_train_row(augmented).all()
    params = lambda tr: torch.cat([p.detach().flatten() for p in tr.student.parameters()])
    assert torch.equal(params(runs[False][0]), params(runs[True][0]))     # no gradient from the extra pass
    bn_var = lambda tr: next(m for m in tr.student.modules() if isinstance(m, torch.nn.BatchNorm2d)).running_var
    assert not torch.equal(bn_var(runs[False][0]), bn_var(runs[True][0]))  # the statistics did change


def test_trainer_cli_refuses_bad_input_in_one_line_before_any_work(tmp_path, capsys):
    """A schedule longer than the run and a missing data folder: exit 2, one line naming the fix."""
    from trainables.trainer import main

    for argv, want in [(["--steps", "100"], "error: lr_rampdown=150 is longer than steps=100; lower lr_rampdown "
                                            "or raise steps"),
                       (["--dataset", "cifar10", "--data-dir", str(tmp_path / "none")],
                        f"error: data folder {tmp_path / 'none'} does not exist; create it and put the cifar10 "
                        f"files in it, or pass --set download=true (trainer: --download) to fetch them there")]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert capsys.readouterr().err.strip() == want
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("kw", [dict(mur="direct"), dict(vd=True, mur="direct", entmin_coef=0.1)], ids=["mt-mur", "mt-vd-mur"])
def test_channels_last_on_the_cpu_changes_the_layout_not_the_maths(digits, kw):
    """channels_last=True (the quick preset) runs the same network, draws and updates as NCHW: the
    student's weights are channels_last, and the first steps' loss terms agree to float32 rounding
    (only the order of the convolutions' and BatchNorm's sums differs). Each Trainer runs alone: both
    draw from the global generator, which Trainer() seeds."""
    losses = {}
    for cl in (False, True):
        tr = Trainer(_cfg(method="mt", channels_last=cl, **kw), digits)
        w = tr.student.layers[1].theta if kw.get("vd") else tr.student.layers[1].weight  # (32, 1, 3, 3)
        assert w.stride() == ((9, 1, 3, 1) if cl else (9, 9, 3, 1))
        losses[cl] = [{k: t.detach() for k, t in tr.train_step().items()} for _ in range(3)]
    for a, b in zip(losses[False], losses[True]):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


def test_label_seed_fixes_the_labeled_subset_across_seeds_and_seed_draws_it_otherwise(digits):
    from trainables.trainer import splits

    y = digits.y_train
    per_seed = [splits(_cfg(seed=s), y)[0] for s in (0, 1)]
    fixed = [splits(_cfg(seed=s, label_seed=1003), y)[0] for s in (0, 1)]
    assert not torch.equal(*per_seed)  # label_seed=-1 (default): a new subset per seed
    assert torch.equal(*fixed)         # fixed: one subset whatever the seed
    assert torch.equal(fixed[0], splits(_cfg(seed=1003), y)[0])  # the subset seed 1003 draws
    assert not torch.equal(fixed[0], per_seed[0])
    # training randomness still follows seed: the first batches differ
    a, b = (Trainer(_cfg(seed=s, label_seed=1003), digits) for s in (0, 1))
    assert torch.equal(a.idx_l, b.idx_l) and not torch.equal(a.batcher.next()[0], b.batcher.next()[0])
    with pytest.raises(ValueError, match="label_seed"):
        _cfg(label_seed=-2)


def test_trainer_fits_the_preprocessing_outside_its_validation_split():
    cfg = _cfg()  # val_size=-1: digits holds 300 images out
    assert cfg.n_val == 300
    assert torch.equal(Trainer(cfg).data.x_test, load_dataset("digits", n_val=300).x_test)
    assert torch.equal(Trainer(_cfg(val_size=0)).data.x_test, load_dataset("digits", n_val=0).x_test)
