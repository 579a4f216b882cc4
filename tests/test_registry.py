"""The method registry (trainables/registry/): every method the config accepts is declared once, and the
config, trainer, loss terms, labels, paper values and search spaces read it instead of a method's name.

    pytest tests/test_registry.py -q
"""
import ast
from pathlib import Path

import pytest
import torch

from sweeper.analysis.labels import METHOD_NAMES, ORDER
from sweeper.analysis.paper_results import RESULTS
from trainables import registry
from trainables.config import METHOD_KEYS, METHODS, ConfigError, TrainConfig, applies
from trainables.data import load_dataset
from trainables.registry.method import VIEWS, Method
from trainables.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("supervised", "pi", "mt", "ict", "mut", "fixmatch", "vat", "uda", "labelspreading")


def test_every_method_the_config_accepts_is_declared_once():
    assert set(METHODS) == set(registry.METHODS) == set(NAMES)
    declared = [v for mod in registry.MODULES for v in vars(mod).values() if isinstance(v, Method)]
    assert sorted(m.name for m in declared) == sorted(NAMES)  # no name twice
    for name in NAMES:
        TrainConfig(method=name, **({"mur": "direct"} if name == "mut" else {}))
    with pytest.raises(ConfigError, match="unknown method 'meanteacher'"):
        TrainConfig(method="meanteacher")
    with pytest.raises(ValueError, match="unknown method 'x'; choose one of"):
        registry.get("x")


def test_a_bad_declaration_is_refused():
    with pytest.raises(ValueError, match="field .* must be"):  # a field must be among its keys
        Method("m", label="M", order=9, fields=(("m_alpha", float, 1.0, "its alpha"),))
    with pytest.raises(ValueError, match="field .* must be"):  # and its default of its type
        Method("m", label="M", order=9, keys=("m_alpha",), fields=(("m_alpha", float, 1, "its alpha"),))
    with pytest.raises(ValueError, match="unknown views"):
        Method("m", label="M", order=9, views=("weak",))


def test_labels_and_order_come_from_the_registry():
    assert METHOD_NAMES == {"supervised": "Supervised", "pi": "Π", "mt": "MT", "ict": "ICT", "mut": "MUT",
                            "fixmatch": "FM", "vat": "VAT", "uda": "UDA", "labelspreading": "LabelSpreading"}
    assert ORDER["method"] == ("supervised", "labelspreading", "pi", "mt", "ict", "mut", "fixmatch", "vat", "uda")
    assert len({m.order for m in registry.METHODS.values()}) == len(NAMES)


def test_paper_names_are_the_methods_the_paper_reports():
    """A method has a paper name exactly where the paper holds a row of the authors' runs of it."""
    reported = {r.method for r in RESULTS if r.is_ours}
    assert {m.name for m in registry.METHODS.values() if m.paper_name} == reported
    for r in RESULTS:
        if r.is_ours:  # the row's label starts with the method's paper name ("Pi + VD")
            assert r.model.startswith(registry.get(r.method).paper_name), r


@pytest.mark.parametrize("name", NAMES)
def test_applies_follows_the_declared_keys(name):
    spec = registry.get(name)
    cfg = {**TrainConfig(method=name, **({"mur": "direct"} if name == "mut" else {})).to_dict(), "mur": "none"}
    if not spec.network:
        assert [k for k in cfg if applies(k, cfg)] == ["method", "vd", "mur", *[k for k in cfg if k in spec.keys]]
        return
    for key in METHOD_KEYS - {"mur_radius", "mur_steps", "vat_xi"}:  # those also follow a MUR point
        assert applies(key, cfg) == (key in spec.keys), key
    assert applies("cons_coef", cfg) == (spec.loss is not None)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", "./data", False, device="cpu", n_val=300)


@pytest.mark.parametrize("name", [n for n in NAMES if registry.get(n).network])
def test_trainer_follows_the_declaration(name, digits):
    """A teacher where declared, the EMA before or after SGD as declared, the views the method reads, and
    the loss terms: cons only with a consistency term."""
    spec = registry.get(name)
    cfg = TrainConfig(method=name, steps=2, eval_every=2, rampup=0, lr_rampup=0, lr_rampdown=0, device="cpu",
                      mur="direct" if name == "mut" else "none")
    tr = Trainer(cfg, digits)
    assert (tr.teacher is not None) == spec.teacher
    v = tr._views()
    assert (v.xs is not None) == ("strong" in spec.views) and (v.x0 is not None) == ("x0" in spec.views)
    terms = tr.train_step()
    assert ("cons" in terms) == (spec.loss is not None)
    assert set(terms) <= set(spec.terms)
    if spec.teacher:  # the teacher after one step: the EMA of the student before (or after) the update
        before = {n: p.detach().clone() for n, p in tr.student.named_parameters()}
        t0 = {n: p.detach().clone() for n, p in tr.teacher.named_parameters()}
        tr.train_step()
        student = before if not spec.ema_after_step else dict(tr.student.named_parameters())
        from trainables import schedules
        d = schedules.ema_decay_at(1, cfg)
        for n, p in tr.teacher.named_parameters():
            assert torch.allclose(p, t0[n].lerp(student[n].detach(), 1 - d), atol=0, rtol=0), n


def _method_branches(path: Path) -> list[int]:
    """Lines of a comparison of a config's method with a literal method name (`cfg.method == "mt"`)."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names_method = any(isinstance(s, ast.Attribute) and s.attr == "method"
                           or isinstance(s, ast.Subscript) and isinstance(s.slice, ast.Constant)
                           and s.slice.value == "method"
                           or isinstance(s, ast.Call) and getattr(s.func, "attr", "") == "get" and s.args
                           and isinstance(s.args[0], ast.Constant) and s.args[0].value == "method"
                           for s in sides)
        literals = {c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant)}
        if names_method and literals & set(NAMES):
            hits.append(node.lineno)
    return hits


def test_no_branch_on_a_method_name_outside_the_registry():
    """Behaviour that depends on the method is declared in trainables/registry/, not tested by name."""
    found = {str(p.relative_to(ROOT)): lines
             for pkg in ("trainables", "sweeper", "search_spaces")
             for p in sorted((ROOT / pkg).rglob("*.py"))
             if "registry" not in p.parts and (lines := _method_branches(p))}
    assert found == {}


def test_the_branch_finder_finds_a_planted_branch(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('def f(cfg, d):\n    if cfg.method == "mt":\n        pass\n'
                 '    return d.get("method") in ("pi", "ict") or d["method"] != "vat" or cfg.mur == "vat"\n')
    assert _method_branches(p) == [2, 4, 4]


CORE = ("trainables/trainer.py", "trainables/methods.py", "trainables/config.py")
DECLARED_VALUES = {*VIEWS, "x0", "x2"}  # a method's views and MUR targets: what a core file may compare spec with


def _name_or_kind_comparisons(path: Path) -> list[int]:
    """Lines of a comparison with a method's name anywhere, of the method with any literal, or of a
    method's declaration (cfg.spec.<x>) with a literal other than a declared view or MUR target
    (`cfg.spec.consistency == "pseudo_label"`)."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        consts = {c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        attrs = {a.attr for s in sides for a in ast.walk(s) if isinstance(a, ast.Attribute)}
        if consts & set(NAMES) or "method" in attrs and consts or "spec" in attrs and consts - DECLARED_VALUES:
            hits.append(node.lineno)
    return hits


def test_the_trainer_the_loss_terms_and_the_config_compare_no_method_name_or_kind():
    """A method's behaviour is its registry file's: trainer.py, methods.py and config.py call it."""
    assert {p: lines for p in CORE if (lines := _name_or_kind_comparisons(ROOT / p))} == {}


def test_the_kind_finder_finds_planted_comparisons(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('def f(cfg, kind):\n    if cfg.spec.consistency == "pseudo_label":\n        pass\n'
                 '    a = "strong" in cfg.spec.views and cfg.spec.mur_target == "x2"\n'
                 '    return kind in ("uda", "x") or cfg.method != "other"\n')
    assert _name_or_kind_comparisons(p) == [2, 5, 5]
