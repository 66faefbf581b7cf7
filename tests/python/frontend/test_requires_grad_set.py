"""`t.requires_grad = True` / `t.requires_grad_()` in a captured frame (wav2vec2's feature
encoder sets it on a view of its input in train() mode). On a tensor computed without gradient
eager makes it a leaf that requires grad: the capture goes on, and the step trains compiled when
every output that the leaf reaches is also reached by an input that requires grad (so each
output's requires_grad is eager's; the leaf's own gradient is not observable); otherwise the
frame runs in Python. Setting the flag on an input (the caller's tensor), on a tensor that
requires grad (eager raises for a non-leaf) or to a non-constant stays a graph break; False on a
tensor without gradient changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)


def feature_encoder(x: Any, w: Any) -> Any:
    h = x[:, None]  # as wav2vec2: a view of the input, made a leaf that requires grad
    h.requires_grad = True
    return (h * w).sum(-1).tanh()


def method_form(x: Any, w: Any) -> Any:
    h = (x * 2.0).requires_grad_()
    return h @ w


def false_is_a_no_op(x: Any, w: Any) -> Any:
    h = x + 1.0
    h.requires_grad = False
    h.requires_grad_(requires_grad=False)
    return h @ w


def steps(fn: Any, x: Any, w: Any) -> list[tuple[Any, Any]]:
    """(output, w.grad) of eager's and the compiled call, each on its own copy of w."""
    results = []
    for f in (fn, xjit.jit(fn)):
        wc = w.clone().requires_grad_()
        out = f(x, wc)
        assert out.requires_grad
        out.sum().backward()
        results.append((out, wc.grad))
    return results


@pytest.mark.parametrize("fn", [feature_encoder, method_form, false_is_a_no_op], ids=lambda f: f.__name__)
def test_leaf_made_in_the_frame_trains_compiled(fn: Any) -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    (want, want_grad), (got, got_grad) = steps(fn, x, w)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-6, atol=1e-6)
    events = fe.events()
    assert not events["breaks"], events["breaks"]
    graphs = events["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]


def only_the_leaf_reaches(x: Any, w: Any) -> tuple[Any, Any]:
    h = x * 2.0
    h.requires_grad_()
    return h.sin(), x @ w  # h.sin() requires grad in eager, though no input's gradient reaches it


def no_input_requires_grad(x: Any) -> Any:
    h = x + 1.0
    h.requires_grad = True
    return h * 2.0


def test_output_only_the_leaf_reaches_runs_in_python() -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    want = only_the_leaf_reaches(x, w)
    report = xjit.explain(only_the_leaf_reaches)(x, w)
    for got, ref in zip(report.output, want, strict=True):
        assert got.requires_grad == ref.requires_grad
        torch.testing.assert_close(got, ref)
    assert report.graph_count == 1 and report.graphs[0].runs_in_python
    assert "no input's gradient reaches" in report.graphs[0].note, report.graphs[0].note

    x = torch.randn(3, 4)
    want = no_input_requires_grad(x)
    report = xjit.explain(no_input_requires_grad)(x)
    assert report.output.requires_grad and want.requires_grad
    torch.testing.assert_close(report.output, want)
    assert report.graphs[0].runs_in_python and "no input's gradient reaches" in report.graphs[0].note


def on_an_input(x: Any, w: Any) -> Any:
    x.requires_grad = True
    return x @ w


def on_a_non_leaf(x: Any, w: Any) -> Any:
    h = x @ w
    h.requires_grad = True  # eager: RuntimeError (only leaves' flags change)
    return h


def test_other_forms_break_and_behave_as_eager() -> None:
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(3, 4)
    report = xjit.explain(on_an_input)(x, w)
    assert x.requires_grad  # the caller's tensor, as in eager
    assert [b.reason for b in report.graph_breaks] == [
        "requires_grad = True on a tensor the caller passed (it changes it)"
    ]
    with pytest.raises(RuntimeError, match="leaf variables"):
        xjit.jit(on_a_non_leaf)(torch.randn(3, 4), w)
