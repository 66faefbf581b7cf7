"""Training steps that call `index_put_` / `index_put` (accumulate or not), `index_add_` /
`index_add`, `scatter_add_` / `scatter_add` or `scatter_` / `scatter`: captured as `index_put`,
`scatter_add` and `scatter` ops with derivative rules (autodiff_rules_movement.cpp), so the step
trains compiled (until session 23 `index_put_` and `index_add_` were PyTorch fallbacks and the
scatters had no rule: such steps ran in Python). Values and every gradient are eager's, with the
written tensor, the written values or both requiring grad, and with duplicate indices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

DUPLICATES = [4, 0, 4, 2, 0]  # rows written twice: accumulate adds both


def _put_rows(x: Any, v: Any, idx: Any) -> Any:
    h = x * 2  # [6, 4], requires grad where x does
    h.index_put_((idx[1:4],), v[1:4])  # rows 0, 4, 2: each once
    return (h * torch.arange(4.0)).sum(), h


def _put_accumulate(x: Any, v: Any, idx: Any) -> Any:
    h = torch.sin(x)
    cols = torch.tensor([1, 3, 1, 0, 1])
    h.index_put_((idx, cols), v[:, 0] * 3, accumulate=True)  # elements written twice
    return (h * h).sum(), h


def _put_functional(x: Any, v: Any, idx: Any) -> Any:
    out = torch.index_put(x + 1, (idx,), torch.tanh(v), accumulate=True)
    return out.pow(2).sum(), out


def _put_mask(x: Any, v: Any, idx: Any) -> Any:
    h = x * 1.5
    h.index_put_((h > 0.5,), v.sum(), accumulate=True)  # a mask and a 0-d value
    return (h * h).sum(), h


def _index_add(x: Any, v: Any, idx: Any) -> Any:
    h = x * 2 + 1  # (exp would save its result: eager refuses the write at backward)
    h.index_add_(0, idx, v * v, alpha=2)
    return (h * torch.arange(4.0)).sum(), h


def _index_add_dim1(x: Any, v: Any, idx: Any) -> Any:
    out = torch.zeros(4, 6).index_add(1, idx, v.t())  # a fresh buffer: only v has a gradient
    return (out * out).sum(), out


def _scatter_add(x: Any, v: Any, idx: Any) -> Any:
    h = x - 1
    index = idx.unsqueeze(1).expand(5, 4)
    h.scatter_add_(0, index, torch.cos(v))
    return (h * h).sum(), h


def _scatter_add_dim1(x: Any, v: Any, idx: Any) -> Any:
    index = torch.tensor([[0, 0, 3, 1], [2, 2, 2, 0], [1, 3, 0, 0], [3, 1, 1, 2], [0, 1, 2, 3]])
    out = torch.scatter_add(x[:5], 1, index, v)
    return (out * out).sum(), out


def _scatter(x: Any, v: Any, idx: Any) -> Any:
    h = x * 3
    index = torch.tensor([[5, 0, 2, 1], [3, 4, 0, 5]])
    h.scatter_(0, index, v[:2])  # no duplicates per column: eager's result is defined
    return (h * torch.arange(4.0)).sum(), h


def _scatter_value(x: Any, v: Any, idx: Any) -> Any:
    index = torch.tensor([[1], [0], [3]])
    out = (x[:3] * v[:3]).scatter(1, index, 0.25)
    return (out * out).sum(), out


CASES = {
    "put_rows": _put_rows,
    "put_accumulate": _put_accumulate,
    "put_functional": _put_functional,
    "put_mask": _put_mask,
    "index_add": _index_add,
    "index_add_dim1": _index_add_dim1,
    "scatter_add": _scatter_add,
    "scatter_add_dim1": _scatter_add_dim1,
    "scatter": _scatter,
    "scatter_value": _scatter_value,
}


def _check(fn: Callable[..., Any], grads: tuple[bool, bool]) -> None:
    torch.manual_seed(3)
    x, v, idx = torch.randn(6, 4), torch.randn(5, 4), torch.tensor(DUPLICATES)
    xs = [x.clone().requires_grad_(grads[0]), v.clone().requires_grad_(grads[1]), idx]
    ys = [x.clone().requires_grad_(grads[0]), v.clone().requires_grad_(grads[1]), idx]
    got, want = xjit.jit(fn)(*xs), fn(*ys)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert g.requires_grad == w.requires_grad
    if not want[0].requires_grad:
        return
    got[0].backward()
    want[0].backward()
    for a, b in zip(xs[:2], ys[:2], strict=True):
        assert (a.grad is None) == (b.grad is None)
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1, graphs
    assert not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step"), graphs[0]["note"]


@pytest.mark.parametrize("grads", [(True, True), (True, False), (False, True)],
                         ids=["both", "written", "values"])
@pytest.mark.parametrize("name", list(CASES))
def test_scatter_writes_train_with_eagers_gradients(name: str, grads: tuple[bool, bool]) -> None:
    _check(CASES[name], grads)


def test_scatter_add_with_a_smaller_index_runs_in_python_as_eager_raises() -> None:
    # Eager's backward rejects the gathered gradient's shape (index's, not src's): the step
    # runs in Python, so backward raises as in eager.
    def fn(x: Any, v: Any) -> Any:
        return torch.zeros(3, 4).scatter_add(0, torch.tensor([[0, 1], [2, 0]]), v * x).sum()

    x, v = torch.randn(5, 6), torch.randn(5, 6, requires_grad=True)
    loss = xjit.jit(fn)(x, v)
    torch.testing.assert_close(loss, fn(x, v))
    with pytest.raises(RuntimeError, match="invalid gradient"):
        loss.backward()
    graphs = fe.events()["graphs"]
    assert graphs[0]["runs_in_python"] and "scatter_add" in graphs[0]["note"], graphs[0]["note"]


def test_index_put_of_a_mask_and_values_stays_eagers() -> None:
    # How many elements a mask writes depends on the data: a PyTorch fallback node, as before
    # session 23, which in a training step runs the frame in Python (eager's values and grads).
    def fn(x: Any, v: Any) -> Any:
        h = x * 2
        mask = torch.tensor([True, False, True, False, False, True])
        h.index_put_((mask,), v[:3] * 3)
        return (h * h).sum(), h

    x, v = torch.randn(6, 4), torch.randn(5, 4)
    xs, ys = [t.clone().requires_grad_() for t in (x, v)], [t.clone().requires_grad_() for t in (x, v)]
    got, want = xjit.jit(fn)(*xs), fn(*ys)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    got[0].backward()
    want[0].backward()
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    with torch.no_grad():  # inference: the fallback node inside the graph
        torch.testing.assert_close(xjit.jit(fn)(x, v)[1], fn(x, v)[1])


@pytest.mark.parametrize("write", ["setitem", "index_add_", "scatter_add_", "view"])
def test_writing_a_result_its_backward_reads_raises_as_in_eager(write: str) -> None:
    # exp's backward reads its result: eager raises at backward once it was written in place
    # with grad enabled. The step runs in Python (a graph break), so xjit raises there too
    # (until session 23 the compiled step differentiated the value before the write).
    def fn(x: Any, v: Any, idx: Any) -> Any:
        h = x.exp()
        if write == "setitem":
            h[idx] = v
        elif write == "index_add_":
            h.index_add_(0, idx, v)
        elif write == "scatter_add_":
            h.scatter_add_(0, idx.unsqueeze(1).expand(3, 4), v)
        else:
            h[1:].mul_(2)
        return h.sum()

    x, v, idx = torch.randn(6, 4, requires_grad=True), torch.randn(3, 4), torch.tensor([0, 2, 4])
    for f in (xjit.jit(fn), fn):
        loss = f(x, v, idx)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    assert fe.events()["graphs"][0]["runs_in_python"]


def _saved_then_written(x: Any, w: Any, v: Any, idx: Any) -> Any:
    h = x * 2
    y = h * w  # saves h for w's gradient
    h[idx] = v
    return y.sum() + h.sum()


def _saved_view_then_written(x: Any, w: Any, v: Any, idx: Any) -> Any:
    h = x + 1
    y = torch.sin(h[1:])  # saves a view of h
    h.index_add_(0, idx, v)
    return y.sum() + h.sum()


@pytest.mark.parametrize("fn", [_saved_then_written, _saved_view_then_written],
                         ids=["product", "view"])
def test_writing_a_tensor_an_op_saved_raises_as_in_eager(fn: Callable[..., Any]) -> None:
    # Eager's backward refuses a saved tensor written after it was saved (until session 23 the
    # compiled step differentiated the value before the write).
    x, w = torch.randn(6, 4, requires_grad=True), torch.randn(6, 4, requires_grad=True)
    v, idx = torch.randn(3, 4), torch.tensor([0, 2, 4])
    for f in (xjit.jit(fn), fn):
        loss = f(x, w, v, idx)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    assert fe.events()["graphs"][0]["runs_in_python"]


def _written_by_its_own_product(x: Any, w: Any, v: Any, idx: Any) -> Any:
    h = x * 2
    h.mul_(w)  # eager keeps a copy of h for w's gradient: allowed
    y = h * 3  # a product with a number saves nothing
    h[idx] = v
    return (y * y).sum() + h.sum()


def test_writes_after_reads_that_save_nothing_train_compiled() -> None:
    torch.manual_seed(0)
    leaves = [torch.randn(6, 4), torch.randn(6, 4), torch.randn(3, 4)]
    xs = [t.clone().requires_grad_() for t in leaves]
    ys = [t.clone().requires_grad_() for t in leaves]
    idx = torch.tensor([0, 2, 4])
    xjit.jit(_written_by_its_own_product)(*xs, idx).backward()
    _written_by_its_own_product(*ys, idx).backward()
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]


@pytest.mark.filterwarnings("ignore:.*out of bounds.*:xjit.XjitWarning")  # the rerun's notice
@pytest.mark.parametrize("op", ["index_add", "index_copy", "scatter_add"])
def test_a_negative_index_raises_as_in_eager(op: str) -> None:
    # index_put wraps -1 to the last row; these ops reject it. The captured index_put gets it
    # out of range instead, so the compiled step fails and the frame reruns in Python, which
    # raises eager's error.
    def fn(x: Any, v: Any, idx: Any) -> Any:
        h = x * 2
        if op == "index_add":
            h = h.index_add(0, idx, v)
        elif op == "index_copy":
            h = h.index_copy(0, idx, v)
        else:
            h = h.scatter_add(0, idx.unsqueeze(1).expand(3, 4), v)
        return h.sum()

    x, v = torch.randn(6, 4, requires_grad=True), torch.randn(3, 4)
    good, bad = torch.tensor([0, 2, 4]), torch.tensor([0, -1, 4])
    step = xjit.jit(fn)
    step(x, v, good).backward()  # compiles
    for f in (step, fn):
        with pytest.raises((RuntimeError, IndexError), match="out of bounds"):
            f(x, v, bad)


# scatter_reduce (sum, mean, amax, amin; include_self either way): duplicate targets, a row
# no value reaches (5), and for amax / amin exact ties, which eager's backward shares evenly.
REDUCE_INDEX = [[0, 2, 2, 1], [4, 0, 2, 1], [0, 3, 3, 1], [4, 4, 2, 0], [1, 0, 3, 3]]


def _scatter_reduce(reduce: str, include_self: bool, ties: bool) -> Callable[..., Any]:
    def fn(x: Any, v: Any, idx: Any) -> Any:
        h = x * 2
        src = torch.tanh(v)
        if ties:  # values equal to each other and to self where they land
            src = torch.round(src * 2) / 2
            h = torch.round(h * 2) / 2
        index = torch.tensor(REDUCE_INDEX)
        out = h.scatter_reduce(0, index, src, reduce=reduce, include_self=include_self)
        return (out * torch.arange(1.0, 5.0)).sum(), out

    return fn


@pytest.mark.parametrize("grads", [(True, True), (True, False), (False, True)],
                         ids=["both", "written", "values"])
@pytest.mark.parametrize("include_self", [True, False], ids=["self", "no_self"])
@pytest.mark.parametrize("reduce,ties", [("sum", False), ("mean", False), ("amax", False),
                                         ("amin", False), ("amax", True), ("amin", True)])
def test_scatter_reduce_trains_with_eagers_gradients(
    reduce: str, ties: bool, include_self: bool, grads: tuple[bool, bool]
) -> None:
    _check(_scatter_reduce(reduce, include_self, ties), grads)


def test_scatter_reduce_prod_runs_in_python() -> None:
    fn = _scatter_reduce("prod", True, False)
    torch.manual_seed(3)
    x, v = torch.randn(6, 4, requires_grad=True), torch.randn(5, 4, requires_grad=True)
    idx = torch.tensor(DUPLICATES)
    got = xjit.jit(fn)(x, v, idx)
    want = fn(x.detach().clone().requires_grad_(), v.detach().clone().requires_grad_(), idx)
    torch.testing.assert_close(got[0], want[0])
    got[0].backward()
    graphs = fe.events()["graphs"]
    assert graphs[0]["runs_in_python"] and "prod" in graphs[0]["note"], graphs[0]["note"]
