"""What the frontend test files share: a fresh frontend around every test (import `clean` into a
test module to make it autouse there) and the frontend's event counters. A module of its own,
not a conftest.py: a second `conftest` module would shadow tests/python/conftest.py for the
tests that import from it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

fe = pytest.importorskip("xjit._frontend")


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    """No compiled frames, events or recording carried from one test into the next."""
    fe.reset()
    yield
    fe.set_recording(False)
    fe.reset()


def explain_strict(fn: Any, *args: Any) -> Any:
    """xjit.explain of xjit.jit(fn) on args, an XjitWarning (an internal failure's fallback)
    raised as an error."""
    import warnings

    import xjit

    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        return xjit.explain(xjit.jit(fn))(*args)


def external_calls(report: Any) -> int:
    """The PyTorch fallback nodes in an explain report's graphs."""
    return sum(g.ops.get("external_call", 0) for g in report.graphs)


def counters() -> dict[str, int]:
    c: dict[str, int] = fe.events()["counters"]
    return c


def tensors(value: Any) -> list[Any]:
    """The tensors of a result (nested tuples and lists), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    return []


def check_layouts(got: Any, want: Any) -> None:
    """The same tensors as eager's result: shapes, strides and values (f32 tolerance)."""
    import torch

    g, w = tensors(got), tensors(want)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        assert a.shape == b.shape
        assert a.stride() == b.stride(), f"strides {a.stride()} != eager's {b.stride()}"
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def check_without_meta_walk(got: Any, want: Any, where: str, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Eager's strides and values (nested results), the frame compiled, and its output layouts
    decided by the static rules (no meta walk); then a fresh frontend for the next case."""
    import torch

    g, w = tensors(got), tensors(want)
    assert len(g) == len(w), where
    for a, b in zip(g, w):
        assert a.stride() == b.stride(), f"strides {a.stride()} != eager's {b.stride()}: {where}"
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=where)
    c = counters()
    assert c["frames_in_python"] == 0, where
    assert c["layout_meta_walks"] == 0, f"the meta walk ran: {where}"
    fe.reset()


def run_values(
    fn: Callable[..., Any],
    values: Iterable[Any],
    make_x: Callable[[], Any],
    exact: bool = False,
    **jit: Any,
) -> None:
    """Calls xjit.jit(fn) and fn on (x, v) for each value (x from make_x, a copy each): results
    equal eager's (bit for bit if `exact`, else f32 tolerance), no XjitWarning."""
    import warnings

    import torch

    import xjit

    compiled = xjit.jit(fn, **jit)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        for v in values:
            x = make_x()
            want = fn(x.clone(), v)
            got = compiled(x.clone(), v)
            if isinstance(want, tuple):
                assert isinstance(got, tuple) and len(got) == len(want)
            else:
                got, want = (got,), (want,)
            for g, w in zip(got, want):
                if not isinstance(w, torch.Tensor):
                    assert type(g) is type(w) and g == w, (v, g, w)
                elif exact:
                    assert g.dtype == w.dtype and g.shape == w.shape, v
                    assert torch.equal(g, w), (v, (g - w).abs().max())
                else:
                    assert g.shape == w.shape, v
                    torch.testing.assert_close(g, w, msg=f"value {v}")
