"""`torch.clamp` with tensor bounds in training steps: the value is min(max(x, lo), hi), and the
gradient goes where eager's clamp backward sends it (to x where lo <= x <= hi, to lo where
x < lo < hi, to hi where x > hi or hi < lo), not as maximum/minimum share it, half and half at
ties (fuzzer seed 54286: a bound equal to x got half of x's gradient). Ties, crossed bounds,
equal bounds, NaN and broadcast bounds; values and every
gradient against eager."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

NAN = math.nan


def inputs(case: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.tensor([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 0.25])
    lo = torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 0.0, 0.0, 0.25])
    hi = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 2.5, 0.5])
    if case == "ties":  # x equal to a bound (lo, hi, both) and crossed / equal bounds
        return x, lo, hi
    if case == "nan":
        return (
            torch.tensor([NAN, 0.0, 0.0, 2.0, -2.0, NAN]),
            torch.tensor([0.0, NAN, 0.0, NAN, 1.0, 1.0]),
            torch.tensor([1.0, 1.0, NAN, 1.0, NAN, 0.0]),
        )
    torch.manual_seed(5)  # broadcast bounds: lo per row, hi per column, values tied by rounding
    x = torch.randn(4, 6).round()
    return x, torch.randn(4, 1).round(), torch.randn(6).round() + 1


PROGRAMS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "both": lambda x, lo, hi: torch.clamp(x * 1.0, lo, hi),
    "min_only": lambda x, lo, hi: torch.clamp(x * 1.0, min=lo),
    "max_only": lambda x, lo, hi: x.clamp(max=hi),
    "clamp_min_clamp_max": lambda x, lo, hi: torch.clamp_max(torch.clamp_min(x, lo), hi),
    "same_tensor_bound": lambda x, lo, hi: torch.clamp(x, x[..., :1], x[..., :1] + 1),
}


@pytest.mark.parametrize("case", ["ties", "nan", "broadcast"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_clamp_with_tensor_bounds_has_eagers_gradients(name: str, case: str) -> None:
    fn = PROGRAMS[name]

    def step(x: Any, lo: Any, hi: Any) -> Any:
        y = fn(x, lo, hi)
        return (y * torch.arange(1.0, y.shape[-1] + 1)).sum(), y

    made = [inputs(case), inputs(case)]
    xs, ys = ([t.clone().requires_grad_(True) for t in m] for m in made)
    got, want = xjit.jit(step)(*xs), step(*ys)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, equal_nan=True)
    got[0].backward()
    want[0].backward()
    for k, (a, b) in enumerate(zip(xs, ys, strict=True)):
        assert (a.grad is None) == (b.grad is None), k
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, equal_nan=True, msg=f"gradient of operand {k}")
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step"), graphs[0]["note"]


def test_inference_keeps_the_plain_clamp() -> None:
    # Without a gradient to record, clamp stays maximum/minimum (no masks, no selects); with
    # one, the selects are there.
    fe.set_recording(True)
    try:
        x, lo, hi = inputs("ties")
        f = xjit.jit(lambda x, lo, hi: torch.clamp(x, lo, hi))
        torch.testing.assert_close(f(x, lo, hi), torch.clamp(x, lo, hi))
        ir = fe.events()["graphs"][0]["ir"]
        assert "maximum(" in ir and "where(" not in ir, ir
        fe.reset()
        f = xjit.jit(lambda x, lo, hi: torch.clamp(x, lo, hi))
        f(x.requires_grad_(True), lo, hi)
        assert "where(" in fe.events()["graphs"][0]["ir"]
    finally:
        fe.set_recording(False)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, lo, hi: torch.clamp_min(x, lo) * 2,
        lambda x, lo, hi: x.clamp_max(hi) * 2,
        lambda x, lo, hi: x.clamp_min(lo).clamp_max(hi) + 1,
    ],
    ids=["clamp_min", "Tensor.clamp_max", "chained"],
)
def test_clamp_min_and_max_with_a_tensor_bound_stay_in_the_graph(fn: Any) -> None:
    # (They were graph breaks: the row took the bound as a number attribute only.)
    x, lo, hi = inputs("broadcast")
    torch.testing.assert_close(xjit.jit(fn)(x, lo, hi), fn(x, lo, hi))
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, t: torch.clamp(x, 0.5, t),
        lambda x, t: x.clamp(t, 0.5) * 2,
        lambda x, t: torch.clip(x, min=t, max=1),
    ],
    ids=["number_min", "number_max", "clip"],
)
def test_a_number_beside_a_tensor_bound_raises_as_in_eager(fn: Any) -> None:
    # Eager's overloads take two tensors or two numbers; the compiled call raises eager's error.
    x, t = torch.randn(5), torch.rand(5)
    with pytest.raises(TypeError) as want:
        fn(x, t)
    with pytest.raises(TypeError) as got:
        xjit.jit(fn)(x, t)
    assert str(got.value) == str(want.value)
