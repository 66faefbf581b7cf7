"""torch.autograd.Function.apply under the frontend: with grad disabled the Function's forward is
inlined (a stand-in ctx; apply records nothing for a backward then), so its ops join the graph
instead of one PyTorch fallback node; with grad enabled apply still runs as PyTorch, and the
backward works. Values against eager in every case."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean  # noqa: E402, F401 (autouse fixture)


class TanhGelu(torch.autograd.Function):  # BLOOM's GeLUFunction
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (0.79788456 + 0.1070322243 * x * x))


class PassThrough(torch.autograd.Function):  # returns an input, marks one non-differentiable
    @staticmethod
    def forward(ctx, x, y):
        ctx.mark_non_differentiable(y)
        ctx.scale = 2.0  # state a backward would read
        return x, y * ctx.scale + len(ctx.needs_input_grad)

    @staticmethod
    def backward(ctx, a, b):
        return a, None


class NoCtx(torch.autograd.Function):  # new style: forward without ctx, setup_context apart
    @staticmethod
    def forward(x, k: int):
        return x.exp() * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g, None


class Dirty(torch.autograd.Function):  # mark_dirty: not inlined (a graph break), still right
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def uses_all(x, y):
    a = TanhGelu.apply(x) + 1
    b, c = PassThrough.apply(x, y)
    return a, b, c, NoCtx.apply(y, 3)


def test_forward_is_inlined_under_no_grad() -> None:
    x, y = torch.randn(6), torch.randn(6)
    with torch.no_grad():
        want = uses_all(x, y)
        with warnings.catch_warnings():
            warnings.simplefilter("error", xjit.XjitWarning)
            report = xjit.explain(uses_all)(x, y)
        got = xjit.jit(uses_all)(x, y)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert "external_call" not in report.graphs[0].ops, str(report)
    assert report.graphs[0].ops.get("tanh") == 1 and report.graphs[0].ops.get("exp") == 1
    for out in (report.output, got):
        for g, w in zip(out, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    # apply returns an input it got unchanged as a view of it: writes reach the input.
    assert got[1].data_ptr() == x.data_ptr() and got[1] is not x


def test_mark_dirty_breaks_and_matches_eager() -> None:
    def f(x):
        return Dirty.apply(x) * 2

    x_e, x_c = torch.randn(5), torch.randn(5)
    x_c.copy_(x_e)
    with torch.no_grad():
        want, got = f(x_e), xjit.jit(f)(x_c)
        report = xjit.explain(f)(x_c.clone())
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(x_c, x_e, rtol=0, atol=0)
    assert "mark_dirty" in report.graph_breaks[0].reason, str(report)


def test_grad_enabled_keeps_apply_and_its_backward() -> None:
    def f(x):
        return (TanhGelu.apply(x) * 3).sum()

    x_e = torch.randn(7, requires_grad=True)
    x_c = x_e.detach().clone().requires_grad_(True)
    f(x_e).backward()
    xjit.jit(f)(x_c).backward()
    torch.testing.assert_close(x_c.grad, x_e.grad, rtol=1e-6, atol=1e-6)
