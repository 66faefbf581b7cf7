"""The f32 sin, cos, pow and atan2 of the LLVM backend (llvm_trig.cpp, llvm_math.cpp) against
PyTorch eager: values within f32 rounding over wide ranges (huge arguments of sin / cos too), the
special values (NaN, infinities, signed zeros, subnormals, pow's and atan2's C99 cases) exactly,
and a rotary-embedding expression through xjit.jit."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import torch

import xjit
import xjit.ir as ir

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from bench.vector_math import rotary  # noqa: E402 (the benchmark's expression)

SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 2.5, -2.5,
            3.0, -3.0, 1e-40, -1e-40, 1e30, -1e30, 3.4e38, 16777216.0, 1048576.0]

UNARY = """
graph @trig(%x: f32[{n}]) -> (f32[{n}], f32[{n}]) {{
  %s = sin(%x) : f32[{n}]
  %c = cos(%x) : f32[{n}]
  return(%s, %c)
}}"""

BINARY = """
graph @binary(%a: f32[{n}], %b: f32[{n}]) -> (f32[{n}], f32[{n}]) {{
  %p = pow(%a, %b) : f32[{n}]
  %t = atan2(%a, %b) : f32[{n}]
  return(%p, %t)
}}"""


def run_graph(text: str, *inputs: torch.Tensor) -> list[torch.Tensor]:
    cg = ir.compile(ir.parse(text.format(n=inputs[0].numel())))
    assert cg.stats["target_ops"] > 0  # a native kernel, not the reference interpreter
    return [torch.as_tensor(t) for t in cg.run(list(inputs), framework="torch")]


def assert_same_specials(got: torch.Tensor, want: torch.Tensor) -> None:
    """NaN where eager has NaN; zeros and infinities bit-equal (sign included)."""
    assert torch.equal(got.isnan(), want.isnan())
    exact = (want == 0) | want.isinf()
    assert torch.equal(got[exact], want[exact])
    assert torch.equal(got[exact].signbit(), want[exact].signbit())


def test_sin_cos_match_eager() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.cat([
        torch.linspace(-20, 20, 20001),
        torch.randn(4096, generator=g) * 1e4,
        torch.randn(4096, generator=g) * 1e7,  # across the 2^20 reduction switch
        torch.randint(-(2**31), 2**31 - 1, (4096,), generator=g).view(torch.float32),  # any bits
        torch.tensor(SPECIALS),
    ])
    s, c = run_graph(UNARY, x)
    for got, want in ((s, torch.sin(x)), (c, torch.cos(x))):
        assert_same_specials(got, want)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_sin_cos_strided_odd_sizes_fused_match_eager() -> None:
    """sin / cos are calls of module functions with vector variants (llvm_trig.cpp): a transposed
    input runs the kernel's general version (scalar calls), odd sizes leave a scalar remainder after
    the vector loop, and specials and huge values sit among ordinary lanes, so one vector needs both
    reductions; several uses in one fused kernel share one function."""
    g = torch.Generator().manual_seed(3)
    for rows, cols in ((37, 29), (5, 3), (64, 17)):
        base = torch.randn(cols, rows, generator=g) * 6
        flat = base.view(-1)
        picks = torch.randint(0, flat.numel(), (len(SPECIALS),), generator=g)
        flat[picks] = torch.tensor(SPECIALS)
        x = base.t()  # [rows, cols], not contiguous
        fn = xjit.jit(lambda a: torch.sin(a) * torch.cos(a * 3) + torch.sin(a + 1))
        got = fn(x)
        want = torch.sin(x) * torch.cos(x * 3) + torch.sin(x + 1)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)
        for got1, want1 in ((xjit.jit(_sin)(x), torch.sin(x)), (xjit.jit(_cos)(x), torch.cos(x))):
            assert_same_specials(got1, want1)
            torch.testing.assert_close(got1, want1, rtol=1e-6, atol=1e-6, equal_nan=True)


def _sin(a: torch.Tensor) -> torch.Tensor:
    return torch.sin(a)


def _cos(a: torch.Tensor) -> torch.Tensor:
    return torch.cos(a)


def test_pow_atan2_match_eager() -> None:
    g = torch.Generator().manual_seed(1)
    n = 8192
    a = torch.cat([
        torch.rand(n, generator=g) * 10,
        torch.randn(n, generator=g) * 3,
        torch.tensor([p for p, _ in itertools.product(SPECIALS, SPECIALS)]),
    ])
    b = torch.cat([
        torch.randn(n, generator=g) * 8,
        torch.randint(-12, 13, (n,), generator=g).float(),  # negative bases: integer exponents
        torch.tensor([q for _, q in itertools.product(SPECIALS, SPECIALS)]),
    ])
    p, t = run_graph(BINARY, a, b)
    for got, want in ((p, torch.pow(a, b)), (t, torch.atan2(a, b))):
        assert_same_specials(got, want)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-44, equal_nan=True)


def test_rotary_embedding_matches_eager() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 128, 64, generator=g)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
    got = xjit.jit(rotary)(x, inv_freq)
    torch.testing.assert_close(got, rotary(x, inv_freq), rtol=1e-5, atol=1e-5)
