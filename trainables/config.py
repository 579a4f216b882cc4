"""TrainConfig: the one frozen, validated description of a training run.

Ray Tune hands the trainable a flat dict; `TrainConfig.from_dict` turns it into this
object and rejects unknown keys and out-of-range values before any work is done.

    python -c "from trainables.config import TrainConfig; print(TrainConfig())"
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from trainables import registry
from trainables.files import closest

METHODS = tuple(registry.METHODS)  # trainables/registry/: what each one is
DATASETS = ("digits", "mnist", "cifar10", "cifar100", "svhn")
LABEL_RULES = ("balanced", "frequency")  # data.label_counts
LABEL_PICKS = ("per_class", "shuffle_walk")  # data.labeled_split
DROPOUT_MODES = ("channel", "element")  # models.Dropout
CIFAR_NORMS = ("zca", "channel")  # trainables/data.py
LR_SCHEDULES = ("exp", "cosine")  # trainables/schedules.py
WEIGHT_INITS = ("kaiming", "tf_he_normal")  # trainables/models.py
ARCHS = ("convnet13", "convnet_small", "wrn28_2")
COMPILE_MODES = ("none", "model", "step", "graphs")  # trainer.py: what each compiles
# Keys every sweep's trial config carries (sweeper.driver.preflight.trial_configs writes data_dir and seed; the
# presets set method and dataset): a trial config without them did not come from a sweep, and
# trainables/tune.py refuses it rather than train TrainConfig's defaults.
SWEEP_KEYS = ("method", "dataset", "seed", "data_dir")
NUM_CLASSES = {"digits": 10, "mnist": 10, "cifar10": 10, "cifar100": 100, "svhn": 10}
TRAIN_SIZE = {"digits": 1347, "mnist": 60000, "cifar10": 50000, "cifar100": 50000, "svhn": 73257}
# Validation images held out of the training set (val_size=-1 picks these), as the SSL literature
# does (Oliver et al. 2018, "Realistic Evaluation of Deep SSL Algorithms": 5000 for CIFAR-10, 7325 for
# SVHN; MNIST: the last 10,000 training images, the classic mnist.pkl.gz validation split; digits: 300
# of the 1347 training images). Never trained on, neither labeled nor unlabeled.
VAL_SIZE = {"digits": 300, "mnist": 10000, "cifar10": 5000, "cifar100": 5000, "svhn": 7325}
# Sizes past what any machine this runs on holds or finishes: refused before work, not found inside a trial.
MAX_STEPS = 10 ** 8       # 100M steps: years at the paper's networks' speed; the paper's longest runs are ~500k
MAX_WIDTH = 16.0          # ConvNet-13 at width 16 has 8192-channel 3x3 convolutions, 0.6 G weights (2.4 GB) each
MAX_EVAL_BATCH = 1 << 16  # 65536 test images a forward pass: 0.8 GB of 32x32x3 float inputs before any activation


@dataclass(frozen=True)
class MurKind:
    """One way of finding MUR's virtual point x* (trainables/mur.py, virtual_point)."""
    label: str        # its name in a table's row label ("MUR (PGA)")
    from_g0: bool     # starts from g0 = dH/dx at x0, which the step computes and reports (||g0||)
    step_size: bool   # iterates with step size mur_step_size (alpha)
    steps: bool       # reads mur_steps: its iterations, or VAT's power iterations
    xi: bool = False  # reads vat_xi: VAT's finite-difference step


# The MUR kinds, declared once: TrainConfig.mur is "none" or one of them (random = RR, vat = VAT's point)
MUR_KINDS = {"direct": MurKind("MUR", from_g0=True, step_size=False, steps=False),
             "pga": MurKind("MUR (PGA)", from_g0=True, step_size=True, steps=True),
             "ga": MurKind("MUR (GA)", from_g0=True, step_size=True, steps=True),
             "random": MurKind("RR", from_g0=False, step_size=False, steps=False),
             "vat": MurKind("VAT", from_g0=False, step_size=False, steps=True, xi=True)}
MUR_METHODS = ("none", *MUR_KINDS)


# TrainConfig fields that cannot change a run's numbers: the seed (the paper's ± is over seeds), where the
# data live and whether to fetch them, the device, the NaN-check and checkpoint periods and the evaluation
# batch size (bookkeeping), compile mode and channels_last (the same computation: compiled code draws its
# random numbers from another stream, like another seed, and a memory layout changes only float rounding;
# bf16 changes the arithmetic, so it is not here). The paper comparison ignores them
# (sweeper/analysis/paper_results.py), and a checkpoint stored before one of them existed resumes with its default
# (Trainer.load_state_dict).
NOT_COMPARED = ("seed", "data_dir", "download", "device", "nan_check_every", "checkpoint_every_s", "eval_batch",
                "compile", "channels_last")


# the TrainConfig fields some network method reads and the others do not (Method.keys; config.applies)
METHOD_KEYS = frozenset(k for m in registry.METHODS.values() if m.network for k in m.keys)


# keys sweeper/driver/tuner.py adds to a trial's param space beside the TrainConfig fields (trainables/tune.py drops them)
BOOKKEEPING = ("trial_index",)


def held_out(dataset: str, val_size: int) -> int:
    """Validation images a run holds out of the training set: val_size, or VAL_SIZE[dataset] for -1."""
    return VAL_SIZE[dataset] if val_size < 0 else val_size


def unknown_keys(unknown: list[str], names, what: str = "config key") -> str:
    """One line for keys that are no TrainConfig field: each with the closest field names."""
    hint = "; ".join(f"{k}: {closest(k, names, 'no key is close')}" for k in unknown)
    return f"unknown {what}(s) {unknown} ({hint}); every key: the TrainConfig fields in trainables/config.py"


class ConfigError(ValueError):
    """A config value is unknown or out of range; the message names the fix."""


@dataclass(frozen=True)
class SharedConfig:
    """TrainConfig's fields every method shares, and its rules; a method's own fields (Method.fields) follow."""
    # --- what is trained -------------------------------------------------------
    method: str = "mt"              # supervised | pi | mt | ict | mut | fixmatch | vat (VAT alone) | uda | labelspreading
                                    # (sklearn): trainables/registry/, one file each
    vd: bool = False                # variational dropout (the paper's VBI) on every conv/linear
    mur: str = "none"               # virtual point: none | direct | pga | ga | random (RR) | vat
    # --- data ------------------------------------------------------------------
    dataset: str = "digits"         # digits (embedded) | mnist | cifar10 | cifar100 | svhn
    data_dir: str = "./data"        # folder holding the torchvision data sets
    download: bool = False          # let torchvision download into data_dir (needs network)
    num_labels: int = 100           # labeled training images
    label_rule: str = "balanced"    # per-class label counts: balanced = num_labels / classes each (a multiple of
                                    # the classes) | frequency = the authors' extract_data_by_total_counts: floor of
                                    # num_labels x the class's share of the training set, leftovers one each to
                                    # the lowest class ids (their SVHN; CIFAR is balanced either way)
    label_pick: str = "per_class"   # which images: per_class = a torch.randperm within each class | shuffle_walk = the
                                    # authors' extract_data_by_class_counts: numpy RandomState(subset seed) shuffles all
                                    # training ids once, the walk takes each id whose class still needs labels
    seed: int = 0                   # init, batches, noise, and the labeled subset unless label_seed fixes it
    label_seed: int = -1            # labeled subset: -1 = drawn with seed (a new subset per seed) | >= 0 = drawn with
                                    # this seed in every run (authors' train.py: 1003), so seeds vary training only
    val_size: int = -1              # validation images held out of training (-1: VAL_SIZE[dataset]; 0: none)
    svhn_norm: str = "feature"      # SVHN: feature = per-pixel train mean/std (authors) | image = per image (old)
    cifar_norm: str = "zca"         # CIFAR: zca = ZCA whitening (authors) | channel = per-channel train mean/std (FixMatch)
    # --- schedule (in optimizer steps) ------------------------------------------
    steps: int = 600                # total training steps
    batch_labeled: int = 25         # labeled images per batch
    batch_unlabeled: int = 75       # unlabeled images per batch
    lr: float = 0.1                 # peak learning rate (Nesterov SGD)
    momentum: float = 0.9           # SGD momentum
    weight_decay: float = 1e-4      # L2 term (SGD weight_decay) on the parameters weight_decay_scope names
    weight_decay_scope: str = "all" # all = every parameter but log_sigma2 (authors) | weights = conv/linear only
    lr_schedule: str = "exp"        # exp = lr_rampdown's exp ramp-down (authors) | cosine = lr cos(7 pi k / (16 K)) over
                                    # the whole run (FixMatch; needs lr_rampdown=0); both after the lr_rampup ramp-up
    lr_rampup: int = 100            # steps of exp(-5(1-t)^2) ramp-up of the LR
    lr_rampdown: int = 150          # last steps of exp(-12.5 p^2) ramp-down (authors' code); exp schedule only
    rampup: int = 100               # ramp-up length of every loss coefficient
    # --- loss coefficients (maxima of lambda_i(t)) ------------------------------
    cons_coef: float = 10.0         # lambda1: consistency (squared error summed over classes)
    kl_coef: float = 0.05           # lambda2: KL(q||p) per weight, only with vd
    vd_masked: bool = False         # with vd: every deterministic pass (teacher, Pi target, pseudo-labels, evaluation)
                                    # uses theta with the weights of log alpha >= 3 zeroed, the authors'
                                    # MASKED_WEIGHT_MODE | off: theta itself, the mode of their runs (DECISIONS.md)
    mur_coef: float = 4.0           # lambda3: MUR / RR / VAT consistency
    entmin_coef: float = 0.0        # entropy minimisation on unlabeled data (authors' MT+VD: 0.1)
    # --- teacher ---------------------------------------------------------------
    ema_decay: float = 0.99         # EMA momentum of the mean teacher (trainable parameters only)
    teacher_bn: str = "student"     # student = teacher reads the student's BN running stats (authors) | own
    ema_decay_late: float = -1.0    # stepped momentum after ema_switch_step; < 0: constant
    ema_switch_step: int = 0        # step at which ema_decay_late takes over
    # --- MUR -------------------------------------------------------------------
    mur_radius: float = 1.0         # r: L2 distance per sample (paper: 10 in ZCA CIFAR units); VAT: epsilon
    mur_step_size: float = 1.0      # alpha of pga / ga
    mur_steps: int = 1              # iterations of pga / ga / vat power iteration
    vat_xi: float = 1e-3            # VAT finite-difference scale (paper 1e-6 is float32 noise here: mur.py)
    # --- ICT / FixMatch ----------------------------------------------------------
    ict_alpha: float = 1.0          # Beta(a, a) mixing weight per sample
    fm_threshold: float = 0.95      # FixMatch confidence threshold tau (mask: max prob >= tau, as FixMatch's code)
    fm_ops: int = 2                 # RandAugment ops per strong view (FixMatch: N = 2)
    fm_cutout: float = 0.5          # Cutout square side / image side (FixMatch: 0.5, 16 px on 32x32)
    fm_groups: int = 16             # strong-view groups per batch, each with its own op draw (fm_published off)
    fm_published: bool = False      # FixMatch as its code runs it (the paper preset): labeled, weak and strong views in
                                    # one forward (one BN batch), RandAugment per image (augment_strong.fixmatch_ra:
                                    # each op p 0.5, levels 1-9), every training image unlabeled too | off (the quick
                                    # preset): the strong view its own forward, one op draw per fm_groups group,
                                    # unlabeled = the images outside the labeled subset
    # --- network and augmentation ------------------------------------------------
    arch: str = "convnet_small"     # convnet13 (paper) | convnet_small (8x8 inputs) | wrn28_2 (FixMatch's WRN-28-2;
                                    # no dropout or input noise layer: both must be 0)
    width: float = 1.0              # channel multiplier (1.0 = ConvNet-13's 128/256/512, WRN-28-2's 16/32/64/128)
    dropout: float = 0.5            # dropout after each pooling (removed under vd)
    dropout_mode: str = "channel"   # channel = keep or drop each (image, channel) map whole (the authors'
                                    # dropout_2D, PyTorch's Dropout2d) | element = each activation on its own
    input_noise: float = 0.15       # Gaussian input noise sigma inside the network
    translate: int = 1              # random translation, pixels (paper: 4 CIFAR, 2 SVHN)
    translate_pad: str = "reflect"  # pixels shifted in: reflect (authors) | zero (Mean Teacher's pad-and-crop)
    flip: bool = False              # random horizontal flip (CIFAR yes, SVHN and digits no)
    bn_momentum: float = 0.001      # PyTorch convention (TF 0.999)
    bn_clean_pass: bool = False     # + a no-grad train-mode student pass on the un-augmented batch each step that only
                                    # updates BN running stats (the authors' non-VD MT/ICT: MeanTeacher._forward's
                                    # y_dist_stu_no_pert); paper presets set it where they do (search_spaces/common.py)
    bn_eps: float = 1e-8
    weight_init: str = "kaiming"    # ConvNets' conv/linear weights: kaiming = N(0, 2 / ((1 + 0.1^2) fan_in)) (He for
                                    # LeakyReLU 0.1) | tf_he_normal = the authors' TF r1.12 he_normal: truncated at 2 std,
                                    # std sqrt(2 / fan_in) after truncation (models.py); wrn28_2 keeps FixMatch's
    # --- evaluation and runtime -------------------------------------------------
    eval_every: int = 100           # steps between test evaluations (and reports)
    eval_batch: int = 1000          # test images per forward pass
    sensitivity_samples: int = 200  # test images used for the Jacobian sensitivity
    device: str = "auto"            # auto | cpu | cuda
    bf16: bool = False              # bf16 autocast in training steps (CUDA; CPU autocast where asked, as a proxy)
    channels_last: bool = False     # channels_last memory format (the quick preset's CPU step: trainer.py)
    compile: str = "none"           # torch.compile: none (eager) | model (student, teacher) | step (the loss terms' whole
                                    # forward+backward: MUR, VD, consistency) | graphs (step replayed as CUDA
                                    # graphs); a paper preset names its mode (search_spaces/common.py
                                    # PAPER_COMPILED); compile_s reports its cost
    nan_check_every: int = 10       # steps between host-side NaN checks (1: every step, before its update)
    checkpoint_every_s: float = 10.0  # Ray Tune: an evaluation's report carries a checkpoint once this many seconds
                                    # passed since the trial's last one (or its start); the last evaluation always
                                    # does; 0: every evaluation. Why: trainables/tune.py

    # ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(unknown_keys(unknown, names))
        typed = {}
        for f in fields(cls):
            if f.name in d:
                typed[f.name] = _coerce(f, d[f.name])
        return cls(**typed)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **kw) -> "TrainConfig":
        return dataclasses.replace(self, **kw)

    @property
    def pixel_standardised(self) -> bool:
        """The inputs are 8-bit pixels standardised per channel or per feature (data.Dataset.pixels is set)."""
        return (self.dataset in ("cifar10", "cifar100") and self.cifar_norm == "channel"
                or self.dataset == "svhn" and self.svhn_norm == "feature")

    @property
    def num_classes(self) -> int:
        return NUM_CLASSES[self.dataset]

    @property
    def n_val(self) -> int:
        """Validation images held out of the training set (val_size, or the data set's default)."""
        return held_out(self.dataset, self.val_size)

    @property
    def subset_seed(self) -> int:
        """The seed the labeled subset is drawn with: label_seed where fixed, else the run's seed."""
        return self.label_seed if self.label_seed >= 0 else self.seed

    @property
    def spec(self) -> registry.Method:
        """The method's declaration (trainables/registry/)."""
        return registry.METHODS[self.method]

    @property
    def mur_kind(self) -> MurKind | None:
        """The MUR point's kind (MUR_KINDS), None without one."""
        return MUR_KINDS.get(self.mur)

    @property
    def uses_teacher(self) -> bool:
        # fixmatch: an EMA copy used only for evaluation (FixMatch reports its EMA model)
        return self.spec.teacher

    def __post_init__(self):
        def need(ok: bool, msg: str):
            if not ok:
                raise ConfigError(msg)

        for f in fields(self):  # inf or nan would pass every range check below (nan compares False to all)
            v = getattr(self, f.name)
            need(not isinstance(v, float) or math.isfinite(v), f"{f.name} must be a finite number, got {v}")
        need(self.method in METHODS, f"unknown method {self.method!r}; choose one of {list(METHODS)}")
        need(self.dataset in DATASETS, f"unknown dataset {self.dataset!r}; choose one of {list(DATASETS)}")
        need(self.mur in MUR_METHODS, f"unknown mur {self.mur!r}; choose one of {list(MUR_METHODS)}")
        need(self.arch in ARCHS, f"unknown arch {self.arch!r}; choose one of {list(ARCHS)}")
        need(self.device in ("auto", "cpu", "cuda"), f"device must be auto, cpu or cuda, got {self.device!r}")
        for name, ok in (("svhn_norm", ("feature", "image")), ("weight_decay_scope", ("all", "weights")),
                         ("teacher_bn", ("student", "own")), ("translate_pad", ("reflect", "zero")),
                         ("compile", COMPILE_MODES), ("label_rule", LABEL_RULES), ("label_pick", LABEL_PICKS),
                         ("dropout_mode", DROPOUT_MODES), ("cifar_norm", CIFAR_NORMS),
                         ("lr_schedule", LR_SCHEDULES), ("weight_init", WEIGHT_INITS)):
            need(getattr(self, name) in ok, f"unknown {name} {getattr(self, name)!r}; choose one of {list(ok)}")
        need(self.label_seed >= -1, f"label_seed must be >= 0 (or -1 to draw the labeled subset with seed), "
                                    f"got {self.label_seed}")
        need(self.val_size >= -1, f"val_size must be >= 0 (or -1 for the data set's default), got {self.val_size}")
        own = self.spec.check(self) if self.spec.check is not None else None
        need(own is None, own)
        k = self.num_classes
        need(self.num_labels >= k, f"num_labels={self.num_labels} is below the {k} classes of {self.dataset}; "
             f"use at least one label per class")
        need(self.label_rule != "balanced" or self.num_labels % k == 0,
             f"num_labels={self.num_labels} is not divisible by the {k} classes of {self.dataset}; a balanced "
             f"labeled subset needs a multiple of {k} (or label_rule=frequency)")
        n_train = TRAIN_SIZE[self.dataset] - self.n_val
        if not self.spec.network:  # the classical baseline's kernel
            check_size(n_train)
        need(self.num_labels <= n_train, f"num_labels={self.num_labels} exceeds the {n_train} training "
             f"images of {self.dataset} left after {self.n_val} validation images; use at most {n_train}")
        for name in ("steps", "batch_labeled", "eval_every", "eval_batch", "mur_steps", "fm_groups", "nan_check_every"):
            need(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        need(self.batch_unlabeled >= 0, f"batch_unlabeled must be >= 0, got {self.batch_unlabeled}")
        need(not self.spec.network or self.batch_labeled <= self.num_labels,
             f"batch_labeled={self.batch_labeled} is larger than the {self.num_labels} labeled images: each batch "
             f"would repeat every labeled image; use batch_labeled <= num_labels")
        need(self.batch_unlabeled <= n_train, f"batch_unlabeled={self.batch_unlabeled} is larger than the {n_train} "
             f"training images of {self.dataset}; use at most {n_train}")
        need(self.steps <= MAX_STEPS, f"steps={self.steps} is past what a run can finish; use at most {MAX_STEPS}")
        need(self.eval_batch <= MAX_EVAL_BATCH, f"eval_batch={self.eval_batch} test images in one forward pass "
             f"would not fit in memory; use at most {MAX_EVAL_BATCH}")
        need(self.width <= MAX_WIDTH, f"width={self.width:g} makes a network past any device's memory; use at "
             f"most {MAX_WIDTH:g} (1 is the paper's)")
        need(not self.spec.unlabeled or self.batch_unlabeled >= 1,
             f"method {self.method!r} needs unlabeled data: set batch_unlabeled >= 1")
        for name in ("lr", "mur_radius", "mur_step_size", "ict_alpha", "vat_xi"):
            need(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("weight_decay", "cons_coef", "kl_coef", "mur_coef", "entmin_coef",
                     "input_noise", "lr_rampup", "lr_rampdown", "rampup", "translate",
                     "sensitivity_samples", "ema_switch_step", "seed", "fm_ops", "checkpoint_every_s"):
            need(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        need(self.lr_schedule == "exp" or self.lr_rampdown == 0,
             f"lr_schedule 'cosine' decays the LR over the whole run and has no ramp-down: set lr_rampdown=0 "
             f"(got {self.lr_rampdown}) or lr_schedule='exp'")
        need(self.cifar_norm == "zca" or self.dataset in ("cifar10", "cifar100"),
             f"cifar_norm={self.cifar_norm!r} chooses CIFAR's preprocessing, but dataset is {self.dataset!r}; "
             f"leave cifar_norm at 'zca' (its default) for {self.dataset}")
        need(not (self.fm_published and "strong" in self.spec.views) or self.pixel_standardised,
             f"fm_published runs FixMatch's RandAugment on 8-bit pixels, but {self.dataset!r} is not standardised "
             f"from them; use cifar10 or cifar100 with cifar_norm='channel', or svhn with svhn_norm='feature'")
        need(self.lr_rampdown <= self.steps, f"lr_rampdown={self.lr_rampdown} is longer than steps={self.steps}; "
                                                  f"lower lr_rampdown or raise steps")
        for name in ("momentum", "ema_decay", "bn_momentum", "fm_threshold", "fm_cutout"):
            need(0 <= getattr(self, name) <= 1, f"{name} must lie in [0, 1], got {getattr(self, name)}")
        need(0 <= self.dropout < 1, f"dropout must lie in [0, 1), got {self.dropout}")
        need(self.ema_decay_late < 0 or self.ema_decay_late <= 1,
             f"ema_decay_late must be <= 1 (or negative for a constant momentum), got {self.ema_decay_late}")
        need(self.width > 0, f"width must be > 0, got {self.width}")
        need(self.bn_eps > 0, f"bn_eps must be > 0, got {self.bn_eps}")
        # entropy_grad's x.detach().requires_grad_() breaks the compiled step here, and cudagraph trees fail
        # across that break (H200, torch 2.11: "input tensor deallocate during graph recording", PGA 5 steps;
        # FixMatch + MUR has the same break and was not tried)
        kind = self.mur_kind
        iterated = kind is not None and kind.step_size and self.mur_steps >= 2
        need(self.compile != "graphs" or not (iterated or not self.spec.mur_on_x0 and kind is not None),
             "compile='graphs' fails for mur='pga'/'ga' with mur_steps >= 2 and for FixMatch + MUR (CUDA graphs "
             "across a graph break); use compile='step' or 'none'")
        need(self.arch != "convnet13" or self.dataset != "digits",
             "arch convnet13 needs 32x32 inputs; use arch convnet_small for digits")
        need(self.arch != "wrn28_2" or self.weight_init == "kaiming",
             f"arch wrn28_2 initialises as FixMatch's code does; weight_init={self.weight_init!r} is the ConvNets' "
             f"choice: leave it at 'kaiming'")
        need(self.arch != "wrn28_2" or (self.dropout == 0 and self.input_noise == 0),
             f"arch wrn28_2 has no dropout or input noise layer (FixMatch trains it without), got dropout="
             f"{self.dropout}, input_noise={self.input_noise}; set dropout=0 and input_noise=0")


TrainConfig = dataclasses.make_dataclass(
    "TrainConfig", [(name, typ, dataclasses.field(default=default)) for name, typ, default, _ in registry.FIELDS],
    bases=(SharedConfig,), frozen=True)
TrainConfig.__module__ = __name__  # so that pickle (Ray, checkpoints) finds it here
TrainConfig.__doc__ = ("The one frozen, validated description of a training run: SharedConfig's fields, then each "
                       "method's own (trainables/registry/, Method.fields), in the methods' order.")


def train_config_defaults() -> dict:
    """TrainConfig's field defaults, {field: default}: a new dict at each call."""
    return {f.name: f.default for f in fields(TrainConfig) if f.default is not dataclasses.MISSING}


def full_config(partial: dict, check: bool = False) -> dict:
    """A trial's full config from the keys it sets (a sweep's cell, its params.json, a trials.csv row): the
    TrainConfig default of every field it does not set, its own value of every key it does (BOOKKEEPING
    keys too). The one derivation of a trial's config: the driver's pre-flight, the aggregator, the tables'
    layout and a trial's identity (sweeper/trial_identity.py) call it. check=True: the fields validated
    and typed by TrainConfig first (ConfigError naming a bad value), as the driver takes a sweep's cells."""
    if not check:
        return {**train_config_defaults(), **partial}
    own = TrainConfig.from_dict({k: v for k, v in partial.items() if k not in BOOKKEEPING}).to_dict()
    return {**own, **{k: v for k, v in partial.items() if k in BOOKKEEPING}}


def applies(key: str, cfg: dict) -> bool:
    """Whether a config key changes what a run with this full config does. A method's own keys
    (Method.keys: lambda1 where it has a consistency term, ICT's alpha, FixMatch's, a teacher's EMA,
    VAT's epsilon = mur_radius and power iterations = mur_steps) apply to it alone, and a classical
    method (LabelSpreading) reads nothing but its keys; the MUR keys need a MUR point (the radius is
    also VAT's epsilon), the step keys an iterative one (or VAT's power iterations), the KL coefficient
    VD, cifar_norm a CIFAR data set, lr_rampdown the exp LR schedule. A config without a method
    (a partial one) takes the keys only methods read as applying, but those of a MUR point."""
    if key in ("method", "vd", "mur"):
        return True
    spec = registry.METHODS.get(cfg.get("method"))
    if spec is not None and not spec.network:
        return key in spec.keys
    own = spec is not None and key in spec.keys  # the method reads it itself
    point = cfg.get("mur", "none") != "none"  # a MUR / RR / VAT point and its lambda3 term
    if key == "mur_coef":
        return point
    if key == "mur_radius":
        return point or own
    kind = MUR_KINDS.get(cfg.get("mur", "none"))
    if key == "mur_step_size":
        return kind is not None and kind.step_size
    if key == "mur_steps":
        return kind is not None and kind.steps or own
    if key == "vat_xi":
        return kind is not None and kind.xi or own or spec is None
    if key in ("kl_coef", "vd_masked"):
        return bool(cfg.get("vd"))
    if key == "dropout_mode":                 # VD removes the dropout layers
        return not cfg.get("vd") and cfg.get("dropout", 0.5) > 0
    if key == "cifar_norm":                   # the preprocessing of CIFAR-10 and CIFAR-100 only
        return cfg.get("dataset") in ("cifar10", "cifar100")
    if key == "lr_rampdown":                  # the cosine schedule has none (and refuses one)
        return cfg.get("lr_schedule", "exp") == "exp"
    if key in METHOD_KEYS:                    # lambda1, ICT's alpha, FixMatch's, the teacher's
        return spec is None or own
    return True


# ---------------------------------------------------------------- the size rule of LabelSpreading (trainables/classical.py)

MAX_RBF_ROWS = 20_000  # dense N x N float64 kernel: 3.2 GB at 20k rows, and LabelSpreading holds ~3 copies


def check_size(n_rows: int, kernel: str = "rbf") -> None:
    """ConfigError (one line, with the fix) when an rbf LabelSpreading of n_rows fit rows is too large."""
    if kernel not in ("rbf", "knn"):
        raise ConfigError(f"unknown LabelSpreading kernel {kernel!r}; choose 'rbf' or 'knn'")
    if kernel == "rbf" and n_rows > MAX_RBF_ROWS:
        gb = n_rows ** 2 * 8 / 1e9
        raise ConfigError(f"LabelSpreading's rbf kernel is a dense N x N matrix: {n_rows} training images need "
                          f"{gb:.1f} GB per copy; use kernel 'knn' or a data set of at most {MAX_RBF_ROWS} "
                          f"training images (labeled + unlabeled)")


def _coerce(f: dataclasses.Field, v: Any) -> Any:
    """Accept what Tune/JSON/CLI give (numpy scalars, ints for floats); reject the rest."""
    t = f.type if isinstance(f.type, str) else f.type.__name__
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()  # numpy scalar
    if t == "bool":
        if isinstance(v, bool):
            return v
        raise ConfigError(f"{f.name} must be true or false, got {v!r}")
    if t == "int":
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
            raise ConfigError(f"{f.name} must be an integer, got {v!r}")
        return int(v)
    if t == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{f.name} must be a number, got {v!r}")
        return float(v)
    if t == "str":
        if not isinstance(v, str):
            raise ConfigError(f"{f.name} must be a string, got {v!r}")
        return v
    return v
