"""Matmuls whose sizes change at every call (attention over a growing KV cache) run one oneDNN
primitive with run-time sizes, made once the sizes vary, instead of a new primitive per shape
(src/backend/dnnl_matmul.cpp, GenericMatmulPlan). Values against eager at every length."""

from __future__ import annotations

import math

import pytest
import torch

import xjit
import xjit.ir as ir

H, D, MAX = 4, 16, 96

# A shape the generic primitive refused would be an internal error: the frame in Python, warned.
pytestmark = pytest.mark.filterwarnings("error::UserWarning")


def plans() -> tuple[float, float]:
    s = ir.backend_stats()
    return s["library_plans"], s["library_generic_plans"]


def attend(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, n: int) -> torch.Tensor:
    # Meta-LLaMA style: keys and values are strided slices of [B, MAX, H, D] caches.
    keys = cache_k[:1, :n].transpose(1, 2)
    values = cache_v[:1, :n].transpose(1, 2)
    scores = torch.matmul(q, keys.transpose(2, 3)) / math.sqrt(D)  # a scalar post-op
    return torch.matmul(torch.softmax(scores, -1), values)


def test_growing_attention_makes_one_generic_plan_per_matmul() -> None:
    torch.manual_seed(0)
    cache_k, cache_v = torch.randn(1, MAX, H, D), torch.randn(1, MAX, H, D)
    compiled = xjit.jit(attend, dynamic=True)
    lengths = list(range(5, 45))
    before = plans()
    with torch.no_grad():
        for n in lengths:
            q = torch.randn(1, H, 1, D)
            torch.testing.assert_close(compiled(q, cache_k, cache_v, n), attend(q, cache_k, cache_v, n),
                                       rtol=1e-5, atol=1e-5)
    made, generic = (a - b for a, b in zip(plans(), before))
    # Two matmuls: each makes plans for its first two shapes and one generic plan for the
    # rest (a primitive per length would be 2 * 40).
    assert generic == 2, (made, generic)
    assert made <= 4, (made, generic)


@pytest.mark.parametrize("transposed", [False, True])
def test_varying_rows_and_inner_dim_with_strided_operands(transposed: bool) -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.matmul(a, b.t() if transposed else b))

    compiled = xjit.jit(f, dynamic=True)
    torch.manual_seed(1)
    with torch.no_grad():
        for m, k in [(3, 5), (7, 5), (2, 9), (11, 4), (1, 6), (6, 1)]:
            a = torch.randn(k, m).t()  # column-major lhs
            b = torch.randn(7, k) if transposed else torch.randn(k, 7)
            torch.testing.assert_close(compiled(a, b), f(a, b), rtol=1e-5, atol=1e-5)
