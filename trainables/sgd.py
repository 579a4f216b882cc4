"""SGD with Nesterov momentum as `torch.optim.SGD` computes it, without importing torch._dynamo.

Every `torch.optim.Optimizer` imports torch._dynamo on its first call (its constructor's
`add_param_group` and its `step` are wrapped to keep dynamo out of them), an import of seconds that
every trial process would pay before its first step. This class calls the
same update, `torch.optim.sgd.sgd` (the functional form that `SGD.step` calls, with the same
arguments), so a step is bit for bit `torch.optim.SGD`'s on every device, and its state dict has
`SGD`'s layout, so each loads the other's (a checkpoint holding `SGD`'s state resumes).
tests/test_sgd.py holds both against `torch.optim.SGD`.
"""
from __future__ import annotations

import torch
from torch.optim.sgd import sgd


class Sgd:
    """param_groups: dicts with "params" and optionally "weight_decay" (the trainer sets each group's
    "lr" before every step, as with torch.optim.SGD)."""

    def __init__(self, groups: list[dict], lr: float, momentum: float, nesterov: bool, weight_decay: float = 0):
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum requires a momentum > 0")
        # torch.optim.SGD's hyperparameters, in its order; a group's own values win
        defaults = {"lr": lr, "momentum": momentum, "dampening": 0, "weight_decay": weight_decay, "nesterov": nesterov,
                    "maximize": False, "foreach": None, "differentiable": False, "fused": None}
        self.param_groups = [{**g, "params": list(g["params"]), **{k: v for k, v in defaults.items() if k not in g}}
                             for g in groups]
        self.state: dict[torch.Tensor, dict] = {}  # param -> {"momentum_buffer": tensor}, once it has stepped

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        for g in self.param_groups:
            params = [p for p in g["params"] if p.grad is not None]  # SGD skips a parameter without a gradient
            bufs = [self.state.get(p, {}).get("momentum_buffer") for p in params]
            sgd(params, [p.grad for p in params], bufs, weight_decay=g["weight_decay"], momentum=g["momentum"],
                lr=g["lr"], dampening=g["dampening"], nesterov=g["nesterov"], maximize=g["maximize"],
                has_sparse_grad=any(p.grad.is_sparse for p in params), foreach=g["foreach"], fused=g["fused"])
            if g["momentum"] != 0:
                for p, buf in zip(params, bufs):
                    self.state.setdefault(p, {})["momentum_buffer"] = buf

    def state_dict(self) -> dict:
        """torch.optim.Optimizer's layout: parameters numbered across the groups in order."""
        index, groups, n = {}, [], 0
        for g in self.param_groups:
            ids = list(range(n, n + len(g["params"])))
            index.update(zip(map(id, g["params"]), ids))
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ids})
            n += len(ids)
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict["param_groups"]
        if [len(g["params"]) for g in saved] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("the saved optimizer state has other parameter groups than this model's")
        params = [p for g in self.param_groups for p in g["params"]]
        self.state = {}
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            self.state[p] = {k: v.to(device=p.device, dtype=p.dtype) if torch.is_tensor(v) and p.is_floating_point()
                             else v for k, v in s.items()}
        for g, s in zip(self.param_groups, saved):
            g.update({k: v for k, v in s.items() if k != "params"})
