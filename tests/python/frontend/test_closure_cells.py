"""Closure cells of a compiled frame written by the captured code: `nonlocal` assignments in the
root function, and variables assigned before a graph break that code after it reads through a
cell. Each write must reach the caller's cell (a lost write is a wrong answer, not a fallback).
Functions (closures, lambdas, functools.partial) the frame makes: one object across a graph
break, rebuilt after the graph when returned or stored (new per call, sharing cells as in
Python)."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402


@pytest.fixture(autouse=True)
def clean():
    fe.reset()
    yield
    fe.reset()


def make_counter():
    calls = 0

    def step(x):
        nonlocal calls
        calls += 1
        return x * 2 + 1

    return step, lambda: calls


def test_nonlocal_write_of_the_root_function_reaches_its_cell() -> None:
    step, calls = make_counter()
    compiled = xjit.jit(step, backend="interp")
    x = torch.randn(4)
    for i in range(1, 4):
        torch.testing.assert_close(compiled(x), x * 2 + 1)
        assert calls() == i


def call(fn):
    return fn()


def after_break_through_a_cell(model, x):
    print("break")  # the graph before it is compiled; the rest resumes in generated code
    alias = model  # a cell variable (the lambda reads it), assigned after the break
    out = alias(x)
    again = call(lambda: alias(x))
    return out + again


def make_scaler(scale):
    factor = None

    def run(x):
        nonlocal factor
        factor = scale * 2  # written before the break, read after it through the cell
        print("break")
        return x * factor

    return run, lambda: factor


@pytest.mark.parametrize("backend", ["interp", "xjit"])
def test_cell_assigned_after_a_break_is_bound_in_the_resumed_code(backend, capsys) -> None:
    model, x = torch.nn.Linear(3, 3), torch.randn(3)
    with torch.no_grad():
        want = after_break_through_a_cell(model, x)
        got = xjit.jit(after_break_through_a_cell, backend=backend)(model, x)
    torch.testing.assert_close(got, want)


def test_nonlocal_written_before_a_break_is_read_after_it(capsys) -> None:
    run, factor = make_scaler(3.0)
    compiled = xjit.jit(run, backend="interp")
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x * 6.0)
    assert factor() == 6.0


# ---- functions made before a graph break: one object on both sides of it ----------------------


def aliased_closure(x):
    scale = 2.0
    f = lambda t: t * scale  # noqa: E731
    g = f
    print("break")
    return f is g, g(x), f(x.cos())


def closure_returned_after_break(x):
    scale = 3.0

    def shifted(t, bias=1.0):
        return t * scale + bias

    y = x.sin()
    print("break")
    scale = 4.0  # a cell: the returned function sees the new value, as in Python
    return shifted, shifted(y)


def _call_twice(fn, *args):
    compiled = xjit.jit(fn, backend="interp")
    with torch.no_grad():
        return compiled(*args), compiled(*args)


def test_function_held_by_two_locals_is_one_object_after_the_break(capsys) -> None:
    fe.set_recording(True)
    x = torch.randn(4)
    want = aliased_closure(x)
    for got in _call_twice(aliased_closure, x):
        assert got[0] is True  # was False: each local got a function of its own
        torch.testing.assert_close(got[1], want[1])
        torch.testing.assert_close(got[2], want[2])
    ev = fe.events()
    assert [b["resumed"] for b in ev["breaks"]] == [True]
    assert ev["counters"]["cache_hits"] >= 1 and not ev["recompiles"]


def test_function_made_before_a_break_is_returned_after_it(capsys) -> None:
    fe.set_recording(True)
    x = torch.randn(4)
    want_fn, want = closure_returned_after_break(x)
    first, second = _call_twice(closure_returned_after_break, x)
    for fn, out in (first, second):
        assert fn.__code__ is want_fn.__code__ and fn.__defaults__ == (1.0,)
        assert fn.__closure__[0].cell_contents == want_fn.__closure__[0].cell_contents == 4.0
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(fn(x), want_fn(x))
    assert first[0] is not second[0]  # a new function per call, as in Python
    ev = fe.events()
    # Before: the resume function ran in Python ("returns a function made inside it").
    assert [b["resumed"] for b in ev["breaks"]] == [True], ev["breaks"]
    assert len(ev["graphs"]) == 2 and not ev["recompiles"], ev["recompiles"]
    assert ev["counters"]["cache_hits"] >= 2


# ---- functions made in the frame and returned or stored: rebuilt after the graph --------------


def getter_setter_pair(x, holder):
    scale = 2.0
    y = x * 3

    def get():
        return scale

    def put(v):
        nonlocal scale
        scale = v

    holder.put = put
    return y, get


def with_defaults(x, k=2):
    def f(t, bias=x.sum(), *, mul=k):
        return t * mul + bias

    return f, x.relu()


class _Holder:
    put = None


def test_closures_returned_and_stored_share_their_cell() -> None:
    fe.set_recording(True)
    x = torch.randn(3)
    compiled = xjit.jit(getter_setter_pair, backend="interp")
    outs = []
    with torch.no_grad():
        for _ in range(2):
            holder = _Holder()
            y, get = compiled(x, holder)
            outs.append((get, holder))
            torch.testing.assert_close(y, x * 3)
            assert get() == 2.0 and get.__qualname__ == "getter_setter_pair.<locals>.get"
            assert get.__closure__[0] is holder.put.__closure__[0]  # one cell, as in Python
            holder.put(5.0)
            assert get() == 5.0
    (get1, _), (get2, _) = outs
    assert get1.__closure__[0] is not get2.__closure__[0] and get1() == get2() == 5.0
    ev = fe.events()
    # Before: "the frame returns a function made inside it" (the frame ran in Python).
    assert len(ev["graphs"]) == 1 and not ev["breaks"], ev["breaks"]
    assert ev["counters"]["cache_hits"] >= 1


def test_returned_function_keeps_defaults_computed_in_the_graph() -> None:
    fe.set_recording(True)
    x = torch.randn(3)
    want_f, want_r = with_defaults(x)
    compiled = xjit.jit(with_defaults, backend="interp")
    with torch.no_grad():
        for _ in range(2):
            f, r = compiled(x)
            torch.testing.assert_close(r, want_r)
            torch.testing.assert_close(f.__defaults__[0], want_f.__defaults__[0])
            assert f.__kwdefaults__ == {"mul": 2} and f.__code__ is want_f.__code__
            torch.testing.assert_close(f(x), want_f(x))
    ev = fe.events()
    assert len(ev["graphs"]) == 1 and not ev["breaks"] and ev["counters"]["cache_hits"] >= 1


def make_activation(x, mode="tanh"):
    act = functools.partial(torch.nn.functional.gelu, approximate=mode)
    return act(x) * 2, act


def test_partial_made_in_the_frame_is_a_new_object_per_call() -> None:
    fe.set_recording(True)
    x = torch.randn(5)
    compiled = xjit.jit(make_activation, backend="interp")
    with torch.no_grad():
        (y1, act1), (y2, act2) = compiled(x), compiled(x)
    want, _ = make_activation(x)
    torch.testing.assert_close(y1, want)
    torch.testing.assert_close(y2, want)
    assert act1 is not act2  # made again after each call's graph, as Python would
    for act in (act1, act2):
        assert act.func is torch.nn.functional.gelu and act.keywords == {"approximate": "tanh"}
    ev = fe.events()
    assert len(ev["graphs"]) == 1 and not ev["breaks"], ev["breaks"]
    assert ev["counters"]["cache_hits"] >= 1


def test_check_compares_rebuilt_functions_and_objects_by_contents() -> None:
    # --check compares a compiled frame's result with Python's: objects the frame made are new
    # objects on both sides, equal by what they hold (before: functions and partials differed).
    from xjit._backends import compare_outputs

    x = torch.randn(3)
    with torch.no_grad():
        got = xjit.jit(make_activation, backend="interp")(x)
        got_f = xjit.jit(with_defaults, backend="interp")(x)
    assert compare_outputs(got, make_activation(x)) is None
    assert compare_outputs(got_f, with_defaults(x)) is None
    other = with_defaults(x + 1)
    assert compare_outputs(got_f, other).startswith("output[0].__defaults__[0]: max abs")
