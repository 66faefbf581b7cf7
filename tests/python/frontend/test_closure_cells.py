"""Closure cells of a compiled frame written by the captured code: `nonlocal` assignments in the
root function, and variables assigned before a graph break that code after it reads through a
cell. Each write must reach the caller's cell (a lost write is a wrong answer, not a fallback)."""

from __future__ import annotations

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
