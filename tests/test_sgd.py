"""trainables.sgd.Sgd against torch.optim.SGD, the implementation it stands in for: the same weights bit for
bit after each step, the same state dict, and each one's state dict loaded by the other."""
import copy

import pytest
import torch

from search_spaces.common import QUICK
from trainables.config import TrainConfig
from trainables.models import build_model
from trainables.sgd import Sgd
from trainables.trainer import param_groups


def _net(seed=0):
    torch.manual_seed(seed)
    cfg = TrainConfig(**{**QUICK, "vd": True})  # VD: log_sigma2 in the undecayed group, as the trainer has it
    return build_model(cfg)


def _pair(momentum=0.9, nesterov=True, wd=2.3e-5):
    a, b = _net(), _net()
    ours = Sgd(param_groups(a, wd), lr=0.16, momentum=momentum, nesterov=nesterov)
    theirs = torch.optim.SGD(param_groups(b, wd), lr=0.16, momentum=momentum, nesterov=nesterov)
    return a, ours, b, theirs


def _step(net, opt, step, lr):
    """A real loss on a fixed batch of this step (same for both nets), then the update at this lr."""
    g = torch.Generator().manual_seed(100 + step)
    x, y = torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    torch.manual_seed(step)  # the same noise draws (input noise, VD, dropout) in both nets' passes
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()


def _same_weights(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def _same_state(s, t):
    assert s["param_groups"] == t["param_groups"]
    assert list(s["state"]) == list(t["state"])
    for i in s["state"]:
        assert s["state"][i].keys() == t["state"][i].keys()
        assert all(torch.equal(s["state"][i][k], t["state"][i][k]) for k in s["state"][i])


@pytest.mark.parametrize("momentum, nesterov", [(0.9, True), (0.9, False), (0.0, False)])
def test_each_step_is_torch_sgds_bit_for_bit(momentum, nesterov):
    a, ours, b, theirs = _pair(momentum, nesterov)
    assert _same_weights(a, b)
    for step, lr in enumerate([0.01, 0.16, 0.16, 0.05, 0.0]):
        _step(a, ours, step, lr)
        _step(b, theirs, step, lr)
        assert _same_weights(a, b), f"step {step}"
        _same_state(ours.state_dict(), theirs.state_dict())
    before = [p.clone() for p in a.parameters()]
    _step(a, ours, 9, 0.1)
    assert not all(torch.equal(p, q) for p, q in zip(before, a.parameters()))  # it does update


def test_a_parameter_without_a_gradient_is_left_alone_as_sgd_leaves_it():
    a, ours, b, theirs = _pair()
    for net, opt in ((a, ours), (b, theirs)):
        list(net.parameters())[-1].requires_grad_(False)  # the last layer's bias: no gradient from now on
        _step(net, opt, 0, 0.1)
        _step(net, opt, 1, 0.1)
    assert _same_weights(a, b)
    _same_state(ours.state_dict(), theirs.state_dict())
    assert len(ours.state_dict()["state"]) < sum(len(g["params"]) for g in ours.param_groups)


@pytest.mark.parametrize("direction", ["torch to ours", "ours to torch"])
def test_each_loads_the_others_state_and_continues_identically(direction):
    a, ours, b, theirs = _pair()
    for step in range(3):
        _step(a, ours, step, 0.1)
        _step(b, theirs, step, 0.1)
    # a fresh pair of optimizers over copies of the trained nets, each loading the other kind's state
    a2, b2 = _net(1), _net(2)
    a2.load_state_dict(a.state_dict())
    b2.load_state_dict(b.state_dict())
    ours2 = Sgd(param_groups(a2, 2.3e-5), lr=1.0, momentum=0.5, nesterov=True)  # the saved values win
    theirs2 = torch.optim.SGD(param_groups(b2, 2.3e-5), lr=1.0, momentum=0.5, nesterov=True)
    saved = (theirs if direction == "torch to ours" else ours).state_dict()
    for opt in (ours2, theirs2):  # a checkpoint's copy each (a state dict holds the optimizer's own tensors)
        opt.load_state_dict(copy.deepcopy(saved))
    _same_state(ours2.state_dict(), theirs2.state_dict())
    for step in range(3, 6):
        _step(a2, ours2, step, 0.1)
        _step(b2, theirs2, step, 0.1)
        _step(b, theirs, step, 0.1)  # the uninterrupted run
    assert _same_weights(a2, b2) and _same_weights(b2, b)


def test_a_state_of_other_groups_is_refused():
    a, ours, _, _ = _pair()
    _step(a, ours, 0, 0.1)
    other = Sgd([{"params": list(a.parameters())}], lr=0.1, momentum=0.9, nesterov=True)
    with pytest.raises(ValueError, match="other parameter groups"):
        other.load_state_dict(ours.state_dict())
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum > 0"):
        Sgd(param_groups(a, 0.0), lr=0.1, momentum=0.0, nesterov=True)
