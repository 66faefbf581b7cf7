"""cumsum's native kernel (src/backend/lower_scan.cpp) against eager: every dim of 1-3-d
inputs (the scanned dim innermost: one accumulator per row; else blocks of inner elements on an
array accumulator), float, integer and bool dtypes and `dtype=`, transposed and sliced inputs (the
general version), rows longer than a block, and the autodiff pass's reverse cumsum. eager's CPU
kernel sums f32 in f64 and f16 in f32 and rounds each result; the kernel does the same, so the
results are equal, not close."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
x_ = pytest.importorskip("xjit._xjit")


def sample(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=g).to(dtype)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.int8, torch.bool]
SHAPES = [((7,), 0), ((5, 300), 1), ((300, 5), 0), ((3, 4, 5), 1), ((2, 3, 600), -1),
          ((4, 70, 3), -2)]


@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape_dim", SHAPES, ids=str)
def test_cumsum_is_native_and_equals_eager(
    shape_dim: tuple[tuple[int, ...], int], dtype: torch.dtype, run_profiled: Any
) -> None:
    shape, dim = shape_dim
    x = sample(shape, dtype)
    got, report = run_profiled(lambda t: torch.cumsum(t, dim), x)
    want = torch.cumsum(x, dim)
    assert got.dtype == want.dtype
    assert torch.equal(got, want), (got - want).abs().max()
    assert "native" in report and "reference cumsum" not in report, report


@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize("view", ["transposed", "sliced", "expanded"])
def test_cumsum_of_strided_views(view: str, run_profiled: Any) -> None:
    base = sample((40, 300), torch.float32)

    def fn(t: torch.Tensor) -> torch.Tensor:
        v = {"transposed": t.t(), "sliced": t[:, ::3], "expanded": t[:1].expand(5, 300)}[view]
        return torch.cumsum(v, 1)

    got, report = run_profiled(fn, base)
    assert torch.equal(got, fn(base))
    assert "reference cumsum" not in report, report


@pytest.mark.parametrize("out_dtype", [torch.float64, torch.int32, torch.float32])
def test_cumsum_dtype_argument(out_dtype: torch.dtype, run_profiled: Any) -> None:
    # torch converts the input to `dtype` first, then sums (int32: in i64, wrapped to i32).
    x = sample((6, 50), torch.float32 if out_dtype != torch.float32 else torch.int64) * 1e6
    got, _ = run_profiled(lambda t: torch.cumsum(t, 1, dtype=out_dtype), x)
    assert torch.equal(got, torch.cumsum(x, 1, dtype=out_dtype))


def test_cumsum_long_rows_and_many_rows(run_profiled: Any) -> None:
    x = sample((1024, 1000), torch.float32)
    for dim in (0, 1):
        got, _ = run_profiled(lambda t, d=dim: torch.cumsum(t, d), x)
        assert torch.equal(got, torch.cumsum(x, dim))


@pytest.mark.parametrize("dtype", ["f32", "f64", "i64"])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_reverse_cumsum_equals_flipped_cumsum(dtype: str, dim: int) -> None:
    # The `reverse` attribute (the autodiff pass's gradient of cumsum): native and reference.
    torch_dtype = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64}[dtype]
    x = sample((3, 260, 4), torch_dtype)
    g = x_.Graph("g")
    xin = g.add_input(f"{dtype}[3,260,4]", "x")
    g.set_outputs(g.add_op("cumsum", [xin], {"dim": dim, "reverse": True}))
    want = torch.cumsum(x.flip(dim), dim).flip(dim)
    native = x_.compile(g).run([x], "torch")[0]
    reference = x_.run_op("cumsum", [x], {"dim": dim, "reverse": True}, framework="torch")[0]
    # The same partial sums in the same order as eager's (f32 in f64): equal.
    assert torch.equal(native, want)
    assert torch.equal(reference, want)


@pytest.mark.parametrize("ty", ["f32[s0,300]", "f32[7,s0]"])
@pytest.mark.parametrize("dim", [0, 1])
def test_cumsum_with_symbolic_sizes(ty: str, dim: int) -> None:
    # Sizes read at run time (the kernel's extents and its block count over inner elements).
    g = x_.Graph("g")
    x = g.add_input(ty, "x")
    g.set_outputs(g.add_op("cumsum", [x], {"dim": dim}))
    compiled = x_.compile(g)
    for n in (3, 513):
        t = sample((n, 300) if ty.endswith(",300]") else (7, n), torch.float32)
        assert torch.equal(compiled.run([t], "torch")[0], torch.cumsum(t, dim))
