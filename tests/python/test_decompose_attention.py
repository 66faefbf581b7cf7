"""decompose-attention through xjit.ir.compile against PyTorch's scaled_dot_product_attention:
no mask, float and bool masks with fully masked rows, is_causal, and NaN propagation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import xjit.ir as ir

GRAPH = """
graph @attn(%q: f32[2,3,5,4], %k: f32[2,3,6,4], %v: f32[2,3,6,8], %bm: bool[5,6],
            %fm: f32[2,1,5,6]) -> (f32[2,3,5,8], f32[2,3,5,8], f32[2,3,5,8], f32[2,3,5,8]) {
  %a = scaled_dot_product_attention(%q, %k, %v) : f32[2,3,5,8]
  %b = scaled_dot_product_attention(%q, %k, %v, %bm) : f32[2,3,5,8]
  %c = scaled_dot_product_attention(%q, %k, %v, %fm) {scale = 0.25} : f32[2,3,5,8]
  %d = scaled_dot_product_attention(%q, %k, %v) {is_causal = true} : f32[2,3,5,8]
  return(%a, %b, %c, %d)
}"""


def _inputs(nan: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 5, 4, generator=g), torch.randn(2, 3, 6, 4, generator=g)
    v = torch.randn(2, 3, 6, 8, generator=g)
    bm = torch.rand(5, 6, generator=g) > 0.4
    bm[2] = False  # a fully masked row: zeros, as torch's safe softmax
    fm = torch.randn(2, 1, 5, 6, generator=g)
    fm[1, 0, 3] = -math.inf
    if nan:
        q[0, 0, 1, 1] = math.nan
    return [q, k, v, bm, fm]


@pytest.mark.parametrize("nan", [False, True], ids=["finite", "nan"])
def test_decomposed_attention_matches_pytorch(nan: bool) -> None:
    q, k, v, bm, fm = ins = _inputs(nan)
    cg = ir.compile(ir.parse(GRAPH), pipeline="decompose-attention,fuse,plan-memory")
    got = cg.run(ins, framework="torch")
    want = [
        F.scaled_dot_product_attention(q, k, v),
        F.scaled_dot_product_attention(q, k, v, bm),
        F.scaled_dot_product_attention(q, k, v, fm, scale=0.25),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ]
    assert cg.stats["target_ops"] > 0  # 0 when the attentions stay reference kernels
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.as_tensor(g), w, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("nan", [False, True], ids=["finite", "nan"])
def test_reference_attention_matches_pytorch(nan: bool) -> None:
    """The reference kernel (no decomposition): a NaN query must give NaN rows, as in PyTorch."""
    q, k, v, bm, fm = ins = _inputs(nan)
    got = ir.run(ir.parse(GRAPH), [t.numpy() for t in ins])
    want = [
        F.scaled_dot_product_attention(q, k, v),
        F.scaled_dot_product_attention(q, k, v, bm),
        F.scaled_dot_product_attention(q, k, v, fm, scale=0.25),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.as_tensor(g), w, rtol=1e-5, atol=1e-6, equal_nan=True)
