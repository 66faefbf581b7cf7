"""Number constants folded into native kernels: pow by a constant 2 or 3 (GPT-2's gelu, RMSNorm's
variance) computed as products like PyTorch's CPU kernel, and other constant exponents through
pow, against PyTorch on values including NaN, infinities and signed zeros."""

from __future__ import annotations

import math

import torch

import xjit.ir as ir

GRAPH = """
graph @powers(%x: f32[4,64]) -> (f32[4,64], f32[4,64], f32[4,64], f32[4,64]) {
  %two = constant() {value = 2.0} : float
  %three = constant() {value = 3.0} : float
  %other = constant() {value = 1.7} : float
  %k = constant() {value = 0.044715} : float
  %a = pow(%x, %two) : f32[4,64]
  %b = pow(%x, %three) : f32[4,64]
  %c = pow(%x, %other) : f32[4,64]
  %d = mul(%k, %b) : f32[4,64]
  return(%a, %b, %c, %d)
}"""


def test_constant_exponents_match_pytorch() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=g) * 3
    x[0, :6] = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, 1e30])
    cg = ir.compile(ir.parse(GRAPH))  # the default pipeline: one fused kernel
    a, b, c, d = (torch.as_tensor(t) for t in cg.run([x], framework="torch"))
    assert cg.stats["target_ops"] > 0
    torch.testing.assert_close(a, torch.pow(x, 2.0), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(b, torch.pow(x, 3.0), rtol=1e-6, atol=0, equal_nan=True)
    torch.testing.assert_close(c, torch.pow(x, 1.7), rtol=1e-6, atol=1e-7, equal_nan=True)
    torch.testing.assert_close(d, 0.044715 * torch.pow(x, 3.0), rtol=1e-6, atol=0, equal_nan=True)
