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
    # A batch label broadcast from size 1 (ATen makes it a free label of the other operand,
    # which gives its result strides of their own), on either side; a size-1 label in both.
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 2)]),
    ("bij,bjk->bik ", [(5, 3, 4), (1, 4, 2)]),
    ("bij,bjk->bik  ", [(1, 3, 4), (1, 4, 2)]),
    ("ij,jk->ik", [(3, 1), (4, 5)]),  # a contracted label of size 1 in one operand: a mul
    ("hbqd,bkhd->bhqk", [(2, 3, 4, 5), (3, 6, 2, 5)]),  # batch labels in the output's order
    ("ij,jK", [(3, 4), (4, 5)]),  # the implicit output lists upper case first (K, i)
    ("aB,Bc,cD", [(2, 3), (3, 4), (4, 5)]),
]


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
    assert report.output.shape == want.shape
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


@pytest.mark.parametrize(
    ("equation", "make"),
    [
        ("bi,bj->bij", lambda: [torch.randn(4, 3).t(), torch.randn(3, 5)]),
        ("bi,bj->bji", lambda: [torch.randn(3, 4), torch.randn(5, 3).t()]),
        ("bij,bjk->bik", lambda: [torch.randn(4, 3, 1).permute(2, 1, 0), torch.randn(5, 4, 2)]),
        ("i,j->ji", lambda: [torch.randn(3), torch.randn(4)]),
    ],
    ids=["outer-transposed-left", "outer-transposed-right", "broadcast-permuted", "outer-permuted-out"],
)
def test_einsum_result_strides_follow_eager_for_laid_out_operands(equation: str, make: Any) -> None:
    # Session 22: the groups and their order are ATen's, so the result's strides are eager's
    # also where a product of nothing contracted is a broadcast mul of permuted operands.
    xs = make()

    def f(*xs: torch.Tensor) -> torch.Tensor:
        return torch.einsum(equation, *xs)

    with torch.no_grad():
        report = explain(f, *xs)
    assert report.graph_count == 1 and external_calls(report) == 0, str(report)
    want = f(*xs)
    torch.testing.assert_close(report.output, want, rtol=1e-5, atol=1e-5)
    assert report.output.stride() == want.stride()


def _random_einsum_case(rng: Any) -> tuple[str, list[tuple[int, ...]]]:
    """Two or three operands over up to five labels (upper and lower case), each label's size
    1 in some operands (a broadcast) and the output a random subset in random order."""
    letters = rng.sample("abcdXY", rng.randint(2, 5))
    size = {l: rng.choice([2, 3, 4]) for l in letters}
    ops = []
    for _ in range(rng.randint(2, 3)):
        ls = rng.sample(letters, rng.randint(1, min(3, len(letters))))
        ops.append((ls, tuple(1 if rng.random() < 0.25 else size[l] for l in ls)))
    used = sorted({l for ls, _ in ops for l in ls})
    out = rng.sample(used, rng.randint(0, len(used)))
    eq = ",".join("".join(ls) for ls, _ in ops) + ("" if rng.random() < 0.2 else "->" + "".join(out))
    return eq, [s for _, s in ops]


def test_einsum_matches_eagers_shapes_and_strides_on_random_equations() -> None:
    # Session 22: ATen's groups, their order and its choice of product order, checked on random
    # equations with broadcast labels (strides of size-1 dims aside: they address nothing).
    import random
    import types
    import warnings

    rng = random.Random(22)
    for i in range(40):
        eq, shapes = _random_einsum_case(rng)
        xs = [torch.randn(*s, dtype=torch.float64) for s in shapes]

        def g(*xs: torch.Tensor, eq: str = eq) -> torch.Tensor:
            return torch.einsum(eq, *xs)

        # (a code object of its own per equation: one capture each, no recompile limit)
        f = types.FunctionType(g.__code__.replace(co_name=f"einsum_{i}"), globals())
        f.__kwdefaults__ = {"eq": eq}
        want = f(*xs)
        with warnings.catch_warnings():
            warnings.simplefilter("error", xjit.XjitWarning)
            got = xjit.jit(f)(*xs)
        assert got.shape == want.shape, eq
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=eq)
        big = [d for d, n in enumerate(want.shape) if n != 1]
        assert [got.stride(d) for d in big] == [want.stride(d) for d in big], (eq, shapes, got.stride(), want.stride())
