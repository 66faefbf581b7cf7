"""Reductions of permuted views (src/backend/lower_fusion.cpp, chooseInnerDim): the kernel's
innermost loop runs along the dim that has unit stride in memory, so the fast (vectorized) version
applies to x.permute(...).sum(...) and friends instead of the general strided one. Values are
checked against PyTorch eager over odd sizes, lane dims longer than one 1024-lane block, kept and
reduced unit dims, fused consumers, and ``general_versions`` in ``xjit.ir.backend_stats()`` must
not grow (the fast version ran)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")
ir = pytest.importorskip("xjit.ir")


def sum0_t(a: torch.Tensor) -> torch.Tensor:
    return a.permute(0, 2, 1).sum(0).t() * 2


def mean0(a: torch.Tensor) -> torch.Tensor:
    return a.permute(0, 2, 1).mean(0) + 1


def amax0(a: torch.Tensor) -> torch.Tensor:
    return a.permute(0, 2, 1).amax(0)


def amin0_keep(a: torch.Tensor) -> torch.Tensor:
    return a.permute(0, 2, 1).amin(0, keepdim=True)


def prod0(a: torch.Tensor) -> torch.Tensor:
    return a.permute(0, 2, 1).prod(0)


def var0(a: torch.Tensor) -> torch.Tensor:
    return a.permute(0, 2, 1).var(0)


def sum_unit_dim(a: torch.Tensor) -> torch.Tensor:  # reduces the dim with unit stride
    return torch.tanh(a.permute(0, 2, 1)).sum(1)


def sum_two_dims(a: torch.Tensor) -> torch.Tensor:
    return a.permute(2, 0, 1).sum((1, 2))


def softmax_t(a: torch.Tensor) -> torch.Tensor:
    return torch.softmax(a[0].t(), dim=1)


def sum_all_t(a: torch.Tensor) -> torch.Tensor:
    return (a[0].t() * 3).sum()


CASES = [sum0_t, mean0, amax0, amin0_keep, prod0, var0, sum_unit_dim, sum_two_dims, softmax_t,
         sum_all_t]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(5, 37, 1100), (3, 8, 33), (2, 1, 7)])
def test_permuted_reductions_match_eager_on_the_fast_version(
    fn, shape, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XJIT_NO_CACHE", "1")  # count compiles, not cache links
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g)
    if fn is prod0:
        x = 1 + x * 0.1  # products of a few values near 1
    x[0, 0, 0] = float("inf") if fn in (amax0, amin0_keep) else x[0, 0, 0]
    before = ir.backend_stats()["general_versions"]
    compiled = xjit.jit(fn)
    with torch.no_grad():
        got = compiled(x)
        want = fn(x)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5 * (1 + shape[-1] ** 0.5))
    assert ir.backend_stats()["general_versions"] == before
