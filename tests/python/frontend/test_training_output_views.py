"""Training steps that return an output which is a view of another output (DINOv2's
`pooler_output = last_hidden_state[:, 0]`): the view is rebuilt after the autograd Function on
the other output (training.h OutputView), so values, gradients through either, `_base`, shared
memory, version counters and in-place writes through the view are eager's (until session 22
such steps ran in Python: "outputs share memory")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)


def _pooled(x: Any, w: Any) -> Any:
    h = torch.tanh(x @ w)  # [2, 3, 4]
    return h, h[:, 0]


def _several(x: Any, w: Any) -> Any:
    h = x @ w + 1
    return h[1:, :, ::2], h.transpose(1, 2), h, h.flatten(1).unsqueeze(0), h.detach()


def _dict(x: Any, w: Any) -> Any:
    h = torch.sigmoid(x @ w)
    return {"last_hidden_state": h, "pooler_output": h[:, 0, 1:3], "loss": h.sum()}


def _outputs(result: Any) -> list[Any]:
    return list(result.values()) if isinstance(result, dict) else list(result)


def _run(fn: Callable[..., Any]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 5), torch.randn(5, 4)
    xs = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    ys = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    return _outputs(xjit.jit(fn)(*xs)), _outputs(fn(*ys)), xs, ys


def _assert_compiled() -> None:
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1, graphs
    assert not graphs[0]["runs_in_python"], graphs[0]["note"]


def _same_views(got: list[Any], want: list[Any]) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert g.requires_grad == w.requires_grad, i
        assert g.stride() == w.stride(), i
        assert g._is_view() == w._is_view(), i
        if w._base is not None:  # the same output (by position) is the base
            assert g._base is got[[id(o) for o in want].index(id(w._base))], i
            assert g.untyped_storage().data_ptr() == g._base.untyped_storage().data_ptr()


@pytest.mark.parametrize("fn", [_pooled, _several, _dict], ids=["pooled", "several", "dict"])
def test_outputs_viewing_outputs_train_compiled(fn: Callable[..., Any]) -> None:
    got, want, xs, ys = _run(fn)
    _same_views(got, want)
    # Gradients flow through every output, views included (a random weight per output).
    weights = [torch.randn(o.shape) for o in want]
    sum(((o * c).sum() for o, c in zip(got, weights) if o.requires_grad), torch.zeros(())).backward()
    sum(((o * c).sum() for o, c in zip(want, weights) if o.requires_grad), torch.zeros(())).backward()
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    _assert_compiled()


def test_a_write_through_the_view_reaches_its_base_and_its_gradient() -> None:
    def fn(x: Any, w: Any) -> Any:
        h = x @ w + 1  # nothing saves h: eager allows writing it
        return h, h[:, 0]

    got, want, xs, ys = _run(fn)
    for h, pooled in (got, want):
        version = h._version
        pooled.mul_(3)  # recorded by autograd on the base (CopySlices), as in eager
        assert h._version == pooled._version == version + 1
    torch.testing.assert_close(got[0], want[0])
    (got[0] ** 2).sum().backward()
    (want[0] ** 2).sum().backward()
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    _assert_compiled()


def _hidden_pair(x: Any, w: Any) -> Any:
    h = torch.tanh(x @ w)
    return h[:, 0], h[:, 1]  # eager's _base of both is h, which the caller never sees


def _hidden_mixed(x: Any, w: Any) -> Any:
    h = x @ w + 1
    g = torch.sigmoid(x.sum(-1))  # [2, 3]
    return h.transpose(1, 2), g, h[1], g.t(), g.unsqueeze(0)  # h hidden, g returned


@pytest.mark.parametrize("fn", [_hidden_pair, _hidden_mixed], ids=["pair", "mixed"])
def test_views_of_a_tensor_not_returned_train_compiled(fn: Callable[..., Any]) -> None:
    # The base is returned by the Function as a hidden output and the views rebuilt on it:
    # the views share it as their `_base` (as in eager) and gradients flow through all of them.
    got, want, xs, ys = _run(fn)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert g.stride() == w.stride(), i
        assert g._is_view() == w._is_view(), i
        for j, (g2, w2) in enumerate(zip(got, want, strict=True)):  # which outputs share a base
            same = w._base is not None and w._base is w2._base
            assert (g._base is not None and g._base is g2._base) == same, (i, j)
    weights = [torch.randn(o.shape) for o in want]
    sum((o * c).sum() for o, c in zip(got, weights)).backward()
    sum((o * c).sum() for o, c in zip(want, weights)).backward()
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    _assert_compiled()


def test_a_write_through_a_view_of_a_hidden_base_reaches_the_other_view() -> None:
    def fn(x: Any, w: Any) -> Any:
        h = x @ w  # nothing saves h: eager allows writing it
        return h[0], h[:, 1]

    got, want, xs, ys = _run(fn)
    for first, second in (got, want):
        first.mul_(2)  # h[0, 1] changes in both views, through their common base
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    (got[0].sum() + (got[1] ** 2).sum()).backward()
    (want[0].sum() + (want[1] ** 2).sum()).backward()
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    _assert_compiled()


def _symbolic_views(x: Any, w: Any) -> Any:
    h = torch.tanh(x @ w)  # [b, 3, 4] with b symbolic
    return h, h[1:], h.reshape(-1), h.flatten(0, 1)[2:], h.view(-1, 2, 6).narrow(0, 1, 1)


def test_output_views_with_symbolic_sizes_train_compiled() -> None:
    step = xjit.jit(_symbolic_views, dynamic=True)
    for b in (2, 4, 3):
        torch.manual_seed(b)
        x, w = torch.randn(b, 3, 5), torch.randn(5, 4)
        xs = [x.clone().requires_grad_(), w.clone().requires_grad_()]
        ys = [x.clone().requires_grad_(), w.clone().requires_grad_()]
        got, want = list(step(*xs)), list(_symbolic_views(*ys))
        _same_views(got, want)
        weights = [torch.randn(o.shape) for o in want]
        sum((o * c).sum() for o, c in zip(got, weights)).backward()
        sum((o * c).sum() for o, c in zip(want, weights)).backward()
        for a, c in zip(xs, ys, strict=True):
            torch.testing.assert_close(a.grad, c.grad, rtol=1e-5, atol=1e-5)
    graphs = fe.events()["graphs"]
    assert graphs and not any(g["runs_in_python"] for g in graphs), graphs
    assert len(graphs) == 1, [g["note"] for g in graphs]  # one symbolic graph for all three
