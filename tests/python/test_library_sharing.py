"""Identical oneDNN calls (an RNN unrolled over its steps) share one executable, with its plans,
instead of each holding its own (docs/backend.md); different calls do not. Values against eager."""

from __future__ import annotations

import torch

import xjit
import xjit.ir as ir


def _shared() -> int:
    return ir.backend_stats()["library_kernels_shared"]


def test_unrolled_steps_share_one_executable() -> None:
    def steps(x: torch.Tensor, w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[1], w.shape[0])
        for t in range(x.shape[0]):  # 6 identical linear + matmul pairs
            h = torch.tanh(torch.nn.functional.linear(x[t], w) + h @ u)
        return h

    g = torch.Generator().manual_seed(0)
    x, w, u = (
        torch.randn(6, 3, 8, generator=g),
        torch.randn(16, 8, generator=g),
        torch.randn(16, 16, generator=g),
    )
    before = _shared()
    got = xjit.jit(steps)(x, w, u)
    assert _shared() - before >= 5 * 2  # every step after the first reuses both calls
    torch.testing.assert_close(got, steps(x, w, u), rtol=1e-5, atol=1e-5)


def test_different_calls_are_not_shared() -> None:
    def two(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        # same shapes, different post-ops (relu, sigmoid) and a transposed operand
        return torch.relu(a @ b) + (a @ c.t()) + torch.sigmoid(a @ d)

    g = torch.Generator().manual_seed(1)
    a, b, c, d = (torch.randn(n, 8, generator=g) for n in (4, 8, 8, 8))
    before = _shared()
    got = xjit.jit(two)(a, b, c, d)
    assert _shared() == before
    torch.testing.assert_close(got, two(a, b, c, d), rtol=1e-5, atol=1e-5)
