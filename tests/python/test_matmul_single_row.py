"""A library matmul of one lhs row with an unpacked rhs (a decode step's `[K, N]` projection,
which decompose-matvec leaves alone) runs on oneDNN's gemm implementation, not its brgemm one
(which copies the whole rhs into its blocked layout at every call): values against eager with
bias, post-ops, strided and transposed right operands, and the implementation each plan took
(two rows on a transposed rhs stay on oneDNN's first choice, so the check can fail; two rows
on a row-major rhs take gemm as well)."""

from __future__ import annotations

import pytest
import torch

import xjit.ir as ir


def _close(got: torch.Tensor, want: torch.Tensor, k: int) -> None:
    tol = 3e-6 * k**0.5  # the sum order differs from eager's BLAS: the bound grows with the sum
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def _run(text: str, *args: torch.Tensor) -> tuple[torch.Tensor, str]:
    compiled = ir.compile(ir.parse(text))
    got = compiled(*args)[0]
    plans = [t for name, t in compiled.dump_files() if name.endswith(".onednn")]
    assert len(plans) == 1, plans
    return got, plans[0]


_ADDMM_GELU = """graph @g(%x: f32[{m},{k}], %w: f32[{k},{n}], %b: f32[{n}]) -> (f32[{m},{n}]) {{
  %y = addmm(%b, %x, %w) : f32[{m},{n}]
  %r = gelu(%y) : f32[{m},{n}]
  return(%r)
}}"""


@pytest.mark.parametrize("k,n", [(768, 2304), (33, 70), (256, 1)])
def test_single_row_addmm_runs_on_gemm(k: int, n: int) -> None:
    x, w, b = torch.randn(1, k), torch.randn(k, n), torch.randn(n)
    got, plan = _run(_ADDMM_GELU.format(m=1, k=k, n=n), x, w, b)
    _close(got, torch.nn.functional.gelu(torch.addmm(b, x, w)), k)
    assert "gemm:" in plan and "brg" not in plan, plan


@pytest.mark.parametrize("rhs", ["row-major", "transposed"])
def test_two_rows_take_gemm_only_on_a_row_major_rhs(rhs: str) -> None:
    # Two rows on a row-major rhs: gemm as well (brgemm's per-call copy of such an rhs cost up
    # to 2x the product at 128 rows); on linear's transposed weight, oneDNN's first choice.
    x, b = torch.randn(2, 768), torch.randn(2304)
    w = torch.randn(768, 2304) if rhs == "row-major" else torch.randn(2304, 768).t()
    got, plan = _run(_ADDMM_GELU.format(m=2, k=768, n=2304), x, w, b)
    _close(got, torch.nn.functional.gelu(torch.addmm(b, x, w)), 768)
    if rhs == "row-major":
        assert "gemm:" in plan and "brg" not in plan, plan
    elif "avx512" in torch.backends.cpu.get_cpu_capability().lower():
        assert "brg" in plan, plan  # oneDNN 2.6's first choice on AVX-512 machines


_MATMUL = """graph @g(%x: f32[1,1,{k}], %w: f32[{k},{n}]) -> (f32[1,1,{n}]) {{
  %y = matmul(%x, %w) : f32[1,1,{n}]
  return(%y)
}}"""


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "column slice"])
def test_single_row_matmul_strided_rhs(layout: str) -> None:
    k, n = 96, 160
    if layout == "contiguous":
        w = torch.randn(k, n)
    elif layout == "transposed":
        w = torch.randn(n, k).t()
    else:
        w = torch.randn(k, 2 * n)[:, ::2]
    x = torch.randn(1, 1, k)
    got, plan = _run(_MATMUL.format(k=k, n=n), x, w)
    _close(got, x @ w, k)
    assert "gemm:" in plan and "brg" not in plan, plan
