"""Mutations the caller sees: in-place tensor ops and indexed assignment on inputs and buffers
(replayed as copies into the caller's tensors), attribute assignment, list appends, dict
updates, globals."""

from __future__ import annotations

import torch
import torch.nn as nn

from corpus import Case

LAST_CALL = ""


def x34():
    return (torch.randn(3, 4),)


def inplace_add_input(x):
    x.add_(1)
    return x * 2


def inplace_ops_chain(x, y):
    x.mul_(2).sub_(y)
    y.zero_()
    return x.sum()


def setitem_input(x):
    x[0] = 0.0
    x[:, 1] = 5.0
    x[1:3, 2:4] = torch.ones(2, 2)
    return x


def setitem_local(x):
    y = torch.zeros(4, 4)
    y[1] = x[0]
    y[2:, :2] = 1.0
    y[..., -1] = x[:, 0]
    return y


def setitem_mask(x):
    y = x.clone()
    y[y < 0] = 0.0
    return y


def setitem_index_tensor(x):
    idx = torch.tensor([0, 2])
    x[idx] = -1.0
    return x.sum()


def fill_and_copy(x, y):
    x.copy_(y * 2)
    y.fill_(3.0)
    return x + y


def iadd_operator_input(x):
    x += 1
    x *= 2
    return x


def relu_inplace_functional(x):
    y = x * 1
    torch.nn.functional.relu(y, inplace=True)
    return y


def list_append_input(x, out):
    out.append(x * 2)
    out.append(3)
    return len(out)


def dict_update_input(x, d):
    d["y"] = x + 1
    return d["x"] * 2


def global_assignment(x):
    global LAST_CALL
    LAST_CALL = "global_assignment"
    return x * 2


class Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("ema", torch.zeros(4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.steps += 1
        y = self.lin(x)
        self.ema.mul_(0.9).add_(y.mean(0).detach() * 0.1)
        self.last = y.sum()
        return y


def counter_inputs():
    return (torch.randn(3, 4), [1])


CASES = [
    Case("inplace_add_input", inplace_add_input, x34),
    Case("inplace_ops_chain", inplace_ops_chain, lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    Case("setitem_input", setitem_input, lambda: (torch.randn(4, 4),), ops=("index_put",)),
    Case("setitem_local", setitem_local, lambda: (torch.randn(4, 4),)),
    Case("setitem_mask", setitem_mask, x34, ops=("masked_fill",)),
    Case("setitem_index_tensor", setitem_index_tensor, lambda: (torch.randn(4, 3),)),
    Case("fill_and_copy", fill_and_copy, lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    Case("iadd_operator_input", iadd_operator_input, x34),
    Case("relu_inplace_functional", relu_inplace_functional, x34),
    Case("list_append_input", list_append_input, counter_inputs),
    Case("dict_update_input", dict_update_input, lambda: (torch.randn(2), {"x": torch.randn(2)})),
    Case("global_assignment", global_assignment, x34),
    Case("stateful_module", Stateful(), x34),
]
