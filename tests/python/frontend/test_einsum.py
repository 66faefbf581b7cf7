"""torch.einsum lowered to IR ops (src/frontend/torch_einsum.cpp: sums, permutes, reshapes and
matmuls, as PyTorch's sumproduct_pair contracts): values, eager's strides and gradients against
eager, one graph with no PyTorch fallback node; the forms it leaves alone (a label repeated in
one operand, integer operands) keep PyTorch's op with eager's values."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, external_calls  # noqa: E402, F401 (autouse fixture)
from frontend_fixtures import explain_strict as explain  # noqa: E402

# (equation, operand shapes): Funnel's, attention scores, relative positions, outer and
# batched products, implicit outputs, ellipses (broadcast too), three operands, one operand.
CASES = [
    ("bind,bjnd->bnij", [(2, 5, 3, 4), (2, 6, 3, 4)]),
    ("binh,tnh->bnit", [(2, 5, 3, 4), (7, 3, 4)]),
    ("td,dnh->tnh", [(7, 8), (8, 3, 4)]),
    ("bhld,lrd->bhlr", [(2, 3, 5, 4), (5, 6, 4)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("bi,bj", [(2, 3), (2, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]),
    ("...d,d->...", [(2, 3, 4), (4,)]),
    ("bn...,bn...->bn", [(2, 3, 4, 5), (1, 3, 4, 5)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("abc,cd,ae->bde", [(2, 3, 4), (4, 5), (2, 6)]),
    ("ij->ji", [(3, 4)]),
    ("ijk->ik", [(3, 4, 5)]),
    ("ij", [(3, 4)]),
    ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)]),
]

# A batch label broadcast from size 1: ATen's result has strides (1, 2) where the graph's
# product is contiguous (values equal; a layout left as the graph makes it, docs/frontend.md).
LAYOUT_DIFFERS = {"bn...,bn...->bn"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("equation", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_einsum_is_ir_ops_and_matches_eager(equation: str, shapes: list[tuple[int, ...]], dtype: Any) -> None:
    torch.manual_seed(0)
    xs = [torch.randn(*s, dtype=dtype) for s in shapes]

    def f(*xs: torch.Tensor) -> torch.Tensor:
        return torch.einsum(equation, *xs)

    with torch.no_grad():
        report = explain(f, *xs)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert external_calls(report) == 0, str(report)
    want = f(*xs)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(report.output, want, rtol=tol, atol=tol)
    if equation not in LAYOUT_DIFFERS:
        assert report.output.stride() == want.stride()


@pytest.mark.parametrize(("equation", "shapes"), CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_einsum_gradients_match_eager(equation: str, shapes: list[tuple[int, ...]]) -> None:
    torch.manual_seed(0)
    xs = [torch.randn(*s, dtype=torch.float64) for s in shapes]

    def f(*xs: torch.Tensor) -> torch.Tensor:
        return torch.einsum(equation, [x * 2 for x in xs]) # the list form

    def step(fn: Any) -> list[torch.Tensor]:
        leaves = [x.clone().requires_grad_() for x in xs]
        out = fn(*leaves)
        w = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
        return [out.detach(), *torch.autograd.grad((out * w).sum(), leaves)]

    report = explain(f, *[x.clone().requires_grad_() for x in xs])
    assert report.graph_count == 1 and external_calls(report) == 0, str(report)
    for got, want in zip(step(xjit.jit(f)), step(f), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_einsum_of_one_operand_is_a_view_as_in_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.einsum("ij->ji", x)
        y[0] += 1  # eager writes x through the view
        return y * 1

    x_e, x_c = torch.randn(3, 4), None
    x_c = x_e.clone()
    want = f(x_e)
    got = xjit.jit(f)(x_c)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(x_c, x_e, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("equation", "xs"),
    [
        ("ii->i", [torch.randn(3, 3)]),  # a diagonal
        ("ij,jk->ik", [torch.arange(6).reshape(2, 3), torch.arange(6).reshape(3, 2)]),  # integers
    ],
    ids=["diagonal", "int64"],
)
def test_einsum_forms_left_to_pytorch_match_eager(equation: str, xs: list[torch.Tensor]) -> None:
    def f(*xs: torch.Tensor) -> torch.Tensor:
        return torch.einsum(equation, *xs)

    report = explain(f, *xs)
    assert report.graph_count == 1 and external_calls(report) == 1, str(report)
    torch.testing.assert_close(report.output, f(*xs), rtol=0, atol=0)
