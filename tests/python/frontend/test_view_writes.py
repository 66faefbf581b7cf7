"""In-place ops applied to a view (`x[:, -1] += 1`, `x[:, :k].mul_(s)`, `v = x[0]; v.add_(1)`,
`x.narrow(1, 0, 2).zero_()`, ...): the frontend writes the view's new value back into its base,
so the base, every other live view of it and the caller's input see the write as in eager. A
view the analyzer cannot express as ops on its base (as_strided, a reshape PyTorch may copy)
keeps the graph break, with its reason, and eager's results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import xjit  # noqa: E402

from frontend_fixtures import clean  # noqa: E402,F401


def f_index_iadd(x):
    x[:, -1] += 1
    return x * 2


def f_slice_mul(x):
    x[:, :2].mul_(3)
    return x + 1


def f_select_add(x):
    v = x[0]
    v.add_(1)
    return v * 2, x.sum()


def f_narrow_zero(x):
    x.narrow(1, 0, 2).zero_()
    return x - 1


def f_slice_masked_fill(x):
    x[:, 1:3].masked_fill_(x[:, 1:3] > 0, -1.0)
    return x * 1


def f_view_step_fill(x):
    x.view(-1)[::2].fill_(0)
    return x + 0


def f_other_views_see_write(x):
    row = x[1]  # made before the write: sees it as in eager
    col = x[:, 2]
    x.t()[0].add_(5)  # column 0, through a transpose
    return row * 1, col + 0, x.sum(0)


def f_view_of_view(x):
    v = x[1:]
    w = v[:, 1]
    w.sub_(2)
    v[0].mul_(-1)
    return v + 0, w + 0


def f_base_written_then_view_read(x):
    v = x[0]
    x.mul_(2)
    return v + 1


def f_augmented_on_view_of_view(x):
    y = x[1:]
    y[:, -1] += 1  # stores back the view it just wrote: not an overlap
    y[0] *= 2
    return x + 0


FORMS: list[Callable[..., Any]] = [
    f_augmented_on_view_of_view,
    f_index_iadd,
    f_slice_mul,
    f_select_add,
    f_narrow_zero,
    f_slice_masked_fill,
    f_view_step_fill,
    f_other_views_see_write,
    f_view_of_view,
    f_base_written_then_view_read,
]


def local(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` on a tensor the frame makes (not the caller's)."""

    def g(x):
        y = x * 1.5 - 1
        return fn(y), y

    g.__name__ = fn.__name__ + "_local"
    return g


def sample() -> torch.Tensor:
    return torch.randn(4, 4, generator=torch.Generator().manual_seed(0))


def check(fn: Callable[..., Any], breaks: int) -> xjit.explain.ExplainReport:
    x_e, x_c = sample(), sample()
    alias_e, alias_c = x_e[:, 1], x_c[:, 1]  # caller's views made before the call
    want = fn(x_e)
    got = xjit.jit(fn, backend="interp")(x_c)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x_c, x_e)  # the caller's tensor after the call
    torch.testing.assert_close(alias_c, alias_e)
    report = xjit.explain(fn, backend="interp")(sample())
    assert report.graph_break_count == breaks, str(report)
    return report


@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_write_through_view_of_input(fn: Callable[..., Any]) -> None:
    check(fn, 0)


@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_write_through_view_of_local(fn: Callable[..., Any]) -> None:
    check(local(fn), 0)


def test_graph_does_the_write_into_the_base() -> None:
    report = xjit.explain(f_select_add, backend="interp")(sample())
    assert report.graph_count == 1 and "index_put" in str(report), str(report)


# ---- forms that keep the graph break: eager's results, a reason naming why ----------------


def u_as_strided(x):
    x.as_strided((2, 2), (1, 1)).fill_(0)  # strides the analyzer does not follow
    return x + 0


def u_unfold(x):
    x.unfold(1, 2, 2).mul_(0)
    return x + 0


def u_reshape_of_transpose(x):
    x.t().reshape(-1)[::3].fill_(0)  # PyTorch copies: x is not written
    return x + 0


def u_copy_between_views(x):
    x[1:3][:, 1:3].copy_(x[0:2, 0:2])  # overlapping: eager copies in order
    return x + 0


def u_expand(x):
    x.expand(2, 4, 4)[0].add_(1)
    return x + 0


@pytest.mark.parametrize(
    "fn, reason",
    [
        (u_as_strided, "a view made by PyTorch fallback Tensor.as_strided"),
        (u_unfold, "a view made by PyTorch fallback Tensor.unfold"),
        (u_reshape_of_transpose, "reshape of a tensor whose strides are unknown at capture"),
        (u_expand, "in-place write to an expanded view"),
        (u_copy_between_views, "from another view of the same tensor"),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_unsupported_view_writes_break(fn: Callable[..., Any], reason: str) -> None:
    report = check(fn, 1)
    assert reason in report.graph_breaks[0].reason, str(report)


def test_reshape_of_a_contiguous_input_is_a_view() -> None:
    def f(x):
        x.reshape(-1)[1::3].fill_(0)
        return x + 0

    check(f, 0)
    # A transposed input: PyTorch's reshape copies (x is not written); the strides guard the
    # first capture added recompiles, and the write breaks.
    fn = xjit.jit(f, backend="interp")
    for x_e, x_c in ((sample(), sample()), (sample().t(), sample().t())):
        torch.testing.assert_close(fn(x_c), f(x_e))
        torch.testing.assert_close(x_c, x_e)
    report = xjit.explain(f, backend="interp")(sample().t())
    assert "strides are unknown" in report.graph_breaks[0].reason, str(report)


# ---- views of computed tensors: eager's strides (the layout rules) tell a view from a copy ----


def c_contiguous_of_transpose(x):
    y = x * 2
    z = y.t().contiguous()  # a copy: writing it leaves y
    z[0] += 1
    return y + 0, z * 1


def c_reshape_of_transpose(x):
    y = x - 1
    z = y.t().reshape(-1)  # a copy
    z[::3].fill_(0)
    return y + 0, z * 1


def c_reshape_of_contiguous(x):
    y = x + 1
    z = y.reshape(2, 8)  # a view: the write reaches y
    z[:, 0].fill_(0)
    return y * 1, z + 0


def c_contiguous_of_a_row_transposed(x):
    y = x[:1] * 3  # [1, 4]
    z = y.t().contiguous()  # [4, 1] is contiguous (size-1 dims aside): y itself
    z[1:].zero_()
    return y + 0, z * 1


def c_reshape_of_a_transposed_result(x):
    y = x.t() * 2  # TensorIterator keeps x.t()'s layout: y is transposed
    z = y.reshape(-1)  # so a copy
    z[1::2].fill_(0)
    w = y.t().reshape(-1)  # and this a view
    w[::5].fill_(-1)
    return y + 0, z * 1, w * 1


def c_relative_position_index(x):
    # BEiT's relative_position_index (transformers): a permuted difference made contiguous, then
    # written in place through column views.
    n = 3
    coords = torch.flatten(torch.stack(torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")), 1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += n - 1
    rel[:, :, 1] += n - 1
    rel[:, :, 0] *= 2 * n - 1
    return x.sum() + rel.sum(-1), rel


def c_reshapes_asked_out_of_order(x):
    # The capture lays out each op once, as far as the tensor asked about (ComputedStrides): a
    # tensor computed before others already laid out is asked about last.
    y = x.t() * 2  # transposed
    u = x * 3
    v = u.t().contiguous()  # a copy (u is contiguous, u.t() is not)
    v[0].fill_(5)
    w = y.reshape(-1)  # a copy: y is transposed
    w[1::2].fill_(0)
    k = y.t().reshape(-1)  # a view of y
    k[::5].fill_(-1)
    return y + 0, u + 0, v * 1, w * 1, k * 1


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):  # reshapes inside the Function's region
        return (a.t() * 2).reshape(-1).reshape(a.shape[1], a.shape[0])

    @staticmethod
    def backward(ctx, g):
        return g.t() * 2


def c_reshape_after_an_autograd_function(x):
    y = _Twice.apply(x * 1)  # (the region's reshapes are not laid out: a region)
    z = (y * 1).t().reshape(-1)  # contiguous y: its transpose reshapes to a copy
    z[::2].fill_(7)
    r = y.t().reshape(-1)  # a copy too
    return y + 0, z * 1, r * 1


COMPUTED_VIEW_FORMS = [
    c_reshapes_asked_out_of_order,
    c_reshape_after_an_autograd_function,
    c_contiguous_of_transpose,
    c_reshape_of_transpose,
    c_reshape_of_contiguous,
    c_contiguous_of_a_row_transposed,
    c_reshape_of_a_transposed_result,
    c_relative_position_index,
]


@pytest.mark.parametrize("fn", COMPUTED_VIEW_FORMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["interp", "xjit"])
def test_write_through_reshape_of_computed_tensor(fn: Callable[..., Any], backend: str) -> None:
    x = sample()
    report = xjit.explain(fn, backend=backend)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    for got, want in zip(report.output, fn(sample()), strict=True):
        torch.testing.assert_close(got, want)
        # Eager's strides, but for size-1 dims (any stride addresses them alike; the graph's
        # [4, 1] `z * 1` has (1, 1) where eager keeps y.t()'s (1, 4)).
        assert [s for s, n in zip(got.stride(), got.shape) if n != 1] == [
            s for s, n in zip(want.stride(), want.shape) if n != 1
        ]
    assert not any(g.runs_in_python for g in report.graphs), str(report)


def test_inputs_sharing_memory_are_not_read_stale() -> None:
    def f(a, b):
        a.add_(1)
        return b * 1

    a_e, a_c = torch.zeros(3, 3), torch.zeros(3, 3)
    got = xjit.jit(f, backend="interp")(a_c, a_c[0])
    torch.testing.assert_close(got, f(a_e, a_e[0]))
    torch.testing.assert_close(a_c, a_e)
    report = xjit.explain(f, backend="interp")(a_c, a_c[0])
    assert "shares memory with" in report.graph_breaks[0].reason, str(report)


def test_inputs_sharing_memory_in_a_later_call_recompile() -> None:
    # Captured with unrelated inputs: a guard sees the later call's aliasing.
    def f(a, b):
        a.add_(1)
        return b * 1

    fn = xjit.jit(f, backend="interp")
    for other in (lambda a: torch.ones(3), lambda a: a[0], lambda a: a[1], lambda a: a[0, :2]):
        a_e, a_c = torch.zeros(3, 3), torch.zeros(3, 3)
        torch.testing.assert_close(fn(a_c, other(a_c)), f(a_e, other(a_e)))
        torch.testing.assert_close(a_c, a_e)
    report = xjit.explain(f, backend="interp")(torch.zeros(3, 3), torch.ones(3))
    assert "L['a'] shares no memory with the other 1 tensor input(s)" in str(report), str(report)


def test_view_dtype_then_write_after_the_break() -> None:
    # The resume function gets x and its int32 view as two inputs sharing memory.
    def f(x):
        x.view(torch.int32)[0].fill_(0)
        return x + 0

    x_e, x_c = sample(), sample()
    torch.testing.assert_close(xjit.jit(f, backend="interp")(x_c), f(x_e))
    torch.testing.assert_close(x_c, x_e)


def test_write_through_view_with_a_symbolic_dim() -> None:
    def f(x):
        x[:, -1] += 1
        x[1:, :2].mul_(2)
        return x * 1

    fn = xjit.jit(f, backend="interp", dynamic=True)
    for n in (5, 7):
        x_e = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
        x_c = x_e.clone()
        torch.testing.assert_close(fn(x_c), f(x_e))
        torch.testing.assert_close(x_c, x_e)
    report = xjit.explain(f, backend="interp", dynamic=True)(torch.randn(6, 3))
    assert report.graph_break_count == 0, str(report)


def test_parameter_rows_written_under_no_grad() -> None:
    def init(m, x):
        with torch.no_grad():
            m.weight[0].fill_(0.5)
            m.bias[:2].mul_(2)
        return m(x)

    torch.manual_seed(0)
    m_e = torch.nn.Linear(4, 4)
    m_c = torch.nn.Linear(4, 4)
    m_c.load_state_dict(m_e.state_dict())
    x = torch.randn(2, 4)
    torch.testing.assert_close(xjit.jit(init, backend="interp")(m_c, x), init(m_e, x))
    torch.testing.assert_close(m_c.state_dict(), m_e.state_dict())
    assert xjit.explain(init, backend="interp")(m_c, x).graph_break_count == 0


def test_native_backend_writes_through_views() -> None:
    for fn in (f_other_views_see_write, local(f_view_of_view)):
        x_e, x_c = sample(), sample()
        torch.testing.assert_close(xjit.jit(fn, backend="xjit")(x_c), fn(x_e))
        torch.testing.assert_close(x_c, x_e)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_is_expanded_views(indexing: str) -> None:
    # torch.meshgrid (a Python function: it was a PyTorch fallback node, whose results' strides
    # the layout rules cannot know) as reshape + expand of each input, eager's expanded views.
    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grids = torch.meshgrid(a, b, c, indexing=indexing)
        pair = torch.meshgrid([a * 2, b], indexing=indexing)
        return (*grids, *pair, torch.stack(pair).contiguous())

    args = (torch.randn(3), torch.randn(4), torch.randn(()))
    report = xjit.explain(f)(*args)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert all("external_call" not in g.ops for g in report.graphs), str(report)
    for got, want in zip(report.output, f(*args), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.stride() == want.stride()
