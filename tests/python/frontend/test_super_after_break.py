"""Zero-argument super() after a graph break. CPython's super() reads the running frame's first
local slot (the method's `self` or `cls`, the cell's contents when a closure captures it) and its
`__class__` free variable, so the break and resume code of such a frame take the first argument
as their own first argument (docs/frontend.md, "Graph breaks"). Each case checks the compiled
result against plain Python's, and that the frame was resumed after the break (not run in
Python) where it can be."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    fe.reset()
    yield
    fe.reset()


def x34() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(3, 4)


# ---- the cases: each class's `f(x, out)` calls super() after a print (a graph break) ----------


class Base:
    k = 1.0

    def f(self, x, out):
        return x + self.k

    @classmethod
    def make(cls, x, out):
        return x * cls.k


class Plain(Base):
    """`self` is dead after the break but for super(): only super() reads it."""

    def f(self, x, out):
        y = x * 2
        print("plain", file=out)  # BREAK
        return super().f(y, out)


class StackAtBreak(Base):
    """The break inside an expression: stack values precede the locals at the break."""

    def f(self, x, out):
        y = x * 2
        return torch.stack([y, noisy(y, out), super().f(y, out)])


def noisy(t, out):
    print("noisy", file=out)
    return t - 1


class SelfInACell(Base):
    """`self` is read by a closure: a cell variable of the frame."""

    def f(self, x, out):
        scaled = lambda t: t * self.k  # noqa: E731
        y = scaled(x) * 2
        print("cell", file=out)  # BREAK
        return super().f(scaled(y), out)


class ClassMethod(Base):
    k = 3.0

    @classmethod
    def make(cls, x, out):
        y = x + 1
        print("classmethod", file=out)  # BREAK
        return super().make(y, out) - cls.k


class InLoop(Base):
    """A break in every iteration, super() in the loop body and after it."""

    def f(self, x, out):
        y = x
        for i in range(3):
            y = y * 2
            print("iteration", i, file=out)  # BREAK
            y = super().f(y, out)
        return super().f(y, out) - 1


class TwoBreaks(Base):
    """A resume function that breaks again: its own resume function needs `self` first too."""

    def f(self, x, out):
        y = x * 2
        print("first", file=out)  # BREAK
        z = super().f(y, out)
        print("second", file=out)
        return super().f(z, out) + 1


class ReboundSelf(Base):
    """`self` reassigned before the break: super() reads the slot's current value."""

    def __init__(self, other: Any = None, k: float = 5.0) -> None:
        self.other = other
        self.k = k

    def f(self, x, out):
        y = x * 2
        self = self.other
        print("rebound", file=out)  # BREAK
        return super().f(y, out)


CASES = [
    (lambda: Plain().f, 2),
    (lambda: StackAtBreak().f, 3),  # and noisy's own graph
    (lambda: SelfInACell().f, 2),
    (lambda: ClassMethod.make, 2),
    (lambda: TwoBreaks().f, 3),
    (lambda: ReboundSelf(ReboundSelf(k=9.0)).f, 2),
]


@pytest.mark.parametrize(
    "make,graphs", CASES, ids=["plain", "stack", "cell", "classmethod", "two_breaks", "rebound"]
)
def test_super_after_break_matches_python(make: Any, graphs: int) -> None:
    x = x34()
    fn = make()
    out_e, out_c = io.StringIO(), io.StringIO()
    want = fn(x, out_e)
    compiled = xjit.jit(fn, backend="interp")
    got = compiled(x, out_c)
    torch.testing.assert_close(got, want)
    assert out_c.getvalue() == out_e.getvalue()
    # Again, from the cache (the frame and its resume functions).
    out_c = io.StringIO()
    torch.testing.assert_close(compiled(x, out_c), want)
    assert out_c.getvalue() == out_e.getvalue()
    fe.reset()
    report = xjit.explain(make(), backend="interp")(x, io.StringIO())
    assert all(b.resumed for b in report.graph_breaks), str(report)
    assert report.graph_count == graphs, str(report)


def test_super_after_break_in_a_loop() -> None:
    x = x34()
    fn = InLoop().f
    out_e, out_c = io.StringIO(), io.StringIO()
    want = fn(x, out_e)
    got = xjit.jit(fn, backend="interp")(x, out_c)
    torch.testing.assert_close(got, want)
    assert out_c.getvalue() == out_e.getvalue() == "iteration 0\niteration 1\niteration 2\n"
    report = xjit.explain(InLoop().f, backend="interp")(x, io.StringIO())
    assert report.graph_breaks and all(b.resumed for b in report.graph_breaks), str(report)


def test_the_lead_s_example() -> None:
    """The report's program: a method of a plain class, super() after print()."""

    class A:
        def f(self, x):
            return x + 1

    class B(A):
        def f(self, x):
            y = x * 2
            print("break")
            return super().f(y)

    b = B()

    def g(x):
        return b.f(x)

    x = torch.ones(2)
    torch.testing.assert_close(xjit.jit(g, backend="interp")(x), g(x))


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class LoggedLayer(Layer):
    def __init__(self, out: Any) -> None:
        super().__init__()
        self.out = out

    def forward(self, x):
        x = x * 0.5
        print("forward", tuple(x.shape), file=self.out)  # BREAK
        return super().forward(x) + 1


def test_module_forward_calls_super_forward_after_a_break() -> None:
    torch.manual_seed(0)
    out_e, out_c = io.StringIO(), io.StringIO()
    m_e, m_c = LoggedLayer(out_e), LoggedLayer(out_c)
    m_c.load_state_dict(m_e.state_dict())
    x = x34()
    with torch.no_grad():
        want = m_e(x)
        compiled = xjit.jit(m_c, backend="interp")
        got = compiled(x)
        got2 = compiled(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got2, want)
    assert out_c.getvalue() == out_e.getvalue() * 2
    fe.reset()
    with torch.no_grad():
        report = xjit.explain(LoggedLayer(io.StringIO()), backend="interp")(x)
    assert report.graph_breaks[0].resumed and report.graph_count == 2, str(report)


class RebindsCell(Base):
    """A closure rebinds the cell of `self` (`nonlocal self`) after the break: the resume
    function could only pass a copy of `self`, so the frame runs in Python (still correct)."""

    def __init__(self, other: Any = None, k: float = 7.0) -> None:
        self.other = other
        self.k = k

    def f(self, x, out):
        def rebind():
            nonlocal self
            self = self.other

        y = x * 2
        print("rebinds", file=out)  # BREAK
        rebind()
        return super().f(y, out)


def test_super_after_a_break_with_a_rebound_self_cell_runs_in_python() -> None:
    x = x34()
    fn = RebindsCell(RebindsCell(k=11.0)).f
    out_e, out_c = io.StringIO(), io.StringIO()
    want = fn(x, out_e)
    got = xjit.jit(fn, backend="interp")(x, out_c)
    torch.testing.assert_close(got, want)
    assert out_c.getvalue() == out_e.getvalue()


# ---- an optimizer subclass whose step calls super().step(closure) -----------------------------


class ClippedSGD(torch.optim.SGD):
    def step(self, closure=None):
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.clamp_(-0.05, 0.05)
        return super().step(closure)


def test_sgd_subclass_step_calls_super_step() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    eager = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    eager.load_state_dict(model.state_dict())
    opt = ClippedSGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_e = ClippedSGD(eager.parameters(), lr=0.1, momentum=0.9)
    step = xjit.jit(lambda: opt.step(), backend="interp")
    x, target = torch.randn(16, 4), torch.randn(16, 2)
    for _ in range(4):
        for m, o in ((model, opt), (eager, opt_e)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), target).backward()
        step()
        opt_e.step()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


# ---- what super().<name> finds (no break needed): the analyzer must do what Python does -------


class Attributes:
    act = torch.relu  # a builtin function: no descriptor, found unbound
    k = 4.0

    @property
    def scale(self):
        return 2.0

    @classmethod
    def times_k(cls, x):
        return x * cls.k

    @staticmethod
    def shift(x):
        return x - 1

    def plus(self, x):
        return x + self.k


class UsesAttributes(Attributes):
    k = 6.0

    def builtin(self, x):
        return super().act(x) + 1

    def prop(self, x):
        return x * super().scale  # a property: its getter runs (the frame runs in Python)

    def methods(self, x):
        return super().times_k(x) + super().shift(x) + super().plus(x)

    @classmethod
    def from_class(cls, x):  # super() in a classmethod: super(UsesAttributes, cls)
        return super().times_k(x) + super().plus(cls, x) + super().shift(x)


@pytest.mark.parametrize("name", ["builtin", "prop", "methods", "from_class"])
def test_super_attribute_lookup_matches_python(name: str) -> None:
    x = x34()
    fn = getattr(UsesAttributes(), name)
    torch.testing.assert_close(xjit.jit(fn, backend="interp")(x), fn(x))
