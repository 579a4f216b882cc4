"""Seeds of one cell trained together: S copies of a network as one grouped network, one step for all.

Hypothesis: a small network leaves a CPU thread (and a GPU) idle between its small kernels; S seeds'
convolutions as one grouped convolution of S times the channels fill it, so a seed-step costs less
than a step of one seed alone, while every seed's numbers stay those of its own trial.

    python -m trainables.packed --seeds 0,1,2,3 --method mt --mur direct    # digits, CPU, the quick preset
    pytest tests/test_packed.py -q

How the seeds stay apart:
- `PackedTrainer` builds one `Trainer` per seed (trainables/trainer.py) and keeps it: its init (drawn
  from its own seed), labeled subset, batch order, augmentation generator, step counter, interval sums,
  NaN check, evaluation and checkpoint are that seed's alone. Only the weights train packed.
- `pack_model`: conv weights of the seeds concatenated along the output channels and applied as one
  convolution with groups=S (seed s reads only its own input channels); BatchNorm over S x C channels
  (each seed's statistics over its own batch); the classifier one batched matmul. A batch of S x B
  images (seed-major) goes in, S x B logits come out, so per-sample code (entropy, MUR's direct point,
  the g0 norm) runs unchanged.
- Losses: every term is a per-seed mean, shape (S,); the backward runs on their sum, so seed s's
  gradient is the gradient of its own loss. SGD (momentum, Nesterov, weight decay) and the EMA act
  per element, so on packed tensors they are the per-seed updates.
- Noise inside the network (input noise, dropout, VD's local reparameterisation) is one draw over the
  packed activations from torch's global generator, seeded with the pack's first seed: each seed gets
  independent noise of the same law as alone, but not the draws its single trial would make. With
  those off a pack equals its seeds' single trials to float tolerance (tests/test_packed.py).
- A seed whose loss turns non-finite raises its own `Diverged` and leaves the pack; the others go on.
Supported: method mt, mur none or direct, vd on or off, ConvNet-13 and the digits network, eager or
compile="model" or "step" ("auto": eager); anything else is refused with the reason (`pack_refusal`) and runs as single trials.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from trainables import schedules
from trainables.config import ConfigError, TrainConfig
from trainables.data import Dataset
from trainables.mur import entropy, frozen_bn_stats, virtual_point
from trainables.trainer import Diverged, Trainer, param_groups, resolve_device
from trainables.variational import K1, K2, K3, VDConv2d, VDLinear, mean_weights, vd_layers

PACK_METHODS = ("mt",)
PACK_MUR = ("none", "direct")
PACK_ARCHS = ("convnet13", "convnet_small")
PACK_COMPILE = ("none", "model", "step")


class PackError(ValueError):
    """Configs that cannot train as one pack; the message says why (they run as single trials)."""


def pack_refusal(cfgs: list[TrainConfig]) -> str | None:
    """Why these configs cannot train as one pack, or None where they can."""
    if not cfgs:
        return "no configs to pack"
    c = cfgs[0]
    rest = {k: v for k, v in c.to_dict().items() if k != "seed"}
    for other in cfgs[1:]:
        diff = [k for k, v in other.to_dict().items() if k != "seed" and rest.get(k) != v]
        if diff:
            return f"the configs differ in {diff}, not only in seed: one pack trains one cell"
    seeds = [x.seed for x in cfgs]
    if len(set(seeds)) != len(seeds):
        return f"seeds repeat in {seeds}"
    checks = [(c.method in PACK_METHODS, f"method {c.method!r} (packs train {PACK_METHODS})"),
              (c.mur in PACK_MUR, f"mur {c.mur!r} (packs train {PACK_MUR})"),
              (c.arch in PACK_ARCHS, f"arch {c.arch!r} (packs train {PACK_ARCHS})"),
              (c.compile in (*PACK_COMPILE, "auto"), f"compile {c.compile!r} (packs run {PACK_COMPILE}; auto: eager)"),
              (not c.bn_clean_pass, "bn_clean_pass (its extra pass is not packed)"),
              (not c.bf16, "bf16 (not packed)")]
    for ok, what in checks:
        if not ok:
            return f"{what}: train these seeds as single trials"
    return None


# ---------------------------------------------------------------------------- the packed network

class PackedLinear(nn.Module):
    """S linear maps (K, c) as one: (B, S*c) -> (B, S*K). weight (S*K, c): seed s's rows s*K..(s+1)*K."""

    def __init__(self, S: int, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.S = S
        self.weight = nn.Parameter(weight)  # (S*K, c)
        self.bias = nn.Parameter(bias)      # (S*K,)

    def forward(self, x):  # (B, S*c) -> (B, S*K)
        return _packed_linear(x, self.weight, self.bias, self.S)


def _packed_linear(x, weight, bias, S):
    B = x.shape[0]
    w = weight.view(S, -1, weight.shape[-1])                             # (S, K, c)
    out = torch.einsum("bsc,skc->bsk", x.view(B, S, -1), w)              # (B, S, K)
    if bias is not None:
        out = out + bias.view(S, -1)
    return out.reshape(B, -1)                                            # (B, S*K)


class PackedVDConv2d(VDConv2d):
    """S VD convolutions as one grouped one: theta, log_sigma2 (S*Cout, Cin, k, k)."""

    def __init__(self, S: int, single: VDConv2d):
        super().__init__(single.in_channels, S * single.out_channels, single.kernel_size, single.stride,
                         single.padding, bias=single.bias is not None)  # theta (S*Cout, Cin, k, k): groups=S
        self.S = S

    def op(self, x, weight, bias):
        return F.conv2d(x, weight, bias, self.stride, self.padding, groups=self.S)


class PackedVDLinear(VDLinear):
    """S VD linear maps as one: theta, log_sigma2 (S*K, c); (B, S*c) -> (B, S*K)."""

    def __init__(self, S: int, single: VDLinear):
        super().__init__(single.in_features, S * single.out_features, bias=single.bias is not None)
        self.S = S

    def op(self, x, weight, bias):
        return _packed_linear(x, weight, bias, self.S)


def _packed_layer(S: int, m: nn.Module) -> nn.Module:
    """The packed counterpart of one layer of a single network (weights set by load_packed)."""
    if isinstance(m, VDConv2d):
        return PackedVDConv2d(S, m)
    if isinstance(m, VDLinear):
        return PackedVDLinear(S, m)
    if isinstance(m, nn.Conv2d):
        return nn.Conv2d(S * m.in_channels, S * m.out_channels, m.kernel_size, m.stride, m.padding,
                         groups=S * m.groups, bias=m.bias is not None)
    if isinstance(m, nn.BatchNorm2d):
        return nn.BatchNorm2d(S * m.num_features, eps=m.eps, momentum=m.momentum)
    if isinstance(m, nn.Linear):
        return PackedLinear(S, torch.empty(S * m.out_features, m.in_features), torch.empty(S * m.out_features))
    if len(list(m.parameters())) or len(list(m.buffers())):
        raise PackError(f"cannot pack layer {type(m).__name__}: it has weights the packer does not know")
    return copy.deepcopy(m)  # noise, dropout, activation, pooling: per element or per channel


class PackedNet(nn.Module):
    """S networks of one architecture as one: (S*B, C, H, W) seed-major -> (S*B, K) logits.

    Inside, the batch is (B, S*C, H, W): seed s's images on channels s*C..(s+1)*C. Parameter and buffer
    names are the single network's, each tensor the seeds' tensors concatenated along dim 0."""

    def __init__(self, singles: list[nn.Module], channels_last: bool):
        super().__init__()
        self.S, self.channels_last = len(singles), channels_last
        self.layers = nn.Sequential(*(_packed_layer(self.S, m) for m in singles[0].layers))
        load_packed(self, [m.state_dict() for m in singles])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (S*B, C, H, W) -> (S*B, K)
        S = self.S
        B = x.shape[0] // S
        h = x.view(S, B, *x.shape[1:]).transpose(0, 1).reshape(B, S * x.shape[1], *x.shape[2:])  # (B, S*C, H, W)
        if self.channels_last:
            h = h.contiguous(memory_format=torch.channels_last)
        out = self.layers(h)                                                       # (B, S*K)
        return out.view(B, S, -1).transpose(0, 1).reshape(S * B, -1)              # (S*B, K)


@torch.no_grad()
def load_packed(packed: nn.Module, states: list[dict]) -> None:
    """Copy S single state dicts into the packed module (concatenated along dim 0; scalars from seed 0)."""
    for name, t in packed.state_dict(keep_vars=True).items():
        parts = [s[name] for s in states]
        t.copy_(parts[0] if t.dim() == 0 else torch.cat(parts))


def unpacked_state(packed: nn.Module, S: int, s: int) -> dict:
    """Seed s's single state dict, cut from the packed module's."""
    return {name: (t if t.dim() == 0 else t.chunk(S)[s]).detach().clone() for name, t in packed.state_dict().items()}


def packed_kl(model: nn.Module, S: int) -> torch.Tensor:
    """Per-seed variational.kl_divergence: (S,), seed s's KL summed over its VD weights / their count."""
    total, count = None, 0
    for m in vd_layers(model):
        la = m.log_alpha
        neg_kl = K1 * torch.sigmoid(K2 + K3 * la) - 0.5 * F.softplus(-la) - K1
        s = -neg_kl.reshape(S, -1).sum(1)  # (S,)
        total = s if total is None else total + s
        count += la.numel() // S
    return total / count


def _per_seed_mse(logits, target, S):  # (S*B, K), (S*B, K) -> (S,) methods.softmax_mse per seed
    return (logits.float().softmax(-1) - target).pow(2).sum(-1).view(S, -1).mean(1)


def packed_loss_terms(cfg: TrainConfig, S: int, student, teacher, x, x2, y_l):
    """methods.loss_terms for mt (+VD, +MUR direct, +entmin), each term per seed: {term: (S,)}, ||g0|| (S, B).

    x, x2 (S*B, C, H, W) seed-major; y_l (S, L). The keys come in loss_terms' order."""
    L, B = y_l.shape[1], x.shape[0] // S
    mur = cfg.mur != "none"
    if mur and not x.requires_grad:  # a compiled step sets it before its graph (dynamo breaks here)
        x.requires_grad_(True)
    logits = student(x)                                   # (S*B, K)
    lg = logits.view(S, B, -1)                            # (S, B, K)
    K = lg.shape[-1]
    xent = F.cross_entropy(lg[:, :L].reshape(S * L, K).float(), y_l.reshape(-1), reduction="none")
    terms = {"xent": xent.view(S, L).mean(1)}
    with torch.no_grad(), mean_weights(teacher):
        target = teacher(x2).float().softmax(-1)          # (S*B, K)
    terms["cons"] = _per_seed_mse(logits, target, S)
    if cfg.vd:
        terms["kl"] = packed_kl(student, S)
    if cfg.entmin_coef > 0 and B > L:
        terms["entmin"] = entropy(lg[:, L:].float()).mean(1)
    g0_norm = None
    if mur:
        g0 = torch.autograd.grad(entropy(logits).sum(), x, retain_graph=True)[0]  # (S*B, C, H, W)
        g0_norm = g0.flatten(1).norm(dim=1).view(S, B).detach()                   # (S, B)
        x_star = virtual_point(student, x.detach(), cfg.mur_radius, method="direct", g0=g0)
        with frozen_bn_stats(student):
            terms["mur"] = _per_seed_mse(student(x_star), logits.detach().float().softmax(-1), S)
    return terms, g0_norm


def _compiled_step(dynamo):
    """packed_loss_terms under torch.compile, as trainer.compile_for_training's "step": MUR's input
    gradient traced where this torch has trace_autograd_ops, x's requires_grad set outside the graph."""
    compiled = torch.compile(packed_loss_terms, dynamic=False)
    trace_grad = {"trace_autograd_ops": True} if hasattr(dynamo.config, "trace_autograd_ops") else {}

    def step(cfg, S, student, teacher, x, x2, y_l):
        if cfg.mur != "none":
            x.requires_grad_(True)
        with dynamo.config.patch(**trace_grad):
            return compiled(cfg, S, student, teacher, x, x2, y_l)

    return step


# ---------------------------------------------------------------------------- the trainer

class PackedTrainer:
    """Train S seeds of one config together. `trainers[s]` is seed s's own Trainer, kept in step:
    `run_interval()` returns one result per seed (an evaluation, or a Diverged), `save(paths)` writes
    each seed's own checkpoint in Trainer's format, which `Trainer.load` (or a new pack) resumes."""

    def __init__(self, cfgs: list[TrainConfig], data: Dataset | None = None):
        why = pack_refusal(cfgs)
        if why:
            raise PackError(why)
        self.cfg = cfgs[0]
        self.trainers: list[Trainer] = []
        for c in cfgs:  # each seeds torch and draws its own init, as its single trial does
            self.trainers.append(Trainer(TrainConfig.from_dict({**c.to_dict(), "compile": "none"}),
                                         data if data is not None or not self.trainers else self.trainers[0].data))
        self.device = resolve_device(self.cfg.device)
        self.compile_mode = "none" if self.cfg.compile in ("none", "auto") else self.cfg.compile
        torch.manual_seed(cfgs[0].seed)  # the pack's in-network noise stream (module docstring)
        self.live = list(range(len(cfgs)))  # seeds still training (indices into trainers)
        self.results: dict[int, dict] = {}  # index -> the Diverged result of a seed that left the pack
        self._pack()

    @property
    def step(self) -> int:
        return self.trainers[self.live[0]].step if self.live else self.trainers[0].step

    @property
    def done(self) -> bool:
        return not self.live or self.step >= self.cfg.steps

    # ---------------------------------------------------------------- packing
    def _pack(self):
        """(Re)build the packed student, teacher and optimizer from the live seeds' Trainers."""
        ts = [self.trainers[i] for i in self.live]
        if len({t.step for t in ts}) > 1:
            raise PackError(f"seeds at different steps {[t.step for t in ts]} cannot train as one pack")
        cl = self.cfg.channels_last
        self.S = len(ts)
        self.student = PackedNet([t.student for t in ts], cl).to(self.device)
        self.teacher = PackedNet([t.teacher for t in ts], cl).to(self.device)
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        if cl:
            self.student = self.student.to(memory_format=torch.channels_last)
            self.teacher = self.teacher.to(memory_format=torch.channels_last)
        self._ema_params = (list(self.teacher.parameters()), list(self.student.parameters()))
        self._ema_buffers = (list(self.teacher.buffers()), list(self.student.buffers()))
        self.opt = torch.optim.SGD(param_groups(self.student, self.cfg.weight_decay, self.cfg.weight_decay_scope),
                                   lr=self.cfg.lr, momentum=self.cfg.momentum, nesterov=self.cfg.momentum > 0)
        names = [n for n, _ in self.student.named_parameters()]
        packed_params = dict(self.student.named_parameters())
        for n in names:  # momentum buffers: the seeds' own, concatenated
            bufs = [t.opt.state.get(dict(t.student.named_parameters())[n], {}).get("momentum_buffer") for t in ts]
            if all(b is not None for b in bufs):
                self.opt.state[packed_params[n]]["momentum_buffer"] = torch.cat(bufs).clone()
        self._student_fn, self._teacher_fn, self._loss_fn = self.student, self.teacher, packed_loss_terms
        if self.compile_mode != "none":  # as trainer.compile_for_training's model and step
            import torch._dynamo as dynamo

            dynamo.reset()  # one compiled trainer per process: a repack (a seed gone) compiles anew
            if self.compile_mode == "model":
                self._student_fn = torch.compile(self.student, dynamic=False)
                self._teacher_fn = torch.compile(self.teacher, dynamic=False)
            else:
                self._loss_fn = _compiled_step(dynamo)

    @torch.no_grad()
    def _unpack(self):
        """Write the packed weights, statistics and momentum back into the live seeds' Trainers."""
        params = dict(self.student.named_parameters())
        for k, i in enumerate(self.live):
            t = self.trainers[i]
            t.student.load_state_dict(unpacked_state(self.student, self.S, k))
            t.teacher.load_state_dict(unpacked_state(self.teacher, self.S, k))
            for n, p in t.student.named_parameters():
                buf = self.opt.state.get(params[n], {}).get("momentum_buffer")
                if buf is not None:
                    t.opt.state[p]["momentum_buffer"] = buf.chunk(self.S)[k].clone()

    def _drop(self, gone: dict[int, Diverged]):
        """The diverged seeds leave the pack: each gets its own diverged result; the rest repack."""
        self._unpack()
        for i, e in gone.items():
            self.results[i] = {"step": e.step, "diverged": 1, "diverged_step": e.step, "diverged_term": e.term,
                               "test_error": math.nan, "done": True, "seed": self.trainers[i].cfg.seed}
        self.live = [i for i in self.live if i not in gone]
        if self.live:
            self._pack()

    # ---------------------------------------------------------------- training
    def train_step(self):
        """One step of every live seed: its own batch, its own loss, one packed backward and update."""
        cfg, ts = self.cfg, [self.trainers[i] for i in self.live]
        step = ts[0].step
        self.student.train()
        self.teacher.train()
        for g in self.opt.param_groups:
            g["lr"] = schedules.lr_at(step, cfg)
        self.opt.zero_grad(set_to_none=True)
        views = [t._views() for t in ts]                      # each seed's own batch and augmentation
        x = torch.cat([v.x for v in views])                   # (S*B, C, H, W) seed-major
        x2 = torch.cat([v.x2 for v in views])                 # (S*B, C, H, W)
        y_l = torch.stack([v.y_l for v in views])             # (S, L)
        terms, g0_norm = self._loss_fn(cfg, self.S, self._student_fn, self._teacher_fn, x, x2, y_l)
        coef = ts[0].coefficients(step)
        total = sum(coef[k] * t for k, t in terms.items())    # (S,) each seed's own total
        gone = {}
        for k, (i, t) in enumerate(zip(self.live, ts)):
            try:
                t._queue_finite_check({n: v[k] for n, v in terms.items()}, total[k])
            except Diverged as e:
                gone[i] = e
        total.sum().backward()                                # seed s's gradient: d total[s]
        decay = schedules.ema_decay_at(step, cfg)
        with torch.no_grad():  # EMA before the update, as Trainer (Mean Teacher)
            torch._foreach_lerp_(*self._ema_params, 1.0 - decay)
            if cfg.teacher_bn == "student":
                torch._foreach_copy_(*self._ema_buffers)
        self.opt.step()
        with torch.no_grad():
            for k, t in enumerate(ts):
                t.step += 1
                t._sums["total"] += total[k].detach()
                for n, v in terms.items():
                    t._sums[n] += v[k].detach().float()
                if g0_norm is not None:
                    t._g0_sum += g0_norm[k].mean()
                t._n += 1
        if gone:
            self._drop(gone)

    def run_interval(self) -> dict[int, dict]:
        """Train every live seed to the next evaluation point and evaluate each; {index: result} of the
        seeds that were live at the start (a diverged seed's result says so). Per seed, wall_time is
        its share of the pack's time (the pack's time / its seeds)."""
        t0 = time.perf_counter()
        start = list(self.live)
        n0 = self.step
        target = min(self.cfg.steps, (n0 // self.cfg.eval_every + 1) * self.cfg.eval_every)
        while self.live and self.step < target:
            self.train_step()
        gone = {}
        for i in self.live:
            try:
                self.trainers[i].check_finite()
            except Diverged as e:
                gone[i] = e
        if gone:
            self._drop(gone)
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        self._unpack()
        out = {}
        for i in start:
            if i in self.results and i not in self.live:
                out[i] = self.results[i]
                continue
            t = self.trainers[i]
            t.wall_time += dt / len(start)
            out[i] = {**t.evaluate(), "steps_per_s": (t.step - n0) / dt if dt > 0 else math.nan,
                      "pack_size": len(start)}
        return out

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    # ---------------------------------------------------------------- checkpoints
    def save(self, paths: list) -> None:
        """Each live seed's own checkpoint (Trainer's format) at paths[index]."""
        self._unpack()
        for i in self.live:
            self.trainers[i].save(paths[i])

    def load(self, paths: list) -> None:
        """Resume every seed from its own checkpoint (Trainer.save's, packed or not), then repack."""
        for t, p in zip(self.trainers, paths):
            t.load(p)
        self._pack()


def train_packed(cfgs: list[TrainConfig], data: Dataset | None = None, log=print) -> list[dict]:
    """trainer.train for each seed of a pack: the last evaluation of each (diverged=1 where it diverged)."""
    pt = PackedTrainer(cfgs, data)
    last: dict[int, dict] = {}
    while not pt.done:
        for i, out in pt.run_interval().items():
            last[i] = out
            if log and not out.get("diverged"):
                log(f"[packed] seed {pt.trainers[i].cfg.seed:>3} step {out['step']:>6}  val_error "
                    f"{out['val_error']:6.2f}  test_error {out['test_error']:6.2f}  loss {out['loss_total']:.4f}")
            elif log:
                log(f"[packed] seed {pt.trainers[i].cfg.seed:>3} diverged at step {out['diverged_step']}")
    return [last[i] for i in range(len(cfgs))]


def main(argv=None):
    from search_spaces.common import QUICK

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2,3", help="comma-separated seeds of one pack")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field over QUICK")
    p.add_argument("--method", default="mt")
    p.add_argument("--mur", default="none")
    a = p.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
        over = dict(kv.split("=", 1) for kv in a.set)
        base = {**QUICK, "method": a.method, "mur": a.mur}
        for k, v in over.items():
            if k not in TrainConfig.__dataclass_fields__:
                raise PackError(f"--set {k}: no such TrainConfig field; see python -m trainables.trainer --help")
            typ = type(base.get(k, TrainConfig.__dataclass_fields__[k].default))
            base[k] = (v.lower() in ("1", "true")) if typ is bool else typ(v)
        cfgs = [TrainConfig.from_dict({**base, "seed": s}) for s in seeds]
        why = pack_refusal(cfgs)
        if why:
            raise PackError(why)
    except (ValueError, KeyError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2)
    print(json.dumps(train_packed(cfgs), indent=1, default=str))


if __name__ == "__main__":
    main()
