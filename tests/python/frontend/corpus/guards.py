"""Guards: Python values, shapes, dtypes and module attributes the capture depends on; a second
call with other values must recompile (or run the right entry), never reuse a wrong graph."""

from __future__ import annotations

import torch
import torch.nn as nn

from corpus import Case


def scale_by(x, k):
    return x * k


def shape_branch(x):
    if x.shape[0] > 2:
        return x.sum(0)
    return x.sum(1)


def dtype_branch(x):
    if x.dtype == torch.float64:
        return x * 2
    return x + 1


class Flag(nn.Module):
    def __init__(self):
        super().__init__()
        self.use_bias = True
        self.b = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x + self.b if self.use_bias else x


def list_len(x, items):
    for it in items:
        x = x + it
    return x


def dyn_elementwise(x):
    return x * 2 + x.shape[0]


def dyn_view(x):
    b = x.shape[0]
    return x.view(b, -1).sum(1)


def dyn_mean(x):
    return x.sum(0) / x.shape[0]


def dyn_cat(x, y):
    return torch.cat([x, y], dim=1).relu()


def dyn_linear(x, w):
    return torch.nn.functional.linear(x, w).softmax(-1)


def dyn_branch(x):
    if x.shape[0] > 2:  # guarded (3 <= s0): sizes on the same side reuse the graph
        return x + 1
    return x - 1


def dyn_reshape_keep(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h * w).mean(-1)


def dyn_zeros_like(x):
    return torch.zeros_like(x) + x.new_ones(x.shape)


class FlagOff(Flag):
    pass


def x_rows(n):
    return lambda: (torch.randn(n, 3),)


CASES = [
    Case("guard_python_int", scale_by, lambda: (torch.randn(3), 2),
         second=lambda: (torch.randn(3), 3)),
    Case("guard_python_float", scale_by, lambda: (torch.randn(3), 0.5),
         second=lambda: (torch.randn(3), 1)),  # int vs float: TypeIs guard
    Case("guard_shape_branch", shape_branch, lambda: (torch.randn(3, 2),),
         second=lambda: (torch.randn(2, 2),)),
    Case("guard_dtype_branch", dtype_branch, lambda: (torch.randn(3, dtype=torch.float64),),
         second=lambda: (torch.randn(3),)),
    Case("guard_module_attr", Flag(), lambda: (torch.randn(2, 4),)),
    Case("guard_list_len", list_len, lambda: (torch.randn(2), [1.0, 2.0]),
         second=lambda: (torch.randn(2), [1.0, 2.0, 3.0])),
    Case("guard_list_value", list_len, lambda: (torch.randn(2), [1.0, 2.0]),
         second=lambda: (torch.randn(2), [1.0, 5.0])),
    Case("guard_same_inputs", scale_by, lambda: (torch.randn(3), 2),
         second=lambda: (torch.randn(3), 2), recompile=False),
    Case("guard_rank_change", dtype_branch, lambda: (torch.randn(3),),
         second=lambda: (torch.randn(3, 1),)),
    Case("dyn_elementwise", dyn_elementwise, x_rows(4), dynamic=True, second=x_rows(7),
         recompile=False),
    Case("dyn_view", dyn_view, lambda: (torch.randn(4, 3, 2),), dynamic=True,
         second=lambda: (torch.randn(6, 3, 2),), recompile=False),
    Case("dyn_mean", dyn_mean, x_rows(5), dynamic=True, second=x_rows(8), recompile=False),
    Case("dyn_cat", dyn_cat, lambda: (torch.randn(4, 3), torch.randn(4, 2)), dynamic=True,
         second=lambda: (torch.randn(6, 3), torch.randn(6, 2)), recompile=False),
    Case("dyn_linear", dyn_linear, lambda: (torch.randn(5, 3), torch.randn(4, 3)), dynamic=True,
         second=lambda: (torch.randn(9, 3), torch.randn(4, 3)), recompile=False),
    Case("dyn_branch_guarded", dyn_branch, x_rows(4), dynamic=True, second=x_rows(6),
         recompile=False),
    Case("dyn_branch_flips", dyn_branch, x_rows(4), dynamic=True, second=x_rows(2)),
    Case("dyn_reshape_keep", dyn_reshape_keep, lambda: (torch.randn(2, 3, 4, 5),), dynamic=True,
         second=lambda: (torch.randn(3, 3, 6, 5),), recompile=False),
    Case("dyn_zeros_like", dyn_zeros_like, x_rows(4), dynamic=True, second=x_rows(5),
         recompile=False),
    Case("auto_dynamic_after_size_change", dyn_elementwise, x_rows(4), second=x_rows(7)),
]
