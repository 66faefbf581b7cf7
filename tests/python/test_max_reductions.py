"""Max / min reductions in generated kernels (src/backend/llvm_codegen.cpp): they use IEEE
maximum / minimum with no-signed-zeros and two interleaved vector accumulators. A NaN anywhere in
a row (first element, a vector body, the remainder, the last element) must still make that row's
result NaN, as in PyTorch, for amax / amin, max / min with indices dropped, and softmax's max
pass; which of -0 and +0 comes back is unspecified (PyTorch's depends on its order too)."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")

# Row lengths: under one vector, vector bodies with and without a remainder, two interleaved
# vectors and more.
LENGTHS = [7, 16, 37, 64, 130, 1000]


def _rows(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(6, n, generator=g)
    x[1, 0] = math.nan  # first element
    x[2, n // 2] = math.nan  # the middle
    x[3, n - 1] = math.nan  # last element (in the remainder for most n)
    x[4] = -math.inf
    x[4, n // 3] = math.nan  # NaN among -inf
    x[5] = 0.0
    x[5, ::2] = -0.0  # signed zeros only
    return x


def amax_rows(x: torch.Tensor) -> torch.Tensor:
    return x.amax(-1)


def amin_rows(x: torch.Tensor) -> torch.Tensor:
    return x.amin(-1, keepdim=True) * 2


def softmax_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("fn", [amax_rows, amin_rows, softmax_rows], ids=lambda f: f.__name__)
def test_nan_anywhere_in_a_row_propagates(fn: object, n: int) -> None:
    x = _rows(n)
    got = xjit.jit(fn)(x)
    want = fn(x)  # type: ignore[operator]
    torch.testing.assert_close(got, want, equal_nan=True)
    for row in (1, 2, 3, 4):
        assert got[row].isnan().all(), (row, got[row])


@pytest.mark.parametrize("n", [37, 1000])
def test_max_over_the_outer_dim_propagates_nan(n: int) -> None:
    # Kept innermost dim: the lane-array accumulators reduce over rows.
    x = _rows(n).t().contiguous()
    got = xjit.jit(amax_rows)(x.t())  # amax over the strided dim
    torch.testing.assert_close(got, x.t().amax(-1), equal_nan=True)
    got0 = xjit.jit(lambda t: t.amax(0))(x)
    torch.testing.assert_close(got0, x.amax(0), equal_nan=True)


@pytest.mark.parametrize("channels", [16, 48, 64, 128])
def test_channel_statistics_in_registers(channels: int) -> None:
    # Batch-norm statistics of a channels-last activation: every dim but the innermost reduced,
    # 16-128 lanes kept in vector registers across the rows (llvm_codegen.cpp, lane loops).
    g = torch.Generator().manual_seed(channels)
    x = torch.randn(4, 9, 7, channels, generator=g)
    x[1, 2, 3, 5] = math.nan

    def stats(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m = t.mean((0, 1, 2), keepdim=True)
        return m, ((t - m) ** 2).mean((0, 1, 2)), t.amax((0, 1, 2)), t.sum((0, 1, 2))

    got = xjit.jit(stats)(x)
    for a, b in zip(got, stats(x), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert got[2][5].isnan() and not got[2][4].isnan()


ARG_CASES = {
    "argmax-rows": lambda t: t.argmax(-1),
    "argmin-rows": lambda t: t.argmin(-1),
    "argmax-dim0": lambda t: t.argmax(0),
    "argmax-all": lambda t: t.argmax(),
    "argmin-keepdim": lambda t: t.argmin(1, keepdim=True),
    "argmax-middle-dim": lambda t: t.reshape(2, 3, -1).argmax(1),
}


@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("name", list(ARG_CASES))
def test_argmax_argmin_are_native_and_exact(name: str, dtype: torch.dtype, run_profiled: Any) -> None:
    # Two passes (the extremum, then its least position): ties give the first index, a NaN the
    # first NaN, -0 and +0 tie, as PyTorch's.
    fn = ARG_CASES[name]
    g = torch.Generator().manual_seed(7)
    if dtype == torch.int64:
        x = torch.randint(-4, 4, (6, 130), generator=g)
    else:
        x = torch.randn(6, 130, generator=g, dtype=dtype)
        x[0, 10] = x[0, 90] = 9.0  # a tie
        x[1, 3] = x[1, 100] = math.nan
        x[2] = 0.0
        x[2, 5] = -0.0
        x[3] = -math.inf
        x[4, 129] = math.inf
    got, report = run_profiled(lambda t: fn(t) + 0, x)
    assert torch.equal(got, fn(x)), (got, fn(x))
    assert "native" in report and "reference arg" not in report and "external" not in report, report


@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("which", ["max-rows", "min-dim0-keepdim"])
def test_max_min_with_indices_are_native_and_exact(
    which: str, dtype: torch.dtype, run_profiled: Any
) -> None:
    # torch.max(x, dim) / torch.min: canonicalize splits them into amax / amin and argmax /
    # argmin, native reductions with PyTorch's values and first-occurrence indices.
    def fn(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = t.max(-1) if which == "max-rows" else t.min(0, keepdim=True)
        return r.values * 1, r.indices + 0

    g = torch.Generator().manual_seed(9)
    if dtype == torch.int64:
        x = torch.randint(-4, 4, (6, 130), generator=g)
    else:
        x = torch.randn(6, 130, generator=g)
        x[0, 10] = x[0, 90] = 9.0 if which == "max-rows" else -9.0  # a tie at the extremum
        x[1, 3] = x[1, 100] = math.nan
        x[3] = -math.inf
    got, report = run_profiled(fn, x)
    for a, b in zip(got, fn(x), strict=True):
        assert torch.equal(a, b) or torch.allclose(a, b, equal_nan=True), (a, b)
    assert "native" in report and "reference" not in report, report
