"""Python floats as graph inputs (docs/frontend.md "Float inputs"): as torch.compile's
specialize_float=False, a float guarded by value whose value changed becomes a run-time input of
the next capture (a 0-d f64 carrier read by `item`), so one capture serves every value; where
Python needs its value (control flow, an attribute) it stays guarded by value. Results are
compared with eager bit for bit (the float takes part in type promotion as eager's wrapped
number does), and compiles against the frontend's counters."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters, run_values  # noqa: E402, F401 (autouse fixture)

FLOATS = [0.5, 2.5, -1.75, 3.141592653589793, 1e-3, 7.0, -0.0, 1.1, 123.456, 0.1]


def randn(dtype: torch.dtype = torch.float32) -> Callable[[], torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return lambda: (torch.randn(4, 33, generator=gen) * 3).to(dtype)


def test_scale_from_item_compiles_twice() -> None:
    # The brief's reproducer: before, the resume function recompiled per value and ran in
    # Python after the recompile limit (with a warning).
    def f(x: torch.Tensor) -> torch.Tensor:
        s = x.abs().max().item()
        return torch.relu(x / s) * 2 + s

    compiled = xjit.jit(f)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        for _ in range(12):
            x = torch.randn(64)
            assert torch.equal(compiled(x), f(x))
    c = counters()
    # f's graph, then the resume function: specialized at the first value, an input after.
    assert c["compiles"] == 3
    assert c["frames_in_python"] == 0


BINARY: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "x/s": lambda x, s: x / s,
    "x*s": lambda x, s: x * s,
    "x+s": lambda x, s: x + s,
    "x-s": lambda x, s: x - s,
    "s-x": lambda x, s: s - x,
    "s/x": lambda x, s: s / x,
    "where": lambda x, s: torch.where(x > 0, x, s),
    "x*s+1": lambda x, s: torch.relu(x * s + 1),
    "s*2.0": lambda x, s: x * (s * 2.0) - (1 - s) / 3,
    "-s": lambda x, s: x + -s,
    "torch.add": lambda x, s: torch.add(x, s),
    "mul_": lambda x, s: x.clone().mul_(s),
}


@pytest.mark.parametrize("backend", ["xjit", "interp", "eager"])
@pytest.mark.parametrize("name", list(BINARY))
def test_f32_ops_equal_eager_bit_for_bit(name: str, backend: str) -> None:
    op = BINARY[name]

    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return op(x, s)

    run_values(f, FLOATS, randn(), exact=True, backend=backend)
    assert counters()["compiles"] == 2
    assert counters()["frames_in_python"] == 0


@pytest.mark.parametrize("backend", ["xjit", "interp", "eager"])
def test_pow_by_a_float_input(backend: str) -> None:
    # pow by a float other than 2 and 3 is an approximated function: within f32 tolerance of
    # eager, as for a constant exponent (tests/python/test_constant_exponents.py).
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return x.abs() ** s

    run_values(f, FLOATS, randn(), backend=backend)
    assert counters()["compiles"] == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_other_dtypes_times_a_float(dtype: torch.dtype) -> None:
    # Half tensors compute with the float in f32 (eager's opmath), f64 with the double, int
    # tensors promote to the default float dtype (a Python float, not a double tensor).
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s + x / s

    run_values(f, FLOATS[:6], randn(dtype), exact=True)
    assert counters()["compiles"] == 2


def test_float_arguments_of_a_plain_function() -> None:
    def normalize(x: torch.Tensor, eps: float, alpha: float) -> torch.Tensor:
        return x / (x.norm(dim=-1, keepdim=True) + eps) * alpha

    compiled = xjit.jit(normalize)
    x = torch.randn(8, 16)
    for eps, alpha in [(1e-5, 1.0), (1e-6, 0.5), (1e-3, 2.0), (0.1, -1.0)]:
        # (the norm is a reduction: its order of additions may differ from eager's)
        torch.testing.assert_close(compiled(x, eps, alpha), normalize(x, eps, alpha))
    assert counters()["compiles"] == 2


def test_float_returned_and_computed() -> None:
    def f(x: torch.Tensor, s: float) -> tuple[torch.Tensor, float]:
        t = s * 3.0 + 1
        return x * t, t

    run_values(f, FLOATS[:5], randn(), exact=True)
    assert counters()["compiles"] == 2


def test_python_comparison_guards_the_branch() -> None:
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        if s > 1.0:  # a FloatCompare guard: `s > 1.0` or `s <= 1.0`, as the call went
            return x * s
        if 0 == s:
            return x
        return x - s

    run_values(f, [2.0, 3.0, 0.5, 0.25, 5.0, 0.0, 0.75, 1.0, 0.0], randn(), exact=True)
    # 2.0 guarded by value, then one capture per branch: s > 1, s <= 1 and s != 0, s == 0.
    assert counters()["compiles"] == 4
    assert counters()["frames_in_python"] == 0


def test_truth_value_and_computed_comparisons() -> None:
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        x = x.neg()
        if s:  # s != 0.0: a branch guard
            x = x * s
        if s * 2 > 3:  # a computed float: guarded by value
            x = x + 1
        return x

    run_values(f, [2.0, 3.0, 0.5, 0.0, 0.5], randn(), exact=True)
    assert counters()["compiles"] == 4  # 2.0, 3.0, 0.5 and 0.0 each by value; 0.5 hits


def test_int_of_a_float_and_attribute_uses_are_guarded() -> None:
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return torch.clamp(x, max=s) + x[: int(s)].sum()

    run_values(f, [2.5, 3.5, 2.5], randn())
    assert counters()["compiles"] == 2


def test_dynamic_true_float_input_from_the_first_call() -> None:
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s

    run_values(f, FLOATS[:4], randn(), exact=True, dynamic=True)
    assert counters()["compiles"] == 1


def test_dynamic_false_guards_every_value() -> None:
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s

    run_values(f, [0.5, 2.5, 3.5, 2.5], randn(), exact=True, dynamic=False)
    assert counters()["compiles"] == 3


def test_training_through_a_float_scale() -> None:
    torch.manual_seed(0)
    eager = torch.nn.Linear(8, 4)
    compiled_model = torch.nn.Linear(8, 4)
    compiled_model.load_state_dict(eager.state_dict())

    def step(model: torch.nn.Module, x: torch.Tensor, scale: float) -> torch.Tensor:
        loss = (torch.tanh(model(x)) * scale).square().mean() / scale
        loss.backward()
        return loss.detach()

    compiled = xjit.jit(step)
    compiles = []
    for scale in [0.5, 2.0, 3.25, 0.125, 1e-2]:
        x = torch.randn(5, 8)
        want = step(eager, x, scale)
        got = compiled(compiled_model, x, scale)
        torch.testing.assert_close(got, want)
        for p, q in zip(compiled_model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        compiles.append(counters()["compiles"])
    # The first capture has the scale guarded by value, the second reads it: no more after.
    assert compiles[1] == compiles[-1]
    assert counters()["frames_in_python"] == 0
