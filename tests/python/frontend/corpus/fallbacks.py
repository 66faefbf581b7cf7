"""PyTorch operations the op table does not know become external_call nodes run by PyTorch at
run time (output types from meta tensors), so they do not break the graph."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from corpus import Case


def x34():
    return (torch.randn(3, 4),)


def unknown_torch_function(x):
    return torch.erfinv(x.clamp(-0.9, 0.9)) + 1


def unknown_tensor_method(x):
    return x.logcumsumexp(1).relu()


def einsum_fallback(x, y):
    # A diagonal (a label repeated in one operand): the form einsum's lowering leaves to PyTorch.
    return torch.einsum("ii->i", (x @ y.t())[:, :3]) * 2


def functional_python_fallback(x):
    return F.normalize(x, dim=1) + F.glu(x, dim=1).sum()


def multi_output_fallback(x):
    q, r = torch.linalg.qr(x)
    return q.abs().sum() + r.abs().sum()


def random_fallback(x):
    return x + torch.randn(3, 4) * 0


def shift_operators(x):
    i = (x * 8).int()
    return i << 2, i >> 1


def fallback_between_ops(x):
    y = torch.cosh(x) * 2
    z = torch.special.i0(y)
    return z.log()


def cumulative_max(x):
    return torch.cummax(x, dim=0).values + 1


CASES = [
    Case("unknown_torch_function", unknown_torch_function, x34, fallback=True),
    Case("unknown_tensor_method", unknown_tensor_method, x34, fallback=True),
    Case("einsum_fallback", einsum_fallback, lambda: (torch.randn(3, 4), torch.randn(5, 4)),
         fallback=True),
    Case("functional_python_fallback", functional_python_fallback, x34, fallback=True),
    Case("multi_output_fallback", multi_output_fallback, lambda: (torch.randn(4, 3),), fallback=True,
         atol=1e-4),
    Case("random_fallback", random_fallback, x34, fallback=True),
    Case("shift_operators", shift_operators, x34, fallback=True),
    Case("fallback_between_ops", fallback_between_ops, x34, fallback=True),
    Case("cumulative_max", cumulative_max, x34, fallback=True),
]
