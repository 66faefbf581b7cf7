"""Causal attention under xjit.jit with gradients: the forward and the q/k/v gradients against
eager's, at lengths that the backend splits into blocks of 32 rows (causal-products; 64 rows or
more) and that are no multiple of 32, with fewer or more queries than keys."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

F = torch.nn.functional


def attention(q: Any, k: Any, v: Any) -> Any:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0


@pytest.mark.parametrize("lq,lk", [(70, 70), (100, 100), (70, 45), (45, 70), (64, 130)])
def test_causal_attention_gradients_match_eager(lq: int, lk: int) -> None:
    g = torch.Generator().manual_seed(lq * 1000 + lk)
    q = torch.randn(2, 3, lq, 16, generator=g, requires_grad=True)
    k = torch.randn(2, 3, lk, 16, generator=g, requires_grad=True)
    v = torch.randn(2, 3, lk, 8, generator=g, requires_grad=True)
    grad_out = torch.randn(2, 3, lq, 8, generator=g)
    want = attention(q, k, v)
    want_grads = torch.autograd.grad(want, (q, k, v), grad_out)
    got = xjit.jit(attention)(q, k, v)
    got_grads = torch.autograd.grad(got, (q, k, v), grad_out)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for name, a, b in zip("qkv", got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"d{n}: {m}")
