"""The paper's published numbers as data (Do, Tran & Venkatesh, AAAI 2021).

Transcribed by hand from the paper's LaTeX source (tests/test_paper_results.py parses it again
where the source is at hand): Table 1 (CIFAR-10 and
CIFAR-100 error, %), Table 2 (SVHN error, %), Table 3 (sensitivity, CIFAR-10 1000 labels)
and the values the text states for the ablations and the appendix. Only the authors' own
runs (the purple rows, `source="ours"`) are what our sweeps reproduce; the baselines the
paper copied from the literature are kept too, flagged with the cited work, and are never
returned by `paper_value`. A "-" in the paper is simply absent here, and a std the paper
does not give is None.

Every authors' row also records the settings that define it (radius r, KL coefficient,
step size and steps of GA/PGA), so that an ablation cell at r=4 is not compared with the
r=10 number. `protocol_reason` says why a run that matches a row is still not comparable with
it: any field that applies to it differs from the paper preset's own row for that cell
(fewer steps, another lr, bf16, entmin, ...), so that a table shows Δ = ours − paper only for
the paper's own configuration.

    python -m sweeper.analysis.paper_results        # prints every transcribed value
    pytest tests/test_paper_results.py -q
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from search_spaces import get_sweep
from search_spaces.common import authors_radius
from trainables import registry
from trainables.config import NOT_COMPARED, TrainConfig, applies  # NOT_COMPARED: fields never compared


@dataclass(frozen=True)
class PaperResult:
    where: str                  # "Table 1", "Table 2", "Table 3", "Sec. Ablation", "Appendix ..."
    model: str                  # the row label as printed, e.g. "MT + VD + MUR", "VAT"
    dataset: str                # cifar10 | cifar100 | svhn (our names)
    num_labels: int
    mean: float                 # percent error (sensitivity for Table 3)
    std: float | None           # the paper's ± (std over 3 runs); None where not printed
    source: str                 # "ours" = the authors' runs (purple); else the cited bib key
    method: str | None = None   # our TrainConfig.method for the authors' rows
    vd: bool = False
    mur: str = "none"           # our TrainConfig.mur; the paper's "+MUR" is the direct one
    setting: tuple[tuple[str, float], ...] = ()   # TrainConfig keys that define the row
    checked: str = ""           # OTHER_PAPERS: where the number was checked ("" = not checked; the
                                # authors' rows are checked against the paper's LaTeX by the tests)

    @property
    def is_ours(self) -> bool:
        return self.source == "ours"


# Footnote marks -> bib keys differ between the two tables (captions of Tables 1 and 2).
T1 = {"heart": "tarvainen2017mean", "diamond": "athiwaratkun2018there", "club": "luo2018smooth",
      "spade": "verma2019interpolation", "dagger": "qiao2018deep"}
T2 = {"heart": "tarvainen2017mean", "diamond": "luo2018smooth", "club": "verma2019interpolation",
      "spade": "qiao2018deep"}

C10 = ("cifar10", (1000, 2000, 4000))
C100 = ("cifar100", (10000,))
SVHN = ("svhn", (250, 500, 1000))

# The settings that the appendix ("Training Settings") gives for the +VD / +MUR rows.
R_CIFAR10, R_CIFAR100, R_SVHN, KL = 10.0, 20.0, 10.0, 0.05


def _row(where, model, source, cells, method=None, vd=False, mur="none", radius=None):
    """cells: {dataset: [(mean, std) or None per label count]} in the table's column order."""
    out = []
    for ds, labels in (C10, C100, SVHN):
        for n, cell in zip(labels, cells.get(ds, ())):
            if cell is None:
                continue
            setting = []
            if vd:
                setting.append(("kl_coef", KL))
            if mur != "none":
                r = radius if radius is not None else {"cifar10": R_CIFAR10, "cifar100": R_CIFAR100,
                                                       "svhn": R_SVHN}[ds]
                setting.append(("mur_radius", r))
            out.append(PaperResult(where, model, ds, n, cell[0], cell[1], source,
                                   method, vd, mur, tuple(setting)))
    return out


def _table1() -> list[PaperResult]:
    t, ours = "Table 1", "ours"
    lit = [
        ("Pi", T1["heart"], [(31.65, 1.20), (17.57, 0.44), (12.36, 0.31)], [(39.19, 0.54)]),
        ("Pi + FSWA", T1["diamond"], [(17.23, 0.34), (12.61, 0.18), (10.07, 0.27)], [(34.25, 0.16)]),
        ("TempEns + SNTG", T1["club"], [(18.14, 0.52), (13.64, 0.32), (10.93, 0.14)], [None]),
        # VAT's reported 10.55 (and 3.86 on SVHN, Table 2) are its VAT+EntMin runs (Miyato et al. 2018)
        ("VAT", T1["spade"], [None, None, (10.55, 0.05)], [None]),
        ("MT", T1["heart"], [(21.55, 1.48), (15.73, 0.31), (12.31, 0.28)], [None]),
        ("MT", T1["diamond"], [(18.78, 0.31), (14.43, 0.20), (11.41, 0.27)], [(35.96, 0.77)]),
        ("MT + FSWA", T1["diamond"], [(15.58, 0.12), (11.02, 0.23), (9.05, 0.21)], [(33.62, 0.54)]),
        ("ICT", T1["spade"], [(15.48, 0.78), (9.26, 0.09), (7.92, 0.02)], [None]),
        ("Co-train (8 views)", T1["dagger"], [None, None, (8.35, 0.06)], [None]),
    ]
    mine = [
        ("MT", "mt", False, "none", [(19.63, 0.33), (15.07, 0.10), (11.65, 0.09)], [(37.65, 0.25)]),
        ("MT + VD", "mt", True, "none", [(16.35, 0.18), (12.51, 0.43), (9.62, 0.13)], [(35.47, 0.21)]),
        ("MT + MUR", "mt", False, "direct", [(17.96, 0.32), (12.23, 0.21), (10.16, 0.04)], [(35.93, 0.32)]),
        ("MT + VD + MUR", "mt", True, "direct", [(15.47, 0.13), (10.57, 0.28), (8.54, 0.20)], [(35.24, 0.06)]),
        ("ICT", "ict", False, "none", [(14.15, 0.16), (11.56, 0.07), (9.18, 0.03)], [(35.67, 0.07)]),
        ("ICT + VD", "ict", True, "none", [(10.13, 0.21), (8.83, 0.15), (7.48, 0.11)], [(34.12, 0.16)]),
        ("ICT + MUR", "ict", False, "direct", [(13.54, 0.23), (10.49, 0.07), (8.55, 0.06)], [(34.91, 0.20)]),
        ("ICT + VD + MUR", "ict", True, "direct", [(10.37, 0.25), (8.79, 0.16), (7.55, 0.14)], [(33.21, 0.24)]),
    ]
    out = []
    for model, src, c10, c100 in lit:
        out += _row(t, model, src, {"cifar10": c10, "cifar100": c100})
    for model, method, vd, mur, c10, c100 in mine:  # ICT's MUR rows: r 20 on CIFAR-10 too, as its run file
        for ds, cells in (("cifar10", c10), ("cifar100", c100)):
            out += _row(t, model, ours, {ds: cells}, method, vd, mur, radius=authors_radius(ds, method))
    return out


def _table2() -> list[PaperResult]:
    t, ours = "Table 2", "ours"
    lit = [
        ("Pi", T2["heart"], [(9.69, 0.92), (6.65, 0.53), (4.82, 0.17)]),
        ("Pi + SNTG", T2["diamond"], [(5.07, 0.25), (4.52, 0.30), (3.82, 0.25)]),
        ("VAT", T2["club"], [None, None, (3.86, 0.11)]),
        ("MT", T2["heart"], [(4.53, 0.50), (4.18, 0.27), (3.95, 0.19)]),
        ("MT + SNTG", T2["diamond"], [(4.29, 0.43), (3.99, 0.24), (3.86, 0.27)]),
        ("ICT", T2["club"], [(4.78, 0.68), (4.23, 0.15), (3.89, 0.04)]),
        ("Co-train (8 views)", T2["spade"], [None, None, (3.29, 0.03)]),
    ]
    mine = [
        ("Pi", "pi", False, "none", [(13.37, 0.97), (7.25, 0.36), (5.18, 0.13)]),
        ("Pi + VD", "pi", True, "none", [(12.98, 0.84), (6.38, 0.42), (4.65, 0.23)]),
        ("Pi + MUR", "pi", False, "direct", [(15.04, 0.75), (5.43, 0.27), (4.15, 0.10)]),
        ("Pi + VD + MUR", "pi", True, "direct", [(16.63, 1.22), (6.57, 0.73), (4.72, 0.48)]),
        ("MT", "mt", False, "none", [(5.57, 1.52), (3.86, 0.15), (3.72, 0.10)]),
        ("MT + VD", "mt", True, "none", [(5.26, 1.73), (3.39, 0.10), (3.28, 0.08)]),
        ("MT + MUR", "mt", False, "direct", [(6.45, 1.29), (3.66, 0.07), (3.48, 0.04)]),
        ("MT + VD + MUR", "mt", True, "direct", [(6.82, 2.01), (3.21, 0.13), (3.16, 0.07)]),
    ]
    out = []
    for model, src, cells in lit:
        out += _row(t, model, src, {"svhn": cells})
    for model, method, vd, mur, cells in mine:
        out += _row(t, model, ours, {"svhn": cells}, method, vd, mur)
    return out


def _text_values() -> list[PaperResult]:
    """Numbers stated in the running text (the figures themselves are not in the source)."""
    abl = "Sec. Ablation"
    # GA/PGA runs: the text gives no radius, so the CIFAR-10 default r = 10 is assumed.
    return [
        # "The best setting of the GA update is (alpha, s) = (0.1, 8) at which the error is 17.21"
        PaperResult(abl, "MT + MUR (GA, alpha=0.1, s=8)", "cifar10", 1000, 17.21, None, "ours",
                    "mt", False, "ga", (("mur_radius", R_CIFAR10), ("mur_step_size", 0.1), ("mur_steps", 8))),
        # Appendix: "The best result given by PGA is 16.81 +- 0.31 at alpha = 1.0 and s = 2"
        PaperResult("Appendix (PGA)", "MT + MUR (PGA, alpha=1.0, s=2)", "cifar10", 1000, 16.81, 0.31, "ours",
                    "mt", False, "pga", (("mur_radius", R_CIFAR10), ("mur_step_size", 1.0), ("mur_steps", 2))),
        # "At r = 0.5, MUT with the direct approximation ... achieves the best error of 3.58 +- 0.08"
        PaperResult(abl, "MUT (direct, r=0.5)", "svhn", 1000, 3.58, 0.08, "ours",
                    "mut", False, "direct", (("mur_radius", 0.5),)),
        # Appendix FixMatch: "FM achieves an average error of 5.07 while FM+MUR ... 13.45".
        # "FM+VD gives the same results as FM" has no number, so it is not transcribed.
        PaperResult("Appendix (FixMatch)", "FM", "cifar10", 250, 5.07, None, "ours", "fixmatch", False, "none"),
        PaperResult("Appendix (FixMatch)", "FM + MUR", "cifar10", 250, 13.45, None, "ours",
                    "fixmatch", False, "direct"),
    ]


# Table 3: sensitivity (Frobenius norm of d softmax / dx) on CIFAR-10, 1000 labels.
# The ± here is the spread over TEST POINTS (it exceeds the mean), not over seeds.
SENSITIVITY = {
    ("mt", False, "none"): (0.21, 0.26), ("ict", False, "none"): (0.22, 0.44),
    ("mt", True, "none"): (0.19, 0.30), ("ict", True, "none"): (0.20, 0.46),
    ("mt", False, "direct"): (0.12, 0.16), ("ict", False, "direct"): (0.16, 0.32),
    ("mt", True, "direct"): (0.13, 0.29), ("ict", True, "direct"): (0.19, 0.38),
}
SENSITIVITY_DATA = ("cifar10", 1000)

RESULTS: list[PaperResult] = _table1() + _table2() + _text_values()

# Other papers' MNIST results with 100 labels (test error %, mean ± std as each paper prints it), to
# show beside our `--preset mnist` cells. The AAAI 2021 paper has no MNIST experiment, so none of these
# is ever returned by paper_value; `source` is the work the number comes from (CITATIONS). Transcribed
# from each paper's table. They differ from our protocol (networks, steps, no validation split, some
# permutation-invariant MLPs), so they are context, never a difference to test.
CITATIONS = {
    "kingma2014semi": "Kingma, Rezende, Mohamed & Welling, Semi-Supervised Learning with Deep Generative "
                      "Models, NIPS 2014, Table 1",
    "rasmus2015semi": "Rasmus, Berglund, Honkala, Valpola & Raiko, Semi-Supervised Learning with Ladder "
                      "Networks, NIPS 2015, Tables 1 and 2",
    "springenberg2016unsupervised": "Springenberg, Unsupervised and Semi-supervised Learning with Categorical "
                                    "Generative Adversarial Networks, ICLR 2016, Table 1",
    "salimans2016improved": "Salimans, Goodfellow, Zaremba, Cheung, Radford & Chen, Improved Techniques for "
                            "Training GANs, NIPS 2016, Table 1 (93 ± 6.5 errors of the 10,000 test images)",
    "miyato2018virtual": "Miyato, Maeda, Koyama & Ishii, Virtual Adversarial Training: a Regularization Method "
                         "for Supervised and Semi-Supervised Learning, IEEE TPAMI 41(8), 2019 (online 2018), "
                         "MNIST table",
}
# `checked`: the number was compared with independent public text quoting it, not with the paper's
# PDF. Where no such text was found the row says "not checked" and the table note marks it: verify
# against the PDF before citing.
_BADGAN = "kimiyoung/ssl_bad_gan README (MNIST # errors, 100 labels)"
_LADDER_NP = "huangleiBuaa/Ladder_deepSSL_NP README (permutation-invariant MNIST, 100 labels)"
OTHER_PAPERS: list[PaperResult] = [
    PaperResult("Kingma+ 2014, T1", "M1+M2 (VAE, MLP)", "mnist", 100, 3.33, 0.14, "kingma2014semi",
                checked="Response777/Semi-supervised-VAE README ('M1+M2: 3.33(delta = 0.14)')"),
    PaperResult("Rasmus+ 2015, T1", "Ladder, full (MLP, perm.-inv.)", "mnist", 100, 1.06, 0.37, "rasmus2015semi",
                checked=f"{_LADDER_NP}; {_BADGAN}: 106 +/- 37"),
    PaperResult("Rasmus+ 2015, T2", "Ladder, Conv-Small Γ-model", "mnist", 100, 0.89, 0.50, "rasmus2015semi"),
    PaperResult("Springenberg 2016, T1", "CatGAN (conv)", "mnist", 100, 1.39, 0.28, "springenberg2016unsupervised"),
    PaperResult("Salimans+ 2016, T1", "Improved GAN, feature matching (MLP, perm.-inv.)", "mnist", 100, 0.93, 0.065,
                "salimans2016improved", checked=f"{_BADGAN}: 93 +/- 6.5; {_LADDER_NP}: 0.93 ± 0.065"),
    # the mean is quoted by both READMEs, the ± by neither: printed without it
    PaperResult("Miyato+ 2018", "VAT (MLP, perm.-inv.)", "mnist", 100, 1.36, None, "miyato2018virtual",
                checked=f"{_LADDER_NP}: 1.36; {_BADGAN}: 136 (no ± in either)"),
]
METHODS = tuple(m.name for m in registry.METHODS.values() if m.paper_name)  # the paper reports the authors' runs


def _setting_matches(row: PaperResult, setting: dict) -> bool:
    """A key the caller gives must equal the row's value where the row defines it."""
    for key, value in row.setting:
        if key in setting and setting[key] is not None:
            if not math.isclose(float(setting[key]), float(value), rel_tol=1e-9, abs_tol=1e-12):
                return False
    return True


def paper_result(method: str, vd: bool, mur: str, dataset: str, num_labels: int, **setting) -> PaperResult | None:
    """The authors' row (Tables 1-2 or the text) for this cell, or None where the paper has none.

    method in {pi, mt, ict, mut, fixmatch}; mur "none" or "direct" (the paper's "+MUR"),
    "ga"/"pga" for the iterative ablation. `setting` may give mur_radius, kl_coef,
    mur_step_size, mur_steps: a row whose defining setting differs gives None, so an
    ablation cell at r=4 is not compared with the r=10 value.
    """
    hits = [r for r in RESULTS if r.is_ours and r.method == method and r.vd == bool(vd)
            and r.mur == mur and r.dataset == dataset and r.num_labels == int(num_labels)
            and _setting_matches(r, setting)]
    if len(hits) > 1:
        raise ValueError(f"ambiguous paper value for {method, vd, mur, dataset, num_labels}: "
                         f"{[h.where for h in hits]}; pass the setting (e.g. mur_radius) that tells them apart")
    return hits[0] if hits else None


def paper_value(method: str, vd: bool, mur: str, dataset: str, num_labels: int,
                **setting) -> tuple[float, float | None] | None:
    """The authors' published (mean, std) error in percent of `paper_result`'s row, or None; std is
    None where the paper prints a mean only."""
    r = paper_result(method, vd, mur, dataset, num_labels, **setting)
    return (r.mean, r.std) if r is not None else None


SETTING_KEYS = ("mur_radius", "kl_coef", "mur_step_size", "mur_steps")  # what may define a row (PaperResult.setting)


def result_of(cfg: dict) -> PaperResult | None:
    """The authors' row a full config dict reproduces, or None."""
    return paper_result(cfg["method"], cfg["vd"], cfg["mur"], cfg["dataset"], cfg["num_labels"],
                        **{k: cfg.get(k) for k in SETTING_KEYS})


# Δ = ours - paper only for a run configured as the paper preset's own row for that cell. These sweeps'
# paper presets define the rows: Tables 1-3 come from table_cifar and table_svhn, the text's values
# from the ablation that reproduces each (GA / PGA, MUT) and the FixMatch appendix; where two define
# the same cell the first one wins (the tables, whose rows are the authors' Table 1-2 runs).
REFERENCE_SWEEPS = ("table_cifar", "table_svhn", "ablation_mur_steps", "mut_radius", "fixmatch")
MAX_NAMED = 3  # differing fields a reason names, in TrainConfig's order


@functools.cache
def reference_configs() -> dict[PaperResult, dict]:
    """Each authors' row -> the full config (TrainConfig defaults filled in) of the paper-preset trial
    that reproduces it, from REFERENCE_SWEEPS."""
    out: dict[PaperResult, dict] = {}
    for name in REFERENCE_SWEEPS:
        for t in get_sweep(name, "paper").trials(seeds=1):
            cfg = TrainConfig.from_dict(t).to_dict()
            r = result_of(cfg)
            if r is not None:
                out.setdefault(r, cfg)
    return out


def protocol_reason(cfg: dict) -> str | None:
    """Why a run (a full TrainConfig dict) that matches one of the authors' rows is not comparable with
    it, e.g. "no Δ: lr 0.05, not 0.1"; None when it is configured as the paper preset's own row for that
    cell (reference_configs) in every field that applies to it (trainables.config.applies) but
    NOT_COMPARED. The reason names the first MAX_NAMED differing fields in TrainConfig's order."""
    r = result_of(cfg)
    ref = reference_configs().get(r) if r is not None else None
    if ref is None:
        return "no Δ: no paper-preset row reproduces this cell"
    diff = [k for k in ref if k not in NOT_COMPARED and (applies(k, ref) or applies(k, cfg))
            and not _same(cfg.get(k), ref[k])]
    if not diff:
        return None
    named = "; ".join(f"{k} {_show(cfg.get(k))}, not {_show(ref[k])}" for k in diff[:MAX_NAMED])
    return "no Δ: " + named + (f" (+{len(diff) - MAX_NAMED} more)" if len(diff) > MAX_NAMED else "")


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def _show(v) -> str:
    """A field's value as a reason prints it: 280000 -> 280k (step counts), 0.05 -> 0.05, True -> true."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return _count(v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _count(n: int) -> str:
    """280000 -> "280k", 2000 -> "2000", 1048576 -> "2^20" (FixMatch's run length)."""
    if n >= 10_000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return f"2^{n.bit_length() - 1}" if n >= 2 ** 16 and n & (n - 1) == 0 else str(n)


def paper_sensitivity(method: str, vd: bool, mur: str) -> tuple[float, float] | None:
    """Table 3: (mean, std over test points) sensitivity on CIFAR-10 with 1000 labels."""
    return SENSITIVITY.get((method, bool(vd), mur))


def literature(dataset: str, num_labels: int) -> list[PaperResult]:
    """Other works' numbers for this data set and label count: the baselines the paper copied into its
    tables, and OTHER_PAPERS (MNIST). Each row's `source` names the work; none is the authors' own."""
    return [r for r in RESULTS + OTHER_PAPERS
            if not r.is_ours and r.dataset == dataset and r.num_labels == num_labels]


if __name__ == "__main__":
    for r in RESULTS:
        std = "" if r.std is None else f" ± {r.std:.2f}"
        print(f"{r.where:20s} {r.model:34s} {r.dataset:8s} {r.num_labels:6d}  {r.mean:6.2f}{std:8s}  {r.source}")
    for r in OTHER_PAPERS:
        std = "" if r.std is None else f" ± {r.std:g}"
        print(f"{r.where:20s} {r.model:34s} {r.dataset:8s} {r.num_labels:6d}  {r.mean:6.2f}{std:9s} "
              f"{CITATIONS[r.source]} [checked: {r.checked or 'no'}]")
    for k, (m, s) in SENSITIVITY.items():
        print(f"{'Table 3':20s} {str(k):34s} {'cifar10':8s} {1000:6d}  {m:6.2f} ± {s:.2f}  ours")
