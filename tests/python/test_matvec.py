"""A linear/matmul/addmm of one input row runs as a fused multiply-sum loop kernel (the
decompose-matvec pass in the runtime's pipeline) instead of a library GEMM call: values against
eager for every form the pass rewrites, odd sizes, strided weights, non-finite values, and that
no library plan is made for them (one is for two rows, so the check can fail)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xjit
import xjit._frontend as fe
import xjit.ir as ir

# An internal error would run the frame in Python with a warning and hide a wrong rewrite.
pytestmark = pytest.mark.filterwarnings("error::UserWarning")


def library_plans() -> float:
    return ir.backend_stats()["library_plans"]


def run(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> torch.Tensor:
    """fn compiled, checked against eager (sum order differs: tolerance grows with the sum)."""
    fe.reset()  # each call's sizes static, as in one model (no recompiles across calls)
    with torch.no_grad():
        expected = fn(*args)
        got = xjit.jit(fn)(*args)
    k = max(a.shape[-1] for a in args)
    tol = 3e-6 * k**0.5 if expected.dtype == torch.float32 else 1e-12 * k**0.5
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, equal_nan=True)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    return got


def linear_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(F.linear(x, w, b))


@pytest.mark.parametrize("k,n", [(784, 2048), (7, 1), (1, 5), (1000, 10), (33, 130)])
@pytest.mark.parametrize("row_shape", [(), (1,), (1, 1)])
def test_linear_of_one_row(k: int, n: int, row_shape: tuple[int, ...]) -> None:
    torch.manual_seed(k * 31 + n)
    x, w, b = torch.randn(*row_shape, k), torch.randn(n, k), torch.randn(n)
    before = library_plans()
    run(linear_relu, x, w, b)
    run(lambda x, w: F.gelu(F.linear(x, w)), x, w)
    assert library_plans() == before


def test_matmul_mm_addmm_of_a_transposed_weight() -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 96), torch.randn(40, 96), torch.randn(40)
    before = library_plans()
    run(lambda x, w: x @ w.t(), x, w)
    run(lambda x, w: torch.matmul(x[0], w.T), x, w)  # a 1-D lhs
    run(lambda x, w: torch.mm(x, w.transpose(0, 1)), x, w)
    run(lambda x, w: torch.matmul(x.view(1, 1, 96), w.permute(1, 0)), x, w)
    run(lambda b, x, w: torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0), b, x, w)
    run(lambda b, x, w: torch.addmm(b.view(1, 40), x, w.t()), b, x, w)  # a 2-D bias
    assert library_plans() == before


def test_strided_weights_and_f64() -> None:
    torch.manual_seed(1)
    x = torch.randn(1, 64)
    big = torch.randn(48, 128)
    run(linear_relu, x, big[:, ::2], torch.randn(48))  # rows with gaps
    run(linear_relu, x, torch.randn(64, 48).t(), torch.randn(48))  # column-major weight
    xd, wd, bd = torch.randn(1, 300, dtype=torch.float64), torch.randn(20, 300, dtype=torch.float64), torch.randn(20, dtype=torch.float64)
    run(linear_relu, xd, wd, bd)


def test_non_finite_values_propagate() -> None:
    x, w = torch.randn(1, 16), torch.randn(8, 16)
    x[0, 3] = float("inf")
    w[2, 3] = 0.0  # inf * 0 = nan in that output only
    w[5, 7] = float("nan")
    got = run(lambda x, w: F.linear(x, w), x, w)
    assert got[0, 2].isnan() and got[0, 5].isnan()


def test_two_rows_stay_a_library_matmul() -> None:
    before = library_plans()
    run(linear_relu, torch.randn(2, 64), torch.randn(24, 64), torch.randn(24))
    assert library_plans() > before


def test_batch_one_mlp_matches_eager() -> None:
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(100, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.Tanh(), torch.nn.Linear(256, 10)).eval()
    x = torch.randn(1, 100)
    before = library_plans()
    run(model, x)
    assert library_plans() == before


@pytest.mark.parametrize(
    "a_shape,b_shape,transpose_a",
    [
        ((1, 512, 8), (1, 8, 1), False),  # Mamba's scan: state @ C_i per step
        ((2, 33, 17), (17, 1), False),  # a 2-D column against a batch
        ((1, 512, 8), (1, 512, 1), True),  # the column product's gradient: A^T g (strided)
        ((6, 70), (70, 1), False),
    ],
)
def test_single_column_products(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], transpose_a: bool
) -> None:
    g = torch.Generator().manual_seed(len(a_shape) + a_shape[-1])
    a = torch.randn(a_shape, generator=g)
    b = torch.randn(b_shape, generator=g)
    if transpose_a:
        a = a.transpose(-2, -1)
    before = library_plans()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.matmul(x, y)) + 1

    run(step, a, b)
    assert library_plans() == before  # a loop kernel, not a library call
    a[(0,) * a.dim()] = float("nan")
    run(step, a, b)
