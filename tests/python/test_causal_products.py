"""matmul's `causal` attribute (causal-products, docs/passes.md): the native backend's blocked
products against torch.matmul of the same triangular operands, for each mode, at sizes that are
no multiple of the 32-row blocks, with more or fewer rows than the inner dim (a block whose inner
range is empty is zeros), a broadcast batch, and the verifier's checks."""

from __future__ import annotations

import pytest
import torch

import xjit.ir as ir

# (mode, lhs sizes, rhs sizes): lhs_lower is probabilities·v ([L,S]·[S,D]), lhs_upper their
# transpose times the output gradient ([S,L]·[L,D]), rhs_lower qᵀ times the score gradient
# ([D,L]·[L,S]).
CASES = [
    ("lhs_lower", (2, 3, 70, 70), (2, 3, 70, 8)),
    ("lhs_lower", (2, 3, 100, 45), (2, 3, 45, 8)),
    ("lhs_lower", (1, 3, 64, 130), (2, 3, 130, 8)),
    ("lhs_upper", (2, 3, 70, 70), (2, 3, 70, 8)),
    ("lhs_upper", (2, 3, 100, 45), (2, 3, 45, 8)),
    ("lhs_upper", (2, 65, 33), (2, 33, 5)),
    ("rhs_lower", (2, 3, 8, 70), (2, 3, 70, 70)),
    ("rhs_lower", (2, 3, 8, 45), (2, 3, 45, 100)),
    ("rhs_lower", (2, 8, 130), (1, 130, 64)),
]


def _shape(s: tuple[int, ...]) -> str:
    return ",".join(map(str, s))


def _graph(mode: str, a: tuple[int, ...], b: tuple[int, ...], c: tuple[int, ...], dt: str) -> str:
    return f"""
graph @f(%a: {dt}[{_shape(a)}], %b: {dt}[{_shape(b)}]) -> ({dt}[{_shape(c)}]) {{
  %c = matmul(%a, %b) {{causal = "{mode}"}} : {dt}[{_shape(c)}]
  return(%c)
}}"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("mode,a_sizes,b_sizes", CASES)
def test_causal_product_matches_torch(
    mode: str, a_sizes: tuple[int, ...], b_sizes: tuple[int, ...], dtype: torch.dtype
) -> None:
    g = torch.Generator().manual_seed(len(a_sizes) * 1000 + a_sizes[-1] + b_sizes[-1])
    a = torch.randn(a_sizes, generator=g, dtype=dtype)
    b = torch.randn(b_sizes, generator=g, dtype=dtype)
    if mode == "lhs_lower":
        a = torch.tril(a)
    elif mode == "lhs_upper":
        a = torch.triu(a)
    else:
        b = torch.tril(b)
    want = torch.matmul(a, b)
    dt = "f32" if dtype == torch.float32 else "f64"
    cg = ir.compile(ir.parse(_graph(mode, a_sizes, b_sizes, tuple(want.shape), dt)))
    (got,) = cg.run([a, b], framework="torch")
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(torch.as_tensor(got), want, rtol=tol, atol=tol)
    if dtype == torch.float32:
        assert cg.stats["target_ops"] == 1  # the native (blocked) product, not the reference


@pytest.mark.parametrize(
    "attr,message",
    [("upper", "causal must be lhs_lower, lhs_upper or rhs_lower"), ("lhs_lower", "rank >= 2")],
)
def test_verifier_rejects_bad_causal(attr: str, message: str) -> None:
    text = f"""
graph @f(%a: f32[4], %b: f32[4,3]) -> (f32[3]) {{
  %c = matmul(%a, %b) {{causal = "{attr}"}} : f32[3]
  return(%c)
}}"""
    with pytest.raises(Exception, match=message):
        ir.verify_or_raise(ir.parse(text))


# (mode, lhs sizes, rhs sizes, the non-finite entry's index in the operand that is not
# triangular, whether a block skips it): the last row of the rhs for lhs_lower (only the last
# block reads it), the first row for lhs_upper (with rows > inner: blocks of zeros skip it too),
# the first column of the lhs for rhs_lower; then entries that every block reads.
NON_FINITE_CASES = [
    ("lhs_lower", (2, 3, 70, 70), (2, 3, 70, 8), (1, 2, 69, 3), True),
    ("lhs_upper", (2, 3, 70, 70), (2, 3, 70, 8), (0, 1, 0, 3), True),
    ("lhs_upper", (2, 100, 45), (2, 45, 5), (1, 0, 4), True),
    ("rhs_lower", (2, 3, 8, 70), (2, 3, 70, 70), (1, 2, 5, 0), True),
    ("lhs_lower", (2, 3, 70, 70), (2, 3, 70, 8), (1, 2, 0, 3), False),
    ("lhs_upper", (2, 3, 70, 70), (2, 3, 70, 8), (1, 2, 69, 3), False),
    ("rhs_lower", (2, 3, 8, 70), (2, 3, 70, 70), (1, 2, 5, 69), False),
]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("mode,a_sizes,b_sizes,index,skipped", NON_FINITE_CASES)
def test_causal_product_non_finite_matches_torch(
    mode: str,
    a_sizes: tuple[int, ...],
    b_sizes: tuple[int, ...],
    index: tuple[int, ...],
    skipped: bool,
    bad: float,
) -> None:
    """A NaN or an infinity in the operand that is not triangular: eager's 0 * x there is NaN in
    every row (column) of the result, which a block that skips it would miss: such calls run the
    whole product (docs/backend.md); they fail without that guard."""
    g = torch.Generator().manual_seed(a_sizes[-1] * 100 + b_sizes[-1])
    a = torch.randn(a_sizes, generator=g)
    b = torch.randn(b_sizes, generator=g)
    if mode == "rhs_lower":
        b = torch.tril(b)
        a[index] = bad
    else:
        a = torch.tril(a) if mode == "lhs_lower" else torch.triu(a)
        b[index] = bad
    want = torch.matmul(a, b)
    assert want.isnan().any() == (skipped or bad != bad)  # 0 * inf is NaN only where skipped
    cg = ir.compile(ir.parse(_graph(mode, a_sizes, b_sizes, tuple(want.shape), "f32")))
    (got,) = cg.run([a, b], framework="torch")
    torch.testing.assert_close(torch.as_tensor(got), want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert cg.stats["target_ops"] == 1


@pytest.mark.parametrize(
    "mode,a_sizes,b_sizes",
    [("lhs_upper", (2, 65, 33), (2, 33, 5)), ("rhs_lower", (2, 8, 45), (1, 45, 100))],
)
def test_zero_blocks_take_the_epilogue(
    mode: str, a_sizes: tuple[int, ...], b_sizes: tuple[int, ...]
) -> None:
    # Rows (columns) past the inner dim read only zeros; an epilogue fused into the product
    # (here exp(c + 1.5)) must still apply to them: exp(1.5), not 0.
    g = torch.Generator().manual_seed(7)
    a = torch.randn(a_sizes, generator=g)
    b = torch.randn(b_sizes, generator=g)
    a, b = (torch.triu(a), b) if mode == "lhs_upper" else (a, torch.tril(b))
    want = torch.exp(torch.matmul(a, b) + 1.5)
    c = _shape(tuple(want.shape))
    text = f"""
graph @f(%a: f32[{_shape(a_sizes)}], %b: f32[{_shape(b_sizes)}]) -> (f32[{c}]) {{
  %c = matmul(%a, %b) {{causal = "{mode}"}} : f32[{c}]
  %k = constant() {{value = 1.5}} : float
  %d = add(%c, %k) : f32[{c}]
  %e = exp(%d) : f32[{c}]
  return(%e)
}}"""
    (got,) = ir.compile(ir.parse(text)).run([a, b], framework="torch")
    torch.testing.assert_close(torch.as_tensor(got), want, rtol=1e-5, atol=1e-5)


def _masked_times(x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    mask = torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bool).triu(1)
    return (x.masked_fill(mask, 0.0) * y) @ v


def _masked_over(x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    mask = torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bool).triu(1)
    return (x.masked_fill(mask, 0.0) / y) @ v


def _tril_times(x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (torch.tril(x) * y) @ v


def _tril_scaled(x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (torch.tril(x) * 0.5 * torch.tril(y)) @ v + (torch.triu(x) / 4.0).transpose(1, 2) @ v


@pytest.mark.parametrize(
    "fn,bad",
    [(_masked_times, "inf"), (_masked_over, 0.0), (_tril_times, "inf"), (_tril_scaled, "nan")],
    ids=["masked-times", "masked-over", "tril-times", "tril-scaled"],
)
def test_triangular_products_match_eager_with_non_finite_inputs(fn: object, bad: object) -> None:
    """Triangular operands the user writes (masked_fill with the causal mask, tril, triu), times
    or over a full matrix with Inf (0) above the diagonal: eager's zeros there become NaN
    (0 * Inf, 0 / 0) and reach the product's rows, so that triangle must not be skipped (fails
    when causal-products trusts any factor); with a finite scale or another triangle (a NaN
    that tril drops) the product is marked and matches too."""
    import xjit

    g = torch.Generator().manual_seed(7)
    x, v = torch.randn(2, 70, 70, generator=g), torch.randn(2, 70, 8, generator=g)
    y = torch.randn(2, 70, 70, generator=g) + 3.0
    y[0, 5, 40] = float(bad)  # type: ignore[arg-type]
    want = fn(x, y, v)  # type: ignore[operator]
    got = xjit.jit(fn)(x, y, v)  # type: ignore[arg-type]
    assert want[0, 5].isnan().all() == (bad != "nan")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("mode,a_sizes,b_sizes", CASES)
def test_nan_line_of_the_triangular_operand(
    mode: str, a_sizes: tuple[int, ...], b_sizes: tuple[int, ...]
) -> None:
    """The attribute allows a line that is NaN throughout, zeros included (a softmax row over a
    NaN score; a column of its transpose): eager spreads it to other result rows (columns)
    through the zeros that blocks skip. Fails without the backend's first-element check for
    lhs_upper and rhs_lower."""
    g = torch.Generator().manual_seed(11)
    a, b = torch.randn(a_sizes, generator=g), torch.randn(b_sizes, generator=g)
    if mode == "lhs_lower":
        a = torch.tril(a)
        a[..., 40, :] = float("nan")
    elif mode == "lhs_upper":
        a = torch.triu(a)
        a[..., :, 5] = float("nan")
    else:
        b = torch.tril(b)
        b[..., 5, :] = float("nan")
    want = torch.matmul(a, b)
    cg = ir.compile(ir.parse(_graph(mode, a_sizes, b_sizes, tuple(want.shape), "f32")))
    (got,) = cg.run([a, b], framework="torch")
    torch.testing.assert_close(torch.as_tensor(got), want, rtol=1e-5, atol=1e-5, equal_nan=True)


def _head_view(buffer: torch.Tensor, part: int) -> torch.Tensor:
    """Part `part` of a fused [8, 128, 768] q/k/v buffer as [8, 4, 128, 64] heads: strided, as a
    GPT block's attention reads it."""
    return buffer[..., part * 256 : (part + 1) * 256].view(8, 128, 4, 64).transpose(1, 2)


# (mode, which operand is the strided head view, the bad entry's index in it): entries some
# block skips (a row only the last block reads, for lhs_lower; the first column of qᵀ, for
# rhs_lower).
LARGE_STRIDED_CASES = [
    ("lhs_lower", (7, 3, 127, 63)),
    ("lhs_lower", (0, 0, 100, 0)),
    ("lhs_upper", (5, 1, 0, 17)),
    ("rhs_lower", (3, 2, 40, 0)),
    ("rhs_lower", None),
]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("mode,index", LARGE_STRIDED_CASES)
def test_large_strided_operand_scan(mode: str, index: tuple[int, ...] | None, bad: float) -> None:
    """The operand that is not triangular, a strided head view of a fused buffer at GPT's sizes,
    is scanned where blocks skip in runs split over the kernel threads: a NaN or an infinity
    anywhere in that part makes the call run the whole product, as eager computes it."""
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(8, 128, 768, generator=g)
    tri = torch.rand(8, 4, 128, 128, generator=g)
    if mode == "rhs_lower":
        a, b = _head_view(qkv, 0).transpose(-1, -2), torch.tril(tri)  # qᵀ [8,4,64,128]
    else:
        a, b = (torch.tril(tri) if mode == "lhs_lower" else torch.triu(tri)), _head_view(qkv, 2)
    if index is not None:
        (a if mode == "rhs_lower" else b)[index] = bad
    want = torch.matmul(a, b)
    assert want.isnan().any() == (index is not None)
    cg = ir.compile(ir.parse(_graph(mode, tuple(a.shape), tuple(b.shape), tuple(want.shape), "f32")))
    (got,) = cg.run([a, b], framework="torch")
    torch.testing.assert_close(torch.as_tensor(got), want, rtol=1e-5, atol=1e-5, equal_nan=True)
