"""cat and stack as native ops (docs/backend.md "cat", CatExecutable in src/backend/cpu_target.cpp):
each operand is copied into its slice of the result, which the runtime plans in its arena. Values against PyTorch for contiguous and strided operands (unit-stride version and the
general one), odd sizes, every dim, f32/f64/i64/bool; symbolic sizes; operands whose sizes do not
fit the graph raise, never write outside the result."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")
xjit = pytest.importorskip("xjit")

_DT = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}


def _ty(shape: tuple[object, ...], dtype: torch.dtype) -> str:
    return f"{_DT[dtype]}[{','.join(map(str, shape))}]"


def _cat_graph(
    shapes: list[tuple[object, ...]], out: tuple[object, ...], dim: int, dtype: torch.dtype, op: str = "cat"
) -> object:
    args = ", ".join(f"%x{i}: {_ty(s, dtype)}" for i, s in enumerate(shapes))
    ops = ", ".join(f"%x{i}" for i in range(len(shapes)))
    text = f"""
graph @f({args}) -> ({_ty(out, dtype)}) {{
  %y = {op}({ops}) {{dim = {dim}}} : {_ty(out, dtype)}
  return(%y)
}}"""
    cg = ir.compile(ir.parse(text))
    stats = cg.stats  # type: ignore[attr-defined]
    assert (stats["target_ops"], stats["reference_ops"]) == (1, 0), stats
    return cg


def _values(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype == torch.int64:
        return torch.randint(-50, 50, shape, generator=g)
    return torch.randn(shape, generator=g, dtype=dtype)


def _layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory order."""
    if layout == "transposed" and x.dim() >= 2:
        return x.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":  # every other element of a larger tensor along the last dim
        big = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype)
        big[..., ::2] = x
        return big[..., ::2]
    return x


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool], ids=str)
def test_cat_matches_torch(dim: int, layout: str, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    base = [3, 5, 7]
    shapes = []
    for n in (1, 4, 9):  # odd sizes along dim, one operand of size 1 there
        s = list(base)
        s[dim] = n
        shapes.append(tuple(s))
    xs = [_layout(_values(s, dtype, g), layout if i != 1 else "contiguous") for i, s in enumerate(shapes)]
    want = torch.cat(xs, dim)
    (got,) = _cat_graph(shapes, tuple(want.shape), dim, dtype)(*xs)  # type: ignore[operator]
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_cat_same_operand_twice_and_empty_slice() -> None:
    x = torch.randn(4, 6)
    e = torch.randn(4, 0)
    (got,) = _cat_graph([(4, 6), (4, 0), (4, 6)], (4, 12), 1, torch.float32)(x, e, x)  # type: ignore[operator]
    torch.testing.assert_close(got, torch.cat([x, e, x], 1), rtol=0, atol=0)


def test_cat_symbolic_sizes() -> None:
    """A KV cache's cat along the sequence: sizes read at run time."""
    cg = _cat_graph([(2, "s0", 8), (2, "s1", 8)], (2, "s0 + s1", 8), 1, torch.float32)
    for n, m in [(5, 1), (1, 3), (17, 0)]:
        a, b = torch.randn(2, n, 8), torch.randn(2, m, 8).transpose(0, 1).contiguous().transpose(0, 1)
        (got,) = cg(a, b)  # type: ignore[operator]
        torch.testing.assert_close(got, torch.cat([a, b], 1), rtol=0, atol=0)


def test_cat_operand_that_does_not_fit_raises() -> None:
    """Operands whose other dims differ from the graph's symbol raise (the launcher's binding),
    instead of copying rows past the result."""
    cg = _cat_graph([(2, "s0", "s1"), (2, 3, "s1")], (2, "s0 + 3", "s1"), 1, torch.float32)
    with pytest.raises(Exception, match="dim 2 is 9"):
        cg(torch.randn(2, 4, 5), torch.randn(2, 3, 9))  # type: ignore[operator]


def test_cat_in_a_jitted_function_is_native(run_profiled: Any) -> None:
    """The GPT step's q/k/v gradient join: transposed views concatenated along the head dim."""

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        parts = [t.transpose(1, 2) * 2 for t in (q, k, v)]
        return torch.cat(parts, dim=2).reshape(2, 16, -1) + 1

    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    got, report = run_profiled(f, q, k, v)
    torch.testing.assert_close(got, f(q, k, v), rtol=1e-6, atol=1e-6)
    assert "reference cat" not in report, report


@pytest.mark.parametrize("dim", [0, 1, 3, -1])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_stack_matches_torch(dim: int, layout: str) -> None:
    g = torch.Generator().manual_seed(11)
    xs = [_layout(torch.randn(3, 5, 7, generator=g), layout if i != 1 else "contiguous") for i in range(3)]
    want = torch.stack(xs, dim)
    (got,) = _cat_graph([(3, 5, 7)] * 3, tuple(want.shape), dim, torch.float32, "stack")(*xs)  # type: ignore[operator]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_stack_in_a_jitted_function_is_native(run_profiled: Any) -> None:
    """GPT-J's rotary embedding stacks two strided halves and flattens them."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2) * 3

    x = torch.randn(2, 16, 8)
    got, report = run_profiled(f, x)
    torch.testing.assert_close(got, f(x), rtol=1e-6, atol=1e-6)
    assert "reference stack" not in report, report
