"""Compiled training steps (TrainConfig.compile) and the deferred NaN check (nan_check_every).

    python -m pytest -q tests/test_compile.py            # the compile tests are marked slow (tens of s each)

Compile equivalence runs an eager and a compiled Trainer in lockstep (each with its own copy of the
global RNG state) with inductor's fallback_random=True and layout_optimization=False, so that the
compiled graph draws eager's Gaussian and VD noise in eager's element order; then every loss term,
gradient and BN buffer must agree to float32 rounding. Measured (torch 2.14, CPU, 4 steps): loss
terms within 5e-7 absolute, gradients within 2.4e-6 relative L2 error per parameter tensor, BN
buffers within 2.4e-7. Inductor fuses and reorders float32 reductions (BN statistics, softmax and
KL sums) and a few ulp per op compound over the steps; the tolerances below (1e-5 relative on the
terms, and near 0 the rounding bound of their passes, tests/conftest.py; 1e-4 on the gradients, 1e-5 on the buffers) leave a 20-50x margin above that and stay orders of
magnitude below a real bug (a missing or doubled term, a wrong BN update, a different noise draw:
all >= 1e-3, measured 0.1-1.0 when the two runs' RNG streams differ).
"""
import math

import pytest
from conftest import reduction_length, rounding_tol
import torch

import trainables.trainer as trainer_mod
from search_spaces.common import QUICK
from trainables.config import ConfigError, TrainConfig
from trainables.data import load_dataset
from trainables.methods import loss_terms
from trainables.models import build_model
from trainables.trainer import Diverged, Trainer, train

MT_VD_MUR = dict(method="mt", vd=True, mur="direct", entmin_coef=0.1)


def digits():
    return load_dataset("digits")


def _cfg(**kw):
    base = dict(QUICK, **MT_VD_MUR, steps=24, eval_every=24, lr_rampup=4, lr_rampdown=8, rampup=8,
                sensitivity_samples=16, batch_labeled=10, batch_unlabeled=30)
    return TrainConfig(**{**base, **kw})


# --- config ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, msg", [(dict(compile="full"), "unknown compile 'full'; choose one of"),
                                     (dict(nan_check_every=0), "nan_check_every must be >= 1"),
                                     (dict(compile="graphs", mur="pga", mur_steps=5), "compile='graphs' fails for"),
                                     (dict(compile="graphs", method="fixmatch", mur="direct"), "compile='graphs' fails")])
def test_config_rejects_bad_values_in_one_line(kw, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        TrainConfig(**kw)
    assert "\n" not in str(e.value)
    assert TrainConfig().compile == "none"  # eager by default
    TrainConfig(compile="graphs", mur="pga", mur_steps=1)  # one PGA step uses the main pass's gradient: no break


# --- the NaN check every nan_check_every steps (eager: it does not depend on compile) ---------------

def _poison(monkeypatch, bad: dict[int, dict[str, float]]):
    """Make loss_terms return bad[step][term] (NaN, inf) in place of those terms at those steps."""
    calls = []

    def poisoned(cfg, student, teacher, v, gen):
        terms, g0_norm = loss_terms(cfg, student, teacher, v, gen)
        for k, value in bad.get(len(calls), {}).items():
            terms[k] = terms[k] + value  # still on the graph: backward runs as on a real NaN
        calls.append(1)
        return terms, g0_norm

    monkeypatch.setattr(trainer_mod, "loss_terms", poisoned)  # compile_for_training("none") returns it


def _steps_until_diverged(tr):
    with pytest.raises(Diverged) as e:
        while not tr.done:
            tr.train_step()
    return e.value


@pytest.mark.parametrize("every, stops_at", [(1, 7), (5, 9), (10, 9), (40, 24)])
def test_nan_check_finds_the_first_bad_step_and_term(monkeypatch, digits, every, stops_at):
    """Bad step 7 (not a multiple of 5): found at the next check (after the steps 5..9 of every=5,
    0..9 of every=10; every=40 > steps: the interval's end), reported as step 7 either way."""
    _poison(monkeypatch, {7: {"cons": math.nan}, 8: {"xent": math.inf}})
    tr = Trainer(_cfg(nan_check_every=every), digits)
    if every <= 10:
        e = _steps_until_diverged(tr)
    else:
        with pytest.raises(Diverged) as info:
            tr.run_interval()  # 24 steps, then the check before the evaluation
        e = info.value
    assert (e.step, e.term) == (7, "cons") and math.isnan(e.value)
    assert tr.step == stops_at  # every=1: before step 7's update; else steps after 7 were taken


@pytest.mark.parametrize("bad, want", [({6: {"mur": math.inf}, 7: {"xent": math.nan}}, (6, "mur", math.inf)),
                                       ({6: {"mur": math.inf, "cons": math.nan}}, (6, "cons", math.nan)),
                                       ({6: {"cons": -math.inf}}, (6, "cons", -math.inf))])
def test_nan_check_reports_the_first_step_then_the_first_term(monkeypatch, digits, bad, want):
    _poison(monkeypatch, bad)
    e = _steps_until_diverged(Trainer(_cfg(nan_check_every=5), digits))
    assert (e.step, e.term) == want[:2]
    assert (math.isnan(e.value) and math.isnan(want[2])) or e.value == want[2]


def test_diverged_run_is_checked_before_evaluation_and_never_saved(monkeypatch, digits, tmp_path):
    _poison(monkeypatch, {6: {"mur": math.nan}})
    cfg = _cfg(nan_check_every=5, eval_every=8)
    tr = Trainer(cfg, digits)
    for _ in range(8):  # steps 5, 6, 7 are queued, not yet checked
        tr.train_step()
    with pytest.raises(Diverged, match="step 6: loss term 'mur'"):
        tr.save(tmp_path / "ckpt.pt")
    assert list(tmp_path.iterdir()) == []
    _poison(monkeypatch, {6: {"mur": math.nan}})  # counts the new run's steps from 0
    out = train(cfg, digits, log=None)  # the whole loop: marked diverged at the exact step and term
    assert (out["diverged"], out["diverged_step"], out["diverged_term"]) == (1, 6, "mur")


def test_real_divergence_reports_the_same_step_and_term_at_every_schedule(digits):
    def first_bad(every):
        cfg = _cfg(method="supervised", vd=False, mur="none", entmin_coef=0.0, lr=1e12, lr_rampup=0,
                   nan_check_every=every)
        return _steps_until_diverged(Trainer(cfg, digits))

    a, b = first_bad(1), first_bad(5)
    assert (a.step, a.term) == (b.step, b.term) and a.step < 24
    assert str(a) == str(b)  # same value too


def test_eager_reports_zero_compile_time(digits):
    out = Trainer(_cfg(steps=8, eval_every=8, lr_rampdown=4), digits).run_interval()
    assert out["compile_s"] == 0.0 and out["diverged"] == 0 and out["compile_mode"] == "none"


def _grads(tr):
    return {n: p.grad.detach().clone() for n, p in tr.student.named_parameters()}


# unique dynamo graphs for MT+VD+MUR direct: step = one graph when autograd.grad is traced (else it
# breaks at each of its two calls: 3); model = the student's main pass (input requires grad), its x*
# pass, the teacher's mean-weight pass
GRAPHS = {"model": 3, "step": 1 if hasattr(torch._dynamo.config, "trace_autograd_ops") else 3}
GRAPHS["graphs"] = GRAPHS["step"]  # the same dynamo graph; on CUDA recorded and replayed


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _rng_state(cuda: bool):
    return (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)


def _set_rng_state(state):
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1])


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("mode", ["model", "step", "graphs"])
def test_compiled_step_matches_eager(digits, mode, device):
    """MT+VD+MUR on digits, 3 steps (graphs: 4) in lockstep: the same loss terms, gradients and BN statistics
    (on CUDA too where there is one: inductor's Triton code there, its C++ code on the CPU)."""
    cfg, cuda = _cfg(device=device), device == "cuda"
    # on CUDA, full fp32 convolutions and matmuls on both sides: with TF32 (cuDNN's default) a few ulp of
    # fused-BN rounding can flip a TF32 rounding, and the test would measure that rather than the compiler
    tf32 = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        _lockstep(cfg, mode, digits, cuda)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32


def _lockstep(cfg, mode, digits, cuda):
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    with inductor_config.patch(fallback_random=True, layout_optimization=False):
        eager = Trainer(cfg, digits)
        comp = Trainer(cfg.replace(compile=mode), digits)
        counters.clear()
        rng = {"eager": _rng_state(cuda), "comp": _rng_state(cuda)}  # one global RNG, two runs
        for step in range(4 if mode == "graphs" else 3):  # graphs: warm-up, record, then two replays
            out = {}
            for name, tr in (("eager", eager), ("comp", comp)):
                _set_rng_state(rng[name])
                out[name] = tr.train_step()
                rng[name] = _rng_state(cuda)
            te, tc = out["eager"], out["comp"]
            assert list(te) == list(tc) == ["xent", "cons", "kl", "entmin", "mur"]
            # a term near 0 (cons, mur between nearly equal outputs) has no relative scale: its absolute
            # error is that of the passes it comes from (forward, and MUR's backward to x*), over the
            # batch's rows, of probabilities (at most 1), compounding with every step taken so far
            n = (step + 1) * (2 * reduction_length(eager.student) + cfg.batch_labeled + cfg.batch_unlabeled)
            for k in te:
                torch.testing.assert_close(tc[k], te[k], rtol=1e-5, atol=rounding_tol(1.0, n), msg=f"step {step} term {k}")
            ge, gc = _grads(eager), _grads(comp)
            for n in ge:
                err = float((gc[n] - ge[n]).norm() / ge[n].norm())
                assert err < 1e-4, f"step {step} grad {n}: relative error {err:.2e}"
            for (n, be), bc in zip(eager.student.named_buffers(), comp.student.buffers()):
                torch.testing.assert_close(bc.float(), be.float(), rtol=1e-5, atol=1e-5, msg=f"step {step} {n}")
    assert counters["stats"]["unique_graphs"] == GRAPHS[mode]  # compiled, not a silent eager fallback
    if mode in ("step", "graphs") and GRAPHS["step"] == 1:  # and no break: not even before an empty first piece
        assert not counters["graph_break"], dict(counters["graph_break"])
    if mode == "graphs" and cuda:  # recorded and replayed, not skipped (a mutated input, a CPU tensor)
        assert not counters["inductor"]["cudagraph_skips"], "inductor skipped CUDA graphs: see its log"
    assert comp.compile_s > 0


@pytest.mark.slow
# MT + VD in both modes: VD's and the input noise's draws are the RNG a restore must resume; MUR adds no state
# and no draw, and its compiled step is the lockstep test's (a second cold compile of it would only cost time)
@pytest.mark.parametrize("mode", ["model", "step"], ids=["model-mt-vd", "step-mt-vd"])
def test_compiled_checkpoint_restores_exactly(tmp_path, digits, mode):
    """State dicts of the plain modules (no "_orig_mod." prefix); restore then continue is bit-for-bit
    the uninterrupted compiled run (inductor's own RNG draws are seeded from the restored global RNG)."""
    cfg = _cfg(compile=mode, steps=8, eval_every=4, lr_rampdown=4, mur="none")
    a = Trainer(cfg, digits)
    out1 = a.run_interval()
    a.save(tmp_path / "ckpt.pt")
    out2 = a.run_interval()
    assert out1["compile_s"] > 0 and out2["compile_s"] == out1["compile_s"]

    saved = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    plain = build_model(cfg)
    for net in ("student", "teacher"):
        assert not any("_orig_mod" in k for k in saved[net])
        plain.load_state_dict(saved[net])  # strict: the keys of an uncompiled network

    torch.manual_seed(1234)  # another process's RNG state: the checkpoint must restore it
    c = Trainer(cfg, digits)  # compiles again (dynamo's caches were reset)
    c.load(tmp_path / "ckpt.pt")
    out_c = c.run_interval()
    assert c.step == a.step == cfg.steps
    for net in ("student", "teacher"):
        sa, sc = getattr(a, net).state_dict(), getattr(c, net).state_dict()
        assert list(sa) == list(sc) and all(torch.equal(sa[k], sc[k]) for k in sa), net
    for k in ("loss_total", "loss_mur", "loss_kl", "test_error", "sensitivity_mean"):
        assert (math.isnan(out2[k]) and math.isnan(out_c[k])) or out2[k] == out_c[k], k


def test_bf16_autocast_runs_on_the_cpu_too(digits):
    """bf16=True engages autocast on the CPU (the precision sweep's quick preset): the same step's losses
    move by bf16 rounding, not more; bf16=False is untouched (the bit-for-bit tests above)."""
    out = {}
    for bf16 in (False, True):
        torch.manual_seed(0)  # the same draws for both: only the arithmetic's precision differs
        tr = Trainer(_cfg(bf16=bf16, steps=8, eval_every=8, lr_rampdown=4), digits)
        out[bf16] = {k: float(t.detach()) for k, t in tr.train_step().items()}
    assert out[True] != out[False]  # autocast engaged
    for k in ("xent", "cons", "mur"):  # bf16 keeps 8 bits of mantissa: ~0.4 % per rounding
        assert out[True][k] == pytest.approx(out[False][k], rel=0.05, abs=1e-3), k
