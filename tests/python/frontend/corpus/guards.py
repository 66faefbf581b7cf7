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


CASES = [
    Case("guard_python_int", scale_by, lambda: (torch.randn(3), 2)),
    Case("guard_shape_branch", shape_branch, lambda: (torch.randn(3, 2),)),
    Case("guard_dtype_branch", dtype_branch, lambda: (torch.randn(3, dtype=torch.float64),)),
    Case("guard_module_attr", Flag(), lambda: (torch.randn(2, 4),)),
    Case("guard_list_len", list_len, lambda: (torch.randn(2), [1.0, 2.0])),
]
